"""Every bad request gets the one envelope with the right code, and stores nothing."""

from __future__ import annotations

import inspect

import httpx
import pytest

from app.api.errors import BROKER_ERRORS, STORE_ERRORS, ErrorCode, code_for, from_broker
from app.broker import errors as broker_errors
from app.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch
from app.store import errors as store_errors
from app.store.record_format import encode_host


def assert_error(response: httpx.Response, code: ErrorCode) -> dict:
    body = response.json()
    assert set(body) == {"error_code", "message"}, body
    assert body["error_code"] == int(code), body
    assert response.status_code == int(code) // 100
    assert body["message"]
    return body


def messages_in(client: httpx.Client, topic: str) -> int:
    queues = client.get(f"/v1/topics/{topic}/queues").json()["queues"]
    return sum(queue["max_offset"] for queue in queues)


PRODUCE_CASES = [
    ("json", b"{not json", ErrorCode.MALFORMED_BODY),
    ("json", b"[1, 2]", ErrorCode.MALFORMED_BODY),
    ("json", b'{"messages": []}', ErrorCode.VALIDATION_FAILED),
    ("json", b'{"messages": [{"body": 5}]}', ErrorCode.VALIDATION_FAILED),
    ("json", b'{"messages": [{"body": "x", "surprise": 1}]}', ErrorCode.VALIDATION_FAILED),
    ("json", b'{"messages": [{"body": "x", "queue_id": -1}]}', ErrorCode.VALIDATION_FAILED),
    ("json", b'{"messages": [{"body": "x", "queue_id": 4}]}', ErrorCode.INVALID_QUEUE),
    ("json", b'{"messages": [{"body": ""}]}', ErrorCode.EMPTY_BODY),
    ("json", b'{"messages": [{"body": "!!", "encoding": "base64"}]}', ErrorCode.INVALID_BODY_ENCODING),
    ("json", b'{"messages": [{"body": "x", "properties": {"TAGS": "sneaky"}}]}', ErrorCode.INVALID_PROPERTY),
    ("json", b'{"messages": [{"body": "x", "properties": {"a\\u0001": "b"}}]}', ErrorCode.INVALID_PROPERTY),
    ("json", b'{"messages": [{"body": "x", "keys": ["two words"]}]}', ErrorCode.INVALID_PROPERTY),
    # RocketMQ's decoder drops a property with an empty value: refused rather than lost.
    (
        "json",
        b'{"messages": [{"body": "x", "properties": {"a": "b", "empty": ""}}]}',
        ErrorCode.INVALID_PROPERTY,
    ),
    ("batch", encode_batch([IncomingMessage(b"x", properties={"empty": ""})]), ErrorCode.INVALID_PROPERTY),
    ("json", b'{"messages": [{"body": "ok"}, {"body": ""}]}', ErrorCode.EMPTY_BODY),
    ("ndjson", b'{"body": "a"}\n{oops\n', ErrorCode.MALFORMED_BODY),
    ("ndjson", b'{"body": "a"}\n{"body": 1}\n', ErrorCode.VALIDATION_FAILED),
    ("ndjson", b"\n\n", ErrorCode.MALFORMED_BODY),
    ("batch", b"WHB2\x00\x00\x00\x01", ErrorCode.MALFORMED_BATCH),
    ("batch", b"WHB1\x00\x00\x00\x02" + encode_batch([IncomingMessage(b"x")])[8:], ErrorCode.MALFORMED_BATCH),
    ("batch", encode_batch([IncomingMessage(b"x")]) + b"extra", ErrorCode.MALFORMED_BATCH),
    ("text", b"hello", ErrorCode.UNSUPPORTED_MEDIA_TYPE),
    ("raw", b"", ErrorCode.EMPTY_BODY),
]
MEDIA = {
    "json": "application/json",
    "ndjson": "application/x-ndjson",
    "batch": BATCH_MEDIA_TYPE,
    "text": "text/plain",
    "raw": "application/octet-stream",
}


@pytest.mark.parametrize(("kind", "body", "code"), PRODUCE_CASES)
def test_bad_produce_is_refused_and_stores_nothing(
    client: httpx.Client, topic: str, kind: str, body: bytes, code: ErrorCode
) -> None:
    response = client.post(
        f"/v1/topics/{topic}/messages", content=body, headers={"content-type": MEDIA[kind]}
    )
    assert_error(response, code)
    assert messages_in(client, topic) == 0


def test_message_over_the_size_limit(client: httpx.Client, topic: str) -> None:
    response = client.post(
        f"/v1/topics/{topic}/messages",
        content=b"x" * (4 * 1024 * 1024 + 1),
        headers={"content-type": "application/octet-stream"},
    )
    assert_error(response, ErrorCode.MESSAGE_TOO_LARGE)
    assert messages_in(client, topic) == 0


def test_invalid_topic_names(client: httpx.Client) -> None:
    assert_error(client.post("/v1/topics/bad.name/messages", json={"body": "x"}), ErrorCode.INVALID_TOPIC)
    assert_error(client.post(f"/v1/topics/{'a' * 128}/messages", json={"body": "x"}), ErrorCode.INVALID_TOPIC)
    assert_error(client.post("/v1/topics", json={"name": "no spaces"}), ErrorCode.VALIDATION_FAILED)


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"offset": -1}, ErrorCode.INVALID_OFFSET),
        ({"offset": "abc"}, ErrorCode.VALIDATION_FAILED),
        ({"offset": 0, "max_messages": 0}, ErrorCode.VALIDATION_FAILED),
        ({"offset": 0, "max_messages": 10**9}, ErrorCode.INVALID_PARAMETER),
        ({"offset": 0, "max_wait_ms": -5}, ErrorCode.VALIDATION_FAILED),
        ({"offset": 0, "tags": "A || "}, ErrorCode.INVALID_TAG_EXPRESSION),
        ({}, ErrorCode.BAD_REQUEST),
        ({"offset": 0, "commit_offset": 3}, ErrorCode.BAD_REQUEST),
    ],
)
def test_bad_pull_parameters(client: httpx.Client, topic: str, params: dict, code: ErrorCode) -> None:
    assert_error(client.get(f"/v1/topics/{topic}/queues/0/messages", params=params), code)


