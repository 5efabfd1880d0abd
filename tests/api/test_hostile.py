"""Hostile inputs against a real broker: each is answered a clear 4xx in the envelope (or, for a
request the HTTP parser cannot read, 400/414/431 in the envelope and the connection closed), never
a 5xx, and the broker keeps serving: a produce and a pull succeed after every one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from app.api.errors import ErrorCode
from app.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch
from tests.api.raw_http import exchange
from tests.api.server import BrokerProcess

TOPIC = "hostile"
JSON_BATCH_LIMIT = 10_000  # ProduceRequest.messages, app/api/schemas.py


@pytest.fixture(scope="module", autouse=True)
def hostile_topic(broker: BrokerProcess) -> None:
    httpx.post(f"{broker.url}/v1/topics", json={"name": TOPIC, "queues": 1}).raise_for_status()


def assert_still_serving(broker: BrokerProcess) -> None:
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        produced = client.post(f"/v1/topics/{TOPIC}/messages", json={"body": "still here", "queue_id": 0})
        assert produced.status_code == 200, produced.text
        offset = produced.json()["results"][0]["queue_offset"]
        pulled = client.get(f"/v1/topics/{TOPIC}/queues/0/messages", params={"offset": offset})
        assert pulled.status_code == 200 and pulled.json()["messages"][0]["body"] == "still here"


def request(head: bytes, body: bytes = b"", content_type: bytes | None = b"application/json") -> bytes:
    lines = [head, b"Host: x"]
    if content_type is not None:
        lines.append(b"Content-Type: " + content_type)
    if body:
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


PRODUCE = b"POST /v1/topics/hostile/messages HTTP/1.1"
HOSTILE = {
    "raw invalid utf-8 in the path": request(b"GET /v1/topics/\xff\xfe/queues HTTP/1.1"),
    "escaped invalid utf-8 in the path": request(b"GET /v1/topics/%FF%FE/queues HTTP/1.1"),
    "escaped invalid utf-8 in a produce's topic": request(
        b"POST /v1/topics/%FF%FE/messages HTTP/1.1", b'{"body": "x"}'
    ),
    "raw invalid utf-8 in the query": request(
        b"GET /v1/topics/hostile/queues/0/messages?offset=\xff HTTP/1.1"
    ),
    "escaped invalid utf-8 in the query": request(
        b"GET /v1/topics/hostile/queues/0/messages?offset=%FF&tags=%FF%FE HTTP/1.1"
    ),
    "invalid utf-8 in a JSON body": request(PRODUCE, b'{"body": "\xff\xfe"}'),
    "invalid utf-8 in a JSON batch": request(PRODUCE, b'{"messages": [{"body": "x", "tags": "\xc3\x28"}]}'),
    "invalid utf-8 in NDJSON": request(
        PRODUCE, b'{"body": "x"}\n{"body": "\xff"}\n', b"application/x-ndjson"
    ),
    "invalid utf-8 in a topic create": request(b"POST /v1/topics HTTP/1.1", b'{"name": "\xff\xfe"}'),
    "invalid utf-8 in an offset commit": request(
        b"PUT /v1/groups/g/offsets HTTP/1.1", b'{"offsets": [{"topic": "\xff", "queue_id": 0, "offset": 0}]}'
    ),
    "invalid utf-8 in the Content-Type": request(PRODUCE, b'{"body": "x"}', b"application/json\xff"),
    "invalid utf-8 in a header name": request(b"GET /healthz HTTP/1.1\r\nX-\xff: 1"),
    "a 100 KB header": request(b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 100_000),
    "a 100 KB query string": request(
        b"GET /v1/topics/hostile/queues/0/messages?tags=" + b"a" * 100_000 + b" HTTP/1.1"
    ),
    "a NUL in a header": request(b"GET /healthz HTTP/1.1\r\nX-Nul: a\x00b"),
    "a NUL in the path": request(b"GET /v1/topics/a%00b/queues HTTP/1.1"),
    "a NUL in a produce's topic": request(b"POST /v1/topics/a%00b/messages HTTP/1.1", b'{"body": "x"}'),
    "a NUL in a topic create": request(b"POST /v1/topics HTTP/1.1", b'{"name": "a\\u0000b"}'),
    "a NUL in the JSON bytes": request(PRODUCE, b'{"body": "x"\x00}'),
    "separators in a property": request(PRODUCE, b'{"body": "x", "properties": {"a\\u0001": "v\\u0002"}}'),
    "a body that is not JSON": request(PRODUCE, b"\x00\x01\x02"),
    "a JSON array": request(PRODUCE, b"[1, 2]"),
    "a JSON string as a topic create": request(b"POST /v1/topics HTTP/1.1", b'"orders"'),
    "deeply nested JSON": request(PRODUCE, b'{"body": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    "a huge number": request(
        b"PUT /v1/groups/g/offsets HTTP/1.1",
        b'{"offsets": [{"topic": "hostile", "queue_id": 0, "offset": 1' + b"0" * 5000 + b"}]}",
    ),
    "a huge queue id": request(
        b"GET /v1/topics/hostile/queues/99999999999999999999999/messages?offset=0 HTTP/1.1"
    ),
    "a negative content length": request(PRODUCE + b"\r\nContent-Length: -1"),
    "two content lengths": request(
        PRODUCE + b"\r\nContent-Length: 1\r\nContent-Length: 2", content_type=None
    ),
    "a method the parser does not know": request(b"BREW /v1/topics HTTP/1.1"),
    "not HTTP at all": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,
}

# Bytes a message may carry: stored as sent (a NUL is data; only the property separators \x01 and
# \x02 are refused), never a 5xx.
AS_DATA = {
    "escaped invalid utf-8 in a raw body's tags": request(
        PRODUCE[:-9] + b"?tags=%FF%FE&property=%FF:%FE HTTP/1.1", b"body", b"application/octet-stream"
    ),
    "a NUL in a tag": request(PRODUCE, b'{"body": "x", "tags": "a\\u0000b"}'),
    "a NUL in a property name": request(PRODUCE, b'{"body": "x", "properties": {"a\\u0000b": "v"}}'),
    "a NUL in a key": request(PRODUCE, b'{"body": "x", "keys": ["a\\u0000b"]}'),
    "a NUL in a unique id": request(PRODUCE, b'{"body": "x", "unique_id": "\\u0000"}'),
    "a NUL in the query": request(b"GET /v1/topics/hostile/queues/0/messages?offset=0&tags=a%00 HTTP/1.1"),
}


@pytest.mark.parametrize("raw", AS_DATA.values(), ids=AS_DATA.keys())
def test_odd_but_valid_data_is_taken_as_data(broker: BrokerProcess, raw: bytes) -> None:
    answer = exchange(broker.port, raw)
    assert answer.status == 200, (answer.status, answer.body)
    assert_still_serving(broker)


# What each produce of AS_DATA stored, as a pull shows the message.
READ_BACK: dict[str, Callable[[dict[str, Any]], object]] = {
    "a NUL in a tag": lambda message: message["tags"] == "a\u0000b",
    "a NUL in a property name": lambda message: message["properties"].get("a\u0000b") == "v",
    "a NUL in a key": lambda message: message["keys"] == ["a\u0000b"],
    "a NUL in a unique id": lambda message: message["unique_id"] == "\u0000",
}


@pytest.mark.parametrize("case", READ_BACK)
def test_odd_but_valid_data_reads_back_as_sent(
    broker: BrokerProcess, client: httpx.Client, case: str
) -> None:
    answer = exchange(broker.port, AS_DATA[case])
    assert answer.status == 200, (answer.status, answer.body)
    (result,) = orjson.loads(answer.body)["results"]
    pulled = client.get(
        f"/v1/topics/{TOPIC}/queues/{result['queue_id']}/messages",
        params={"offset": result["queue_offset"], "max_messages": 1},
    )
    (message,) = pulled.json()["messages"]
    assert READ_BACK[case](message), message


def test_a_nul_in_a_tag_reads_back_as_sent(client: httpx.Client) -> None:
    produced = client.post(
        f"/v1/topics/{TOPIC}/messages", json={"body": "x", "tags": "a\u0000b", "queue_id": 0}
    )
    offset = produced.json()["results"][0]["queue_offset"]
    pulled = client.get(
        f"/v1/topics/{TOPIC}/queues/0/messages",
        params={"offset": offset, "max_messages": 1, "tags": "a\u0000b"},
    )
    assert pulled.json()["messages"][0]["tags"] == "a\u0000b"


@pytest.mark.parametrize("raw", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_request_gets_a_4xx_envelope(broker: BrokerProcess, raw: bytes) -> None:
    answer = exchange(broker.port, raw)
    assert 400 <= answer.status < 500, (answer.status, answer.body)
    answer.envelope()
    assert_still_serving(broker)
    assert "Exception in ASGI application" not in broker.log()


def test_every_truncation_of_a_binary_batch_is_malformed(client: httpx.Client, broker: BrokerProcess) -> None:
    batch = encode_batch(
        [
            IncomingMessage(body=b"first", tags="TagA", keys=["k1", "k2"], properties={"p": "v"}, queue_id=0),
            IncomingMessage(body=b"second" * 10, unique_id="u-1", sharding_key="s"),
        ]
    )
    before = client.get(f"/v1/topics/{TOPIC}/queues/0/messages", params={"offset": 0}).json()["max_offset"]
    for cut in range(0, len(batch), 3):
        answer = client.post(
            f"/v1/topics/{TOPIC}/messages", content=batch[:cut], headers={"content-type": BATCH_MEDIA_TYPE}
        )
        assert answer.status_code == 400, (cut, answer.text)
        assert answer.json()["error_code"] == ErrorCode.MALFORMED_BATCH, (cut, answer.text)
    after = client.get(f"/v1/topics/{TOPIC}/queues/0/messages", params={"offset": 0}).json()["max_offset"]
    assert after == before
    assert_still_serving(broker)


def test_a_json_batch_one_past_its_count_limit(client: httpx.Client, broker: BrokerProcess) -> None:
    answer = client.post(
        f"/v1/topics/{TOPIC}/messages", json={"messages": [{"body": "x"}] * (JSON_BATCH_LIMIT + 1)}
    )
    assert answer.status_code == 422 and answer.json()["error_code"] == ErrorCode.VALIDATION_FAILED
    at_limit = client.post(
        f"/v1/topics/{TOPIC}/messages", json={"messages": [{"body": "x"}] * JSON_BATCH_LIMIT}
    )
    assert at_limit.status_code == 200
    assert_still_serving(broker)
