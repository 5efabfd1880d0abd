"""Records written by RocketMQ 4.9.8's own encoder (``MessageDecoder.encode``, run by
interop/rocketmq; the bytes and every field RocketMQ gives them are checked in there): Wharf's
decoder and recovery check, compiled and Python, read each field as RocketMQ wrote it, IPv6 hosts
and a compressed body included, and a store whose CommitLog holds them opens with all of them."""

from __future__ import annotations

import base64
import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from app.store import MessageStore, StoreConfig
from app.store import record as record_module
from app.store.record import decode_record
from app.store.record_format import decode_host

INTEROP = Path(__file__).resolve().parents[2] / "interop" / "rocketmq"
DATA = (INTEROP / "rocketmq-records.bin").read_bytes()
RECORDS: list[dict[str, Any]] = json.loads((INTEROP / "rocketmq-records.json").read_text())["records"]


def host(text: str) -> tuple[str, int]:
    address, _, port = text.rpartition(":")
    return str(ipaddress.ip_address(address.strip("[]"))), int(port)


def test_the_records_cover_rocketmqs_shapes() -> None:
    flags = {record["sysFlag"] for record in RECORDS}
    assert {0x1, 0x8, 0x10, 0x30} <= flags  # compressed, committed, IPv6 born host, both IPv6
    assert sum(record["totalSize"] for record in RECORDS) == len(DATA)


@pytest.mark.parametrize("want", RECORDS, ids=[record["what"] for record in RECORDS])
@pytest.mark.parametrize("check", [record_module.check_record, record_module.python_check_record])
def test_wharf_reads_every_field_rocketmq_wrote(want: dict[str, Any], check: Any) -> None:
    offset, size = want["offset"], want["totalSize"]
    checked = check(DATA[: offset + size], offset, offset)
    assert checked is not None and checked.size == size
    assert (checked.topic, checked.queue_id, checked.queue_offset) == (
        want["topic"],
        want["queueId"],
        want["queueOffset"],
    )
    got = decode_record(DATA, offset, check_crc=True)
    assert {
        "bodyCRC": got.body_crc,
        "flag": got.flag,
        "commitLogOffset": got.physical_offset,
        "sysFlag": got.sysflag,
        "bornTimestamp": got.born_timestamp,
        "bornHost": host("{}:{}".format(*decode_host(got.born_host))),
        "storeTimestamp": got.store_timestamp,
        "storeHost": host("{}:{}".format(*decode_host(got.store_host))),
        "reconsumeTimes": got.reconsume_times,
        "preparedTransactionOffset": got.prepared_transaction_offset,
        "bodyBase64": base64.b64encode(got.body).decode(),
        "properties": got.properties,
        "msgId": got.msg_id,
    } == {
        **{
            field: want[field] for field in ("bodyCRC", "flag", "commitLogOffset", "sysFlag", "bornTimestamp")
        },
        **{field: want[field] for field in ("storeTimestamp", "reconsumeTimes", "preparedTransactionOffset")},
        **{field: want[field] for field in ("bodyBase64", "properties", "msgId")},
        "bornHost": host(want["bornHost"]),
        "storeHost": host(want["storeHost"]),
    }


def test_a_commitlog_of_them_opens_with_every_record(tmp_path: Path) -> None:
    size = 64 * 1024
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(DATA + bytes(size - len(DATA)))
    (tmp_path / "abort").touch()
    store = MessageStore(
        StoreConfig(store_dir=tmp_path, commitlog_file_size=size, max_hash_slots=64, max_index_count=256)
    )
    store.open()
    try:
        assert store.commitlog.max_offset == len(DATA)
        for want in RECORDS:
            stored = store.look_message(want["offset"])
            assert stored is not None and stored.msg_id == want["msgId"]
    finally:
        store.close()