def test_unknown_things(client: httpx.Client, topic: str) -> None:
    assert_error(client.get("/v1/topics/never-made"), ErrorCode.TOPIC_NOT_FOUND)
    assert_error(client.get("/v1/topics/never-made/queues/0/messages?offset=0"), ErrorCode.TOPIC_NOT_FOUND)
    assert_error(client.get(f"/v1/topics/{topic}/queues/4/messages?offset=0"), ErrorCode.QUEUE_NOT_FOUND)
    assert_error(client.get(f"/v1/topics/{topic}/queues/x/messages?offset=0"), ErrorCode.VALIDATION_FAILED)
    own_host = encode_host("127.0.0.1", client.base_url.port or 0).hex().upper()
    assert_error(client.get(f"/v1/messages/{own_host}7FFFFFFFFFFFFFFF"), ErrorCode.MESSAGE_NOT_FOUND)
    assert_error(client.get("/v1/messages/xyz"), ErrorCode.INVALID_MESSAGE_ID)
    assert_error(client.get("/v1/nowhere"), ErrorCode.NOT_FOUND)
    assert_error(client.delete("/v1/topics/never-made"), ErrorCode.TOPIC_NOT_FOUND)
    assert_error(client.put("/v1/topics"), ErrorCode.METHOD_NOT_ALLOWED)


def test_topic_conflict(client: httpx.Client, topic: str) -> None:
    assert_error(client.post("/v1/topics", json={"name": topic, "queues": 8}), ErrorCode.TOPIC_EXISTS)


def test_message_lookup_by_id(client: httpx.Client, topic: str) -> None:
    result = client.post(f"/v1/topics/{topic}/messages", json={"body": "find me"}).json()["results"][0]
    found = client.get(f"/v1/messages/{result['msg_id']}")
    assert found.status_code == 200
    assert found.json()["body"] == "find me" and found.json()["queue_offset"] == result["queue_offset"]
    # An id whose offset lands inside a record is not a message.
    inside = result["msg_id"][:16] + f"{int(result['msg_id'][16:], 16) + 1:016X}"
    assert_error(client.get(f"/v1/messages/{inside}"), ErrorCode.MESSAGE_NOT_FOUND)


def test_every_store_error_class_is_mapped() -> None:
    classes = [
        cls
        for _, cls in inspect.getmembers(store_errors, inspect.isclass)
        if issubclass(cls, store_errors.StoreError)
    ]
    mapped = {cls for cls, _ in STORE_ERRORS}
    assert set(classes) <= mapped, f"unmapped store errors: {set(classes) - mapped}"
    assert code_for(store_errors.DiskFullError("full")) is ErrorCode.DISK_FULL


def test_every_broker_core_error_has_its_code_in_the_one_table() -> None:
    classes = {
        cls
        for _, cls in inspect.getmembers(broker_errors, inspect.isclass)
        if issubclass(cls, broker_errors.BrokerError)
    }
    assert classes == set(BROKER_ERRORS), f"unmapped broker errors: {classes - set(BROKER_ERRORS)}"
    assert len(classes) > 5


def test_the_fields_of_a_core_error_reach_the_answer() -> None:
    misdirected = from_broker(broker_errors.MisdirectedError("elsewhere", ["http://b:1", "http://c:2"]))
    assert (misdirected.code, misdirected.extra) == (
        ErrorCode.MISDIRECTED,
        {"brokers": ["http://b:1", "http://c:2"]},
    )
    assert misdirected.headers == {"Location": "http://b:1"}
    out_of_range = from_broker(broker_errors.OffsetOutOfRangeError("t", 2, 9, 3, 7))
    assert out_of_range.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert out_of_range.extra == {"topic": "t", "queue_id": 2, "min_offset": 3, "max_offset": 7}
    missing = from_broker(broker_errors.TopicNotFoundError("topic 't' not found"))
    assert (missing.code, missing.message, missing.extra) == (
        ErrorCode.TOPIC_NOT_FOUND,
        "topic 't' not found",
        None,
    )


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"queue_id": "x"}, ErrorCode.VALIDATION_FAILED),
        ({"queue_id": "-1"}, ErrorCode.VALIDATION_FAILED),
        ({"queue_id": "9"}, ErrorCode.INVALID_QUEUE),
        ({"tags": "t" * 1025}, ErrorCode.VALIDATION_FAILED),
        ({"unique_id": "u" * 129}, ErrorCode.VALIDATION_FAILED),
        ({"property": "no-colon"}, ErrorCode.INVALID_PROPERTY),
    ],
)
def test_bad_raw_body_parameters(client: httpx.Client, topic: str, params: dict, code: ErrorCode) -> None:
    response = client.post(
        f"/v1/topics/{topic}/messages",
        content=b"raw",
        params=params,
        headers={"content-type": "application/octet-stream"},
    )
    assert_error(response, code)
    assert messages_in(client, topic) == 0
