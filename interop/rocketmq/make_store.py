"""Fill a running Wharf broker with varied messages, then save everything its HTTP API answers about them.

    make_store.py BASE_URL OUT_DIR

One request at a time, each on its own connection so that the client's port (the born host Wharf
should store) is known. Writes OUT_DIR/api.json and the binary pull answers under OUT_DIR/records/.
"""

from __future__ import annotations

import base64
import http.client
import json
import random
import struct
import sys
import time
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit

ORDERS, EVENTS, AUTO = "interop-orders", "interop-events", "interop-auto"
RECORDS_MEDIA_TYPE = "application/vnd.wharf.records"


class Api:
    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80

    def call(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> dict:
        """One request on a fresh connection: status, headers, the raw body, and the client address."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        conn.connect()
        client = conn.sock.getsockname()
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        raw = response.read()
        conn.close()
        return {
            "status": response.status,
            "headers": dict(response.getheaders()),
            "raw": raw,
            "client": client,
        }

    def json(
        self, method: str, path: str, document: object | None = None, headers: dict | None = None
    ) -> dict:
        body = None if document is None else json.dumps(document).encode()
        answer = self.call(method, path, body, {"content-type": "application/json", **(headers or {})})
        answer["json"] = json.loads(answer["raw"]) if answer["raw"] else None
        return answer


def batch(messages: list[dict]) -> bytes:
    """Wharf's binary produce batch (README "Message formats")."""

    def text(value: str, width: str = ">H") -> bytes:
        data = value.encode()
        return struct.pack(width, len(data)) + data

    out = b"WHB1" + struct.pack(">I", len(messages))
    for m in messages:
        props = "".join(f"{k}\x01{v}\x02" for k, v in m.get("properties", {}).items()).encode()
        out += struct.pack(">iiq", m.get("queue_id", -1), m.get("flag", 0), m.get("born_timestamp", 0))
        out += text(m.get("tags", "")) + text(" ".join(m.get("keys", []))) + text(m.get("unique_id", ""))
        out += text(m.get("sharding_key", "")) + struct.pack(">I", len(props)) + props
        out += struct.pack(">I", len(m["body"])) + m["body"]
    return out


def produce_all(api: Api) -> list[dict]:
    """Every produce request, with what was sent and what came back."""
    rng = random.Random(4_9_8)
    log: list[dict] = []

    def send(
        label: str,
        topic: str,
        *,
        document=None,
        raw=None,
        content_type=None,
        query=None,
        headers=None,
        expect_born_host=None,
        expect=None,
    ) -> dict:
        path = f"/v1/topics/{quote(topic)}/messages" + (f"?{urlencode(query, doseq=True)}" if query else "")
        if document is not None:
            answer = api.json("POST", path, document, headers)
        else:
            answer = api.call("POST", path, raw, {"content-type": content_type, **(headers or {})})
            answer["json"] = json.loads(answer["raw"])
        if answer["status"] != 200:
            raise SystemExit(f"{label}: HTTP {answer['status']} {answer['raw'][:300]!r}")
        client = answer["client"]
        entry = {
            "label": label,
            "topic": topic,
            "query": query,
            "sent_json": document,
            "sent_raw_base64": base64.b64encode(raw).decode() if raw is not None else None,
            "born_host_expected": expect_born_host or f"{client[0]}:{client[1]}",
            # Per message, fields the API does not show but the record must hold (default: flag 0).
            "expect": expect or [{"flag": 0} for _ in answer["json"]["results"]],
            "results": answer["json"]["results"],
        }
        log.append(entry)
        return entry

    for name, queues in ((ORDERS, 4), (EVENTS, 2)):
        api.json("POST", "/v1/topics", {"name": name, "queues": queues})

    send(
        "tags + 3 keys",
        ORDERS,
        document={
            "body": "hello",
            "tags": "TagA",
            "keys": ["order-1", "customer-7", "shared-key"],
            "queue_id": 0,
        },
    )
    send(
        "producer unique_id",
        ORDERS,
        document={
            "body": "again",
            "tags": "TagB",
            "keys": ["order-1"],
            "queue_id": 0,
            "unique_id": "payment-42",
        },
    )
    send(
        "JSON batch: user properties, non-ASCII, base64 body",
        ORDERS,
        document={
            "messages": [
                {
                    "body": '{"amount": 150}',
                    "tags": "TagA",
                    "keys": "order-2 order-3",
                    "properties": {"region": "eu", "amount": "150", "note": "café ☕"},
                    "queue_id": 1,
                },
                {
                    "body": "Grüße, 世界 🚀 ñ",
                    "tags": "标签-🚀",
                    "keys": ["ключ-1", "キー"],
                    "queue_id": 1,
                    "unique_id": "uid-ünï-1",
                    "properties": {"städt": "Zürich"},
                },
                {"body": "AAECAwQF/w==", "encoding": "base64", "tags": "BinJson", "queue_id": 1},
            ]
        },
    )
    send(
        "raw binary body, query fields",
        ORDERS,
        raw=bytes(range(256)) * 4,
        content_type="application/octet-stream",
        query=[
            ("tags", "Bin"),
            ("keys", "bin-1 bin-2"),
            ("property", "source:curl"),
            ("property", "lang:de"),
            ("unique_id", "bin-uid-1"),
            ("queue_id", "2"),
        ],
    )
    send(
        "100 KiB random binary body",
        ORDERS,
        raw=rng.randbytes(100 * 1024),
        content_type="application/octet-stream",
        query={"tags": "Big", "keys": "big-1", "queue_id": "2"},
    )
    send(
        "100 KiB text body",
        ORDERS,
        document={"body": "0123456789abcdef" * 6400, "tags": "BigText", "keys": ["big-2"], "queue_id": 3},
    )
    send("one-byte body, no tags or keys", ORDERS, document={"body": "x", "queue_id": 3})
    send(
        "delay_level 1 (1 s)",
        ORDERS,
        document={
            "body": "due in 1s",
            "tags": "TagD",
            "keys": ["delayed-1"],
            "queue_id": 3,
            "delay_level": 1,
        },
    )
    send(
        "delay_level 18 (2 h, still pending)",
        ORDERS,
        document={
            "body": "due in 2h",
            "tags": "TagD",
            "keys": ["delayed-18"],
            "queue_id": 3,
            "delay_level": 18,
        },
    )
    send(
        "delay_ms 800 (timer)",
        ORDERS,
        document={
            "body": "due in 800ms",
            "tags": "TagT",
            "keys": ["timer-1"],
            "queue_id": 2,
            "delay_ms": 800,
        },
    )
    send(
        "binary batch: flag, born timestamp, properties",
        EVENTS,
        content_type="application/vnd.wharf.batch",
        raw=batch(
            [
                {
                    "queue_id": 0,
                    "flag": 7,
                    "born_timestamp": 1_700_000_000_123,
                    "tags": "Ev",
                    "keys": ["ev-1", "shared-key"],
                    "unique_id": "ev-uid-1",
                    "properties": {"a": "1", "b": "two"},
                    "body": b"\x00\x01binary\xff",
                },
                {
                    "queue_id": 1,
                    "flag": 1 << 30,
                    "born_timestamp": 1_600_000_000_000,
                    "tags": "Ev",
                    "keys": ["ev-2"],
                    "body": b"second",
                },
                {
                    "queue_id": -1,
                    "sharding_key": "customer-9",
                    "keys": ["ev-3"],
                    "body": "dritte Nachricht ü".encode(),
                },
            ]
        ),
        expect=[
            {"flag": 7, "born_timestamp": 1_700_000_000_123},
            {"flag": 1 << 30, "born_timestamp": 1_600_000_000_000},
            {"flag": 0},
        ],
    )
    send(
        "NDJSON with sharding keys",
        EVENTS,
        content_type="application/x-ndjson",
        raw=(
            b'{"body": "nd-1", "sharding_key": "customer-9", "keys": ["nd-1"]}\n'
            b'{"body": "nd-2", "sharding_key": "customer-9", "tags": "Nd"}\n'
            b'{"body": "nd-3", "sharding_key": "customer-10", "properties": {"x": "y"}}\n'
        ),
    )
    send(
        "X-Forwarded-For IPv4 client",
        EVENTS,
        document={"body": "via proxy", "keys": ["proxy-4"], "queue_id": 0},
        headers={"x-forwarded-for": "192.0.2.44"},
        expect_born_host="192.0.2.44:0",
    )
    send(
        "X-Forwarded-For IPv6 client",
        EVENTS,
        document={"body": "via proxy v6", "keys": ["proxy-6"], "queue_id": 1},
        headers={"x-forwarded-for": "2001:db8::1"},
        expect_born_host="[2001:db8::1]:0",
    )
    txn = send(
        "transaction begin (committed below)",
        ORDERS,
        document={"body": "order 42 paid", "tags": "Txn", "keys": ["txn-1"], "queue_id": 0},
        query={"transaction": "begin", "producer_group": "interop"},
    )
    api.json("POST", f"/v1/transactions/{txn['results'][0]['transaction_id']}/commit")
    txn = send(
        "transaction begin (rolled back below)",
        ORDERS,
        raw=b"order 43 cancelled",
        content_type="application/octet-stream",
        query={"transaction": "begin", "producer_group": "interop", "keys": "txn-2", "queue_id": "1"},
    )
    api.json("POST", f"/v1/transactions/{txn['results'][0]['transaction_id']}/rollback")
    send(
        "auto-created topic, round robin",
        AUTO,
        document={
            "messages": [
                {"body": f"auto-{i}", "keys": [f"auto-{i}", "auto-all"], "tags": f"T{i % 2}"}
                for i in range(5)
            ]
        },
    )
    return log


def read_back(api: Api, out: Path, produced: list[dict]) -> dict:
    records_dir = out / "records"
    records_dir.mkdir(parents=True, exist_ok=True)
    topics = [t["name"] for t in api.json("GET", "/v1/topics?limit=1000")["json"]["topics"]]
    pulls, records_pulls, queues = {}, {}, {}
    for topic in topics:
        queues[topic] = api.json("GET", f"/v1/topics/{quote(topic)}/queues")["json"]
        for q in queues[topic]["queues"]:
            # Page through the queue from offset 0 as a consumer does, following next_offset (a pull,
            # like RocketMQ's getMessage, stops at the end of a ConsumeQueue file).
            base = f"/v1/topics/{quote(topic)}/queues/{q['queue_id']}/messages?max_messages=10000&offset="
            pages = [api.json("GET", base + "0")["json"]]
            while pages[-1]["status"] == "FOUND" and pages[-1]["next_offset"] < pages[-1]["max_offset"]:
                pages.append(api.json("GET", base + str(pages[-1]["next_offset"]))["json"])
            pull = dict(pages[0], messages=[m for page in pages for m in page["messages"]])
            pull["pages"] = [{k: v for k, v in page.items() if k != "messages"} for page in pages]
            pulls[f"{topic}/{q['queue_id']}"] = pull
            # The same pages as stored records (Accept: application/vnd.wharf.records).
            raw, headers = b"", []
            offset = 0
            for _ in pull["pages"]:
                answer = api.call("GET", base + str(offset), headers={"accept": RECORDS_MEDIA_TYPE})
                raw += answer["raw"]
                headers.append(
                    {k.lower(): v for k, v in answer["headers"].items() if k.lower().startswith("x-wharf-")}
                )
                offset = int(headers[-1]["x-wharf-next-offset"])
            name = f"{topic}-{q['queue_id']}.bin"
            (records_dir / name).write_bytes(raw)
            records_pulls[f"{topic}/{q['queue_id']}"] = {"file": f"records/{name}", "headers": headers}
    ids = {r["msg_id"] for p in produced for r in p["results"]}
    ids |= {m["msg_id"] for pull in pulls.values() for m in pull.get("messages", [])}
    by_id = {}
    for msg_id in sorted(ids):
        answer = api.json("GET", f"/v1/messages/{msg_id}")
        by_id[msg_id] = (
            answer["json"] if answer["status"] == 200 else {"http_status": answer["status"], **answer["json"]}
        )
    keys = set()
    for pull in pulls.values():
        for m in pull.get("messages", []):
            keys |= {(m["topic"], k) for k in m["keys"]} | {(m["topic"], m["unique_id"])}
    for p in produced:
        for r in p["results"]:
            keys.add((p["topic"], r["unique_id"]))
    by_key = {}
    for topic, key in sorted(keys):
        answer = api.json("GET", f"/v1/topics/{quote(topic)}/messages?{urlencode({'key': key, 'max': 1000})}")
        by_key[f"{topic}#{key}"] = answer["json"]
    return {
        "topics": topics,
        "queues": queues,
        "pulls": pulls,
        "records_pulls": records_pulls,
        "by_id": by_id,
        "by_key": by_key,
    }


def main() -> None:
    base_url, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    api = Api(base_url)
    produced = produce_all(api)
    # Wait for the 1 s level and the 800 ms timer message to reach their real topic (queue 3 and 2).
    deadline = time.time() + 30
    while time.time() < deadline:
        seen = set()
        for q in (2, 3):
            pull = api.json("GET", f"/v1/topics/{ORDERS}/queues/{q}/messages?offset=0&max_messages=1000")[
                "json"
            ]
            seen |= {k for m in pull.get("messages", []) for k in m["keys"]}
        if {"delayed-1", "timer-1"} <= seen:
            break
        time.sleep(0.5)
    else:
        print("warning: the delayed messages were not delivered within 30 s", file=sys.stderr)
    document = {"base_url": base_url, "produced": produced, **read_back(api, out, produced)}
    (out / "api.json").write_text(json.dumps(document, indent=1, ensure_ascii=False))
    count = sum(len(p["results"]) for p in produced)
    print(
        f"make_store: {len(produced)} produce requests, {count} messages; "
        f"{sum(len(p.get('messages', [])) for p in document['pulls'].values())} pulled back, "
        f"{len(document['by_id'])} ids and {len(document['by_key'])} keys looked up"
    )


if __name__ == "__main__":
    main()
