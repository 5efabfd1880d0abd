"""A delivery's request (headers, body, webhook id), Retry-After, the endpoint check and the
signatures, against the standardwebhooks package."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from standardwebhooks import Webhook

from app.broker.errors import InvalidParameterError
from app.push.endpoint import EndpointGuard, check_endpoint, is_public
from app.push.request import build_request, retry_after_s
from app.push.signing import secret_key, signed_headers
from app.push.subscription import generate_secret
from app.store import Message
from app.store.record import decode_record
from app.store.record_format import (
    OFFSETS,
    POS_QUEUEOFFSET,
    PROPERTY_KEYS,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    Limits,
    encode_host,
    encode_record,
)


def stored(body: bytes, topic: str = "orders", **properties: str) -> bytes:
    """A record as the CommitLog holds it, at queue offset 7 and CommitLog offset 4096."""
    message = Message(topic, body, 2, properties)
    data = bytearray(encode_record(message, encode_host("127.0.0.1", 8080), 1, Limits()).data)
    OFFSETS.pack_into(data, POS_QUEUEOFFSET, 7, 4096)
    return bytes(data)


@pytest.fixture
def record() -> bytes:
    return stored(
        b"hello",
        **{
            PROPERTY_TAGS: "paid",
            PROPERTY_KEYS: "k1 k2",
            PROPERTY_UNIQ_KEY: "U1",
            "region": "eu-west",
            "CONTENT_TYPE": "text/plain",
        },
    )


def test_one_message_is_its_body_with_its_fields_as_headers(record: bytes) -> None:
    message = decode_record(record)
    request = build_request([message], [record], 0)
    assert request.body == b"hello"
    assert request.webhook_id == "msg_U1"
    assert request.headers["content-type"] == "text/plain"
    assert request.headers["wharf-topic"] == "orders"
    assert request.headers["wharf-queue-id"] == "2"
    assert request.headers["wharf-tags"] == "paid"
    assert request.headers["wharf-keys"] == "k1 k2"
    assert json.loads(request.headers["wharf-properties"]) == {
        "region": "eu-west",
        "CONTENT_TYPE": "text/plain",
    }
    assert "wharf-retry-topic" not in request.headers
    assert all(value.isascii() and "\n" not in value for value in request.headers.values())


def test_a_retried_message_names_its_topic_and_its_retry_topic() -> None:
    raw = stored(b"x", topic="%RETRY%billing", **{PROPERTY_RETRY_TOPIC: "orders", PROPERTY_UNIQ_KEY: "U2"})
    request = build_request([decode_record(raw)], [raw], 3)
    assert request.headers["wharf-topic"] == "orders"
    assert request.headers["wharf-retry-topic"] == "%RETRY%billing"
    assert request.headers["wharf-reconsume-times"] == "3"
    assert request.headers["content-type"] == "application/octet-stream"


def test_header_values_stay_ascii_whatever_the_message_holds() -> None:
    raw = stored(b"x", **{PROPERTY_TAGS: "café\r\nx", PROPERTY_UNIQ_KEY: "U3", "note": "naïve\nline"})
    request = build_request([decode_record(raw)], [raw], 0)
    assert all(
        value.isascii() and "\n" not in value and "\r" not in value for value in request.headers.values()
    )


def test_a_batch_is_a_json_array(record: bytes) -> None:
    other = stored(b"\xff\x00", **{PROPERTY_UNIQ_KEY: "U4"})
    request = build_request([decode_record(record), decode_record(other)], [record, other], 0, batched=True)
    array = json.loads(request.body)
    assert [item["body"] for item in array] == ["hello", "/wA="]
    assert [item["encoding"] for item in array] == ["utf8", "base64"]
    assert request.headers["wharf-count"] == "2"
    assert request.webhook_id.startswith("batch_")
    # A subscription that batches sends an array even when one message was there to send.
    alone = build_request([decode_record(record)], [record], 0, batched=True)
    assert [item["body"] for item in json.loads(alone.body)] == ["hello"]
    assert alone.headers["content-type"] == "application/json"


def test_retry_after_takes_seconds_or_a_date() -> None:
    assert retry_after_s("120") == 120.0
    assert retry_after_s(None) is None
    assert retry_after_s("soon") is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now_s=1445412470.0) == 10.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now_s=1445412490.0) == 0.0


def test_signatures_verify_with_standard_webhooks() -> None:
    secret = generate_secret()
    headers = signed_headers(secret_key(secret), "msg_1", int(time.time()), b'{"a": 1}')
    assert Webhook(secret).verify(b'{"a": 1}', headers) == {"a": 1}
    with pytest.raises(Exception, match="signature"):
        Webhook(generate_secret()).verify(b'{"a": 1}', headers)


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1:248:1893:25c8:1946", True),
        ("127.0.0.1", False),
        ("10.0.0.1", False),
        ("100.64.1.1", False),
        ("169.254.169.254", False),
        ("::1", False),
        ("::ffff:10.0.0.1", False),
        ("fe80::1%eth0", False),
        ("fc00::1", False),
        ("0.0.0.0", False),
        ("239.1.1.1", False),
    ],
)
def test_public_addresses(address: str, public: bool) -> None:
    assert is_public(address) is public


@pytest.mark.parametrize("url", ["ftp://a/", "http://", "http://[::1", "http://a/#frag", "//a/b"])
def test_urls_refused_whatever_the_setting(url: str) -> None:
    with pytest.raises(InvalidParameterError):
        asyncio.run(check_endpoint(url, allow_private=True))


def test_private_addresses_pass_with_the_setting_only() -> None:
    asyncio.run(check_endpoint("http://127.0.0.1:9000/hook", allow_private=True))
    with pytest.raises(InvalidParameterError, match="WHARF_PUSH_ALLOW_PRIVATE"):
        asyncio.run(check_endpoint("http://127.0.0.1:9000/hook", allow_private=False))


def test_the_guard_looks_at_the_endpoint_again_once_per_interval() -> None:
    now = [0.0]
    private = [False]
    checks: list[str] = []

    async def check(url: str, allow_private: bool) -> None:
        checks.append(url)
        if private[0]:
            raise InvalidParameterError("host 'hooks.example' of url resolves to 10.0.0.1, a private address")

    guard = EndpointGuard("https://hooks.example/", False, interval_s=60, check=check, clock=lambda: now[0])

    async def refusals() -> list[str | None]:
        found = [await guard.refusal()]
        private[0] = True  # the name now resolves to a private address (DNS rebinding)
        now[0] = 59.0
        found.append(await guard.refusal())  # not looked at again yet
        now[0] = 60.0
        found.append(await guard.refusal())
        private[0] = False
        now[0] = 120.0
        found.append(await guard.refusal())
        return found

    first, before, after, back = asyncio.run(refusals())
    assert (first, before, back) == (None, None, None)
    assert after is not None and "private" in after
    assert len(checks) == 3
    allowed = EndpointGuard("http://127.0.0.1/", True, check=check)
    assert asyncio.run(allowed.refusal()) is None
    assert len(checks) == 3
