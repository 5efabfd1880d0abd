"""A CommitLog RocketMQ 4.9 wrote opens in Wharf: its records (laid out from RocketMQ's published
format, with IPv4 and IPv6 hosts, with and without the last property separator) pass recovery,
which builds their ConsumeQueues and index, and every read path answers them field for field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from app.codec import decode_records, message_json, messages_json, python_message_json
from app.store import GetMessageStatus, MessageStore, StoreConfig
from app.store.record_format import tags_hash
from tests.store.rocketmq_records import (
    BORN_V4,
    BORN_V6,
    NOW_MS,
    STORE_V4,
    STORE_V6,
    Host,
    rocketmq_record,
)

FILE_SIZE = 64 * 1024


def rocketmq_log() -> list[tuple[bytes, Host, dict[str, str]]]:
    """Six records of two queues of ``orders`` in one segment, every host form, as RocketMQ wrote
    them: (record, its store host, its properties)."""
    forms = [(BORN_V4, STORE_V4), (BORN_V6, STORE_V4), (BORN_V4, STORE_V6), (BORN_V6, STORE_V6)]
    log, offset, queue_offsets = [], 0, [0, 0]
    for n, (born, store) in enumerate(forms + forms[1:3]):
        queue_id = n % 2
        properties = {
            "TAGS": f"Tag{n % 3}",
            "KEYS": f"order-{n} shared",
            "UNIQ_KEY": f"U{n:04d}",
            "n": str(n),
        }
        encoded = "\x02".join(f"{name}\x01{value}" for name, value in properties.items()).encode()
        if n % 2:  # RocketMQ before 4.9.1 (and older Wharf stores) ended with a separator
            encoded += b"\x02"
        record = rocketmq_record(
            encoded,
            f"body {n} ünïcode".encode(),
            offset,
            queue_id=queue_id,
            queue_offset=queue_offsets[queue_id],
            born=born,
            store=store,
            store_timestamp=NOW_MS + n,
        )
        log.append((record, store, properties))
        offset += len(record)
        queue_offsets[queue_id] += 1
    return log


@pytest.fixture
def rocketmq_store(tmp_path: Path) -> Iterator[tuple[MessageStore, list[tuple[bytes, Host, dict[str, str]]]]]:
    log = rocketmq_log()
    segment = b"".join(record for record, _, _ in log)
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(segment + bytes(FILE_SIZE - len(segment)))
    (tmp_path / "abort").touch()  # RocketMQ stopped without a clean shutdown: recover every record
    config = StoreConfig(
        store_dir=tmp_path, commitlog_file_size=FILE_SIZE, max_hash_slots=64, max_index_count=256
    )
    store = MessageStore(config).open()
    try:
        yield store, log
    finally:
        store.close()


def test_recovery_keeps_every_record_and_builds_its_queues(
    rocketmq_store: tuple[MessageStore, list[tuple[bytes, Host, dict[str, str]]]],
) -> None:
    store, log = rocketmq_store
    assert store.commitlog.max_offset == sum(len(record) for record, _, _ in log)
    assert [store.max_offset("orders", q) for q in (0, 1)] == [3, 3]
    read = []
    for queue_id in (0, 1):
        result = store.get_message("orders", queue_id, 0, 32)
        assert result.status is GetMessageStatus.FOUND
        read.extend(bytes(record) for record in result.records)
    assert sorted(read) == sorted(record for record, _, _ in log)


def test_reads_answer_each_field_as_rocketmq_wrote_it(
    rocketmq_store: tuple[MessageStore, list[tuple[bytes, Host, dict[str, str]]]],
) -> None:
    store, log = rocketmq_store
    offset = 0
    for n, (record, host, properties) in enumerate(log):
        msg_id = (host.packed() + offset.to_bytes(8, "big")).hex().upper()
        answer = orjson.loads(message_json(record))
        assert answer == orjson.loads(python_message_json(record))
        assert answer == {
            "msg_id": msg_id,
            "unique_id": properties["UNIQ_KEY"],
            "topic": "orders",
            "queue_id": n % 2,
            "queue_offset": n // 2,
            "tags": properties["TAGS"],
            "keys": properties["KEYS"].split(),
            "properties": {"n": str(n)},
            "body": f"body {n} ünïcode",
            "encoding": "utf8",
            "born_timestamp": NOW_MS - 5,
            "store_timestamp": NOW_MS + n,
            "reconsume_times": 0,
        }
        offset += len(record)
    assert orjson.loads(messages_json([record for record, _, _ in log])) == [
        orjson.loads(python_message_json(record)) for record, _, _ in log
    ]
    # A binary pull answer, as clients decode it.
    decoded = decode_records(b"".join(record for record, _, _ in log))
    assert [(m.unique_id, m.store_host, m.tags) for m in decoded] == [
        (properties["UNIQ_KEY"], host.packed(), properties["TAGS"]) for _, host, properties in log
    ]


def test_the_rebuilt_index_and_queues_find_them_by_key_tag_and_time(
    rocketmq_store: tuple[MessageStore, list[tuple[bytes, Host, dict[str, str]]]],
) -> None:
    store, log = rocketmq_store
    found = store.query_message_by_key("orders", "shared", max_messages=32)
    assert sorted(m.unique_id for m in found) == sorted(p["UNIQ_KEY"] for _, _, p in log)
    for _, host, properties in log:
        (one,) = store.query_message_by_key("orders", properties["KEYS"].split()[0])
        assert (one.unique_id, one.store_host) == (properties["UNIQ_KEY"], host.packed())
        assert store.query_message_by_unique_id("orders", properties["UNIQ_KEY"]) is not None
    queue = store.queue("orders", 1)
    assert queue is not None
    assert [entry[3] for entry in queue.iter_entries(0)] == [tags_hash(log[n][2]["TAGS"]) for n in (1, 3, 5)]
    # The store timestamp is found wherever the born host puts it.
    assert store.search_offset("orders", 1, NOW_MS + 3) == 1
    assert store.search_offset("orders", 0, NOW_MS + 3) == 2
