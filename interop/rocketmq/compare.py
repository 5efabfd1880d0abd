"""Compare what RocketMQ's classes read from a Wharf store (Check.java's JSON lines) with what Wharf's HTTP
API answered about the same messages (make_store.py's api.json), field by field.

    compare.py CHECK.jsonl API_DIR

Prints every difference, one line each, and exits 1 if there is any (0 otherwise). Known differences
(IPv6 born hosts, which Wharf stores as 0.0.0.0:0 for now) are printed and counted apart.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import sys
from collections import defaultdict
from pathlib import Path

RESERVED = ("TAGS", "KEYS", "UNIQ_KEY")
SYSFLAG_TRANSACTION_MASK = 0xC  # MessageSysFlag: PREPARED 0x4, COMMIT 0x8, ROLLBACK 0xC
ROLLBACK = 0xC


def host(text: str) -> tuple[str, int]:
    """'1.2.3.4:5', '[::1]:5' or '0:0:0:0:0:0:0:1:5' as (normalised address, port)."""
    address, _, port = text.rpartition(":")
    return str(ipaddress.ip_address(address.strip("[]"))), int(port)


def message_id_offset(msg_id: str) -> int:
    return int(msg_id[-16:], 16)


class Comparison:
    def __init__(self, check_lines: list[dict], api: dict, api_dir: Path) -> None:
        self.api, self.api_dir = api, api_dir
        self.by_kind: dict[str, list[dict]] = defaultdict(list)
        for line in check_lines:
            self.by_kind[line["kind"]].append(line)
        self.records = {r["offset"]: r for r in self.by_kind["record"]}
        self.by_msg_id = {r["msgId"]: r for r in self.records.values()}
        self.differences: list[str] = []
        self.known: list[str] = []
        self.checked: dict[str, int] = defaultdict(int)

    def diff(
        self,
        where: str,
        field: str,
        rocketmq: object,
        wharf: object,
        known: str | None = None,
        sides: tuple[str, str] = ("RocketMQ reads", "Wharf's API answers"),
    ) -> None:
        text = f"{where}: {field}: {sides[0]} {rocketmq!r}, {sides[1]} {wharf!r}"
        (self.known if known else self.differences).append(text + (f"  [known: {known}]" if known else ""))

    # --- one API message object against the record RocketMQ decoded ----------------------------------------

    def message(self, where: str, m: dict) -> None:
        self.checked["API message objects"] += 1
        record = self.by_msg_id.get(m["msg_id"])
        if record is None:
            loose = self.records.get(message_id_offset(m["msg_id"]))
            self.diff(where, "msg_id", loose["msgId"] if loose else None, m["msg_id"])
            if loose is None:
                return
            record = loose
        where = f"{where} [{record['topic']}/{record['queueId']}#{record['queueOffset']} @{record['offset']}]"
        props = record["properties"]
        body = base64.b64decode(record["bodyBase64"])
        api_body = base64.b64decode(m["body"]) if m["encoding"] == "base64" else m["body"].encode()
        checks = {
            "topic": (record["topic"], m["topic"]),
            "queue_id": (record["queueId"], m["queue_id"]),
            "queue_offset": (record["queueOffset"], m["queue_offset"]),
            "commit log offset (from msg_id)": (record["commitLogOffset"], message_id_offset(m["msg_id"])),
            "store host (from msg_id)": (host(record["storeHost"]), msg_id_host(m["msg_id"])),
            "body": (body, api_body),
            "tags": (props.get("TAGS", ""), m["tags"]),
            "keys": ([k for k in props.get("KEYS", "").split(" ") if k], m["keys"]),
            "unique_id": (props.get("UNIQ_KEY", ""), m["unique_id"]),
            "properties (without TAGS, KEYS, UNIQ_KEY)": (
                {k: v for k, v in props.items() if k not in RESERVED},
                m["properties"],
            ),
            "born_timestamp": (record["bornTimestamp"], m["born_timestamp"]),
            "store_timestamp": (record["storeTimestamp"], m["store_timestamp"]),
            "reconsume_times": (record["reconsumeTimes"], m["reconsume_times"]),
        }
        for field, (rocketmq, wharf) in checks.items():
            self.checked["fields"] += 1
            if rocketmq != wharf:
                if field == "body":
                    rocketmq, wharf = (
                        f"{len(rocketmq)} bytes {rocketmq[:24]!r}...",
                        f"{len(wharf)} bytes {wharf[:24]!r}...",
                    )
                self.diff(where, field, rocketmq, wharf)
        try:
            body.decode("utf-8")
            encoding = "utf8"
        except UnicodeDecodeError:
            encoding = "base64"
        self.checked["fields"] += 1
        if encoding != m["encoding"]:
            self.diff(where, "encoding (utf8 exactly when the body is valid UTF-8)", encoding, m["encoding"])

    # --- the API's answers ----------------------------------------------------------------------------------

    def produced(self) -> None:
        """Produce answers, and the fields the API does not show (born host, flag, born time, CRC) against
        what the producer sent."""
        by_unique = defaultdict(list)
        for r in self.records.values():
            by_unique[r["properties"].get("UNIQ_KEY")].append(r)
        for request in self.api["produced"]:
            for number, (result, expect) in enumerate(
                zip(request["results"], request["expect"], strict=True)
            ):
                where = f"produce {request['label']!r} message {number}"
                self.checked["produce answers"] += 1
                record = self.by_msg_id.get(result["msg_id"])
                if record is None:
                    self.diff(where, "msg_id names a record", None, result["msg_id"])
                    continue
                props = record["properties"]
                real_queue = int(props.get("REAL_QID", record["queueId"]))
                self.check(where, "unique_id", props.get("UNIQ_KEY"), result["unique_id"])
                self.check(
                    where, "queue_id (REAL_QID for a delayed or half message)", real_queue, result["queue_id"]
                )
                delayed = record["topic"] in (
                    "SCHEDULE_TOPIC_XXXX",
                    "rmq_sys_wheel_timer",
                    "RMQ_SYS_TRANS_HALF_TOPIC",
                )
                self.check(
                    where, "queue_offset", None if delayed else record["queueOffset"], result["queue_offset"]
                )
                if record["topic"] == "SCHEDULE_TOPIC_XXXX":
                    # The ConsumeQueue tag code RocketMQ's dispatch computes is the delivery time.
                    self.check(
                        where,
                        "deliver_at_ms (RocketMQ: ScheduleMessageService.computeDeliverTimestamp)",
                        record["dispatch"]["tagsCode"],
                        result.get("deliver_at_ms"),
                    )
                elif record["topic"] == "rmq_sys_wheel_timer":
                    self.check(
                        where,
                        "deliver_at_ms (TIMER_OUT_MS)",
                        int(props["TIMER_OUT_MS"]),
                        result.get("deliver_at_ms"),
                    )
                # Every record of this message (a delayed one is stored twice): what the producer sent
                # against what RocketMQ reads; the API does not show these fields.
                sent = ("the producer sent", "RocketMQ reads")
                for copy in by_unique[props.get("UNIQ_KEY")]:
                    at = f"{where} record @{copy['offset']} ({copy['topic']})"
                    self.check(at, "flag", expect.get("flag", 0), copy["flag"], sent)
                    if "born_timestamp" in expect:
                        self.check(
                            at, "born_timestamp", expect["born_timestamp"], copy["bornTimestamp"], sent
                        )
                    expected_host = host(request["born_host_expected"])
                    self.checked["fields"] += 1
                    if host(copy["bornHost"]) != expected_host:
                        known = None
                        if (
                            ":" in expected_host[0]
                            and copy["bornHost"] == "0.0.0.0:0"
                            and not copy["sysFlag"] & 0x10
                        ):
                            known = "Wharf stores an IPv6 producer as 0.0.0.0:0 (no sysflag 0x10 layout yet)"
                        self.diff(
                            at,
                            "born host",
                            request["born_host_expected"],
                            copy["bornHost"],
                            known,
                            ("the producer connected from", "RocketMQ reads"),
                        )
                    self.check(
                        at,
                        "body CRC",
                        copy["bodyCRCComputed"],
                        copy["bodyCRC"],
                        ("UtilAll.crc32(body) is", "the record's BODYCRC is"),
                    )

    def check(
        self,
        where: str,
        field: str,
        rocketmq: object,
        wharf: object,
        sides: tuple[str, str] = ("RocketMQ reads", "Wharf's API answers"),
    ) -> None:
        self.checked["fields"] += 1
        if rocketmq != wharf:
            self.diff(where, field, rocketmq, wharf, sides=sides)

    def pulls(self) -> None:
        cq = defaultdict(list)
        for e in self.by_kind["cq"]:
            cq[f"{e['topic']}/{e['queueId']}"].append(e["commitLogOffset"])
        queues = {f"{q['topic']}/{q['queueId']}": q for q in self.by_kind["cq-queue"]}
        broker = defaultdict(list)
        for p in self.by_kind["pull"]:
            broker[f"{p['topic']}/{p['queueId']}"].append(p["offset"])
        for name, pull in self.api["pulls"].items():
            where = f"pull {name}"
            q = queues.get(name)
            if q is None:
                self.diff(where, "queue exists in consumequeue/", None, pull)
                continue
            self.check(where, "min_offset", q["minOffset"], pull["min_offset"])
            self.check(where, "max_offset", q["maxOffset"], pull["max_offset"])
            offsets = [message_id_offset(m["msg_id"]) for m in pull["messages"]]
            self.check(where, "messages (CommitLog offsets, in order) vs the ConsumeQueue", cq[name], offsets)
            self.check(where, "messages vs DefaultMessageStore.getMessage", broker[name], offsets)
            for m in pull["messages"]:
                self.message(where, m)
            for headers in self.api["records_pulls"][name]["headers"]:
                self.check(
                    where + " (binary)",
                    "X-Wharf-Min-Offset",
                    q["minOffset"],
                    int(headers["x-wharf-min-offset"]),
                )
                self.check(
                    where + " (binary)",
                    "X-Wharf-Max-Offset",
                    q["maxOffset"],
                    int(headers["x-wharf-max-offset"]),
                )
        api_queues = {
            f"{t}/{q['queue_id']}": q for t, doc in self.api["queues"].items() for q in doc["queues"]
        }
        for name, q in api_queues.items():
            rocketmq = queues.get(name)
            self.check(
                f"GET queues {name}",
                "min_offset, max_offset",
                (rocketmq["minOffset"], rocketmq["maxOffset"]) if rocketmq else None,
                (q["min_offset"], q["max_offset"]),
            )
        user_queues = {n for n in queues if n.split("/")[0] in self.api["topics"]}
        self.check(
            "topics",
            "user queues with a consumequeue/ directory vs queues the API lists",
            sorted(user_queues - set(api_queues)),
            [],
        )
        # The binary pull answers, which Check.java decoded and compared byte for byte.
        for r in self.by_kind["api-record"]:
            self.checked["binary pull records"] += 1
            if not r.get("bytesEqualCommitLog"):
                self.diff(
                    f"binary pull {r['file']} @{r['offset']}",
                    "record bytes",
                    "the CommitLog's",
                    "other bytes",
                )

    def lookups(self) -> None:
        for msg_id, m in self.api["by_id"].items():
            if "http_status" in m:
                record = self.by_msg_id.get(msg_id)
                self.diff(
                    f"GET /v1/messages/{msg_id}",
                    "found",
                    f"a record @{record['offset']} ({record['topic']})" if record else None,
                    m,
                )
                continue
            self.check(f"GET /v1/messages/{msg_id}", "msg_id", msg_id, m["msg_id"])
            self.message(f"GET /v1/messages/{msg_id}", m)
        # Keys: RocketMQ's index files under "topic#key" (IndexService.buildIndex: the unique key and
        # every word of KEYS, rollbacks excepted); queryMessage's answer where Check.java asked.
        expected = defaultdict(set)
        for r in self.records.values():
            if r["sysFlag"] & SYSFLAG_TRANSACTION_MASK == ROLLBACK:
                continue
            for key in [r["properties"].get("UNIQ_KEY"), *r["properties"].get("KEYS", "").split(" ")]:
                if key:
                    expected[f"{r['topic']}#{key}"].add(r["offset"])
        queried = defaultdict(set)
        for q in self.by_kind["broker-query"]:
            queried[f"{q['topic']}#{q['key']}"] |= set(q["found"])
        for name, answer in self.api["by_key"].items():
            where = f"GET key {name}"
            got = {message_id_offset(m["msg_id"]) for m in answer["messages"]}
            self.check(
                where,
                "messages (CommitLog offsets) vs the records filed under the key",
                sorted(expected[name]),
                sorted(got),
            )
            if name in queried:
                self.check(
                    where, "messages vs DefaultMessageStore.queryMessage", sorted(queried[name]), sorted(got)
                )
            for m in answer["messages"]:
                self.message(where, m)

    def rocketmq_problems(self) -> None:
        (summary,) = self.by_kind["summary"]
        for text in summary["problems"]:
            self.differences.append(f"RocketMQ's check: {text}")


def msg_id_host(msg_id: str) -> tuple[str, int]:
    raw = bytes.fromhex(msg_id[:16])
    return str(ipaddress.ip_address(raw[:4])), int.from_bytes(raw[4:8], "big")


def main() -> None:
    check_lines = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line.strip()]
    api_dir = Path(sys.argv[2])
    comparison = Comparison(check_lines, json.loads((api_dir / "api.json").read_text()), api_dir)
    comparison.rocketmq_problems()
    comparison.produced()
    comparison.pulls()
    comparison.lookups()
    print("compared: " + ", ".join(f"{v} {k}" for k, v in comparison.checked.items()))
    for text in comparison.known:
        print("KNOWN  " + text)
    for text in comparison.differences:
        print("DIFF   " + text)
    print(f"{len(comparison.differences)} differences, {len(comparison.known)} known differences")
    sys.exit(1 if comparison.differences else 0)


if __name__ == "__main__":
    main()
