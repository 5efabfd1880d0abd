"""Read the records RocketMQ's encoder wrote (rocketmq-records.bin) with Wharf's own decoder and recovery
check, and compare every field with rocketmq-records.json.

    wharf_reads.py rocketmq-records.bin rocketmq-records.json

Prints every difference; exits 1 if there is any.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import sys
from pathlib import Path

from app.store.record import check_record, decode_record
from app.store.record_format import decode_host


def host(text: str) -> tuple[str, int]:
    address, _, port = text.rpartition(":")
    return str(ipaddress.ip_address(address.strip("[]"))), int(port)


def main() -> None:
    data = Path(sys.argv[1]).read_bytes()
    described = json.loads(Path(sys.argv[2]).read_text())["records"]
    differences = []
    for number, want in enumerate(described):
        where = f"record {number} @{want['offset']} ({want['what']})"
        try:
            got = decode_record(data, want["offset"], check_crc=True)
        except Exception as exc:  # noqa: BLE001 - every refusal is a finding
            differences.append(f"{where}: Wharf's decode_record refuses it: {exc}")
            continue
        checked = check_record(data[: want["offset"] + want["totalSize"]], want["offset"], want["offset"])
        if checked is None or checked.size != want["totalSize"]:
            differences.append(f"{where}: Wharf's recovery check (check_record) refuses it: {checked}")
        fields = {
            "totalSize": got.size,
            "bodyCRC": got.body_crc,
            "queueId": got.queue_id,
            "flag": got.flag,
            "queueOffset": got.queue_offset,
            "commitLogOffset": got.physical_offset,
            "sysFlag": got.sysflag,
            "bornTimestamp": got.born_timestamp,
            "bornHost": host("{}:{}".format(*decode_host(got.born_host))),
            "storeTimestamp": got.store_timestamp,
            "storeHost": host("{}:{}".format(*decode_host(got.store_host))),
            "reconsumeTimes": got.reconsume_times,
            "preparedTransactionOffset": got.prepared_transaction_offset,
            "bodyBase64": base64.b64encode(got.body).decode(),
            "topic": got.topic,
            "properties": got.properties,
            "msgId": got.msg_id,
        }
        for field, value in fields.items():
            expected = host(want[field]) if field.endswith("Host") else want[field]
            if value != expected:
                differences.append(f"{where}: {field}: RocketMQ wrote {expected!r}, Wharf reads {value!r}")
    for text in differences:
        print("WHARF-READS  " + text)
    print(f"   Wharf's decoder on {len(described)} RocketMQ-encoded records: {len(differences)} differences")
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
