"""The client's wire codec (wharf_client.codec) against the broker's side of the same formats.

The client decodes stored records with a small decoder of its own (it imports nothing of the
store): here it reads records the store's encoder made, and records laid out as RocketMQ writes
them (IPv4 and IPv6 hosts), into the same fields as the store's decoder. The broker's app.codec
uses the client's batch codec itself, and the few constants both sides name are checked equal.
"""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys

import pytest
import wharf_client
from wharf_client import codec
from wharf_client.codec import BatchFormatError, IncomingMessage, Message

import app.client
import app.codec
from app.store import record as store_record
from app.store import record_format
from app.store.record_format import Limits, encode_record
from tests.store.rocketmq_records import BORN_V4, BORN_V6, STORE_V4, STORE_V6, Host, rocketmq_record

HOST = b"\x7f\x00\x00\x01\x00\x00\x1f\x90"
FIELDS = [item.name for item in dataclasses.fields(store_record.StoredMessage)]


def stored(topic: str, body: bytes, properties: dict[str, str], offset: int) -> bytes:
    """A record as the store writes it, its placeholders patched as the CommitLog patches them."""
    made = bytearray(
        encode_record(
            record_format.Message(topic, body, 2, properties, flag=7), HOST, 1_700_000_000_000, Limits()
        ).data
    )
    record_format.OFFSETS.pack_into(made, record_format.POS_QUEUEOFFSET, offset, 4096 * offset)
    record_format.TIMESTAMP.pack_into(made, record_format.POS_STORETIMESTAMP, 1_700_000_000_009 + offset)
    return bytes(made)


def as_tuple(message: object) -> tuple[object, ...]:
    return tuple(getattr(message, name) for name in [*FIELDS, "msg_id", "unique_id", "tags", "keys"])


def test_the_client_message_has_the_fields_of_the_stores() -> None:
    assert [item.name for item in dataclasses.fields(Message)] == FIELDS
    (message,) = codec.python_decode_records(stored("t", b"x", {}, 0))
    assert not hasattr(message, "__dict__")  # a slots dataclass
    assert wharf_client.Message is Message


def records_of_the_store() -> bytes:
    rng = random.Random(5)
    parts = []
    for index in range(60):
        properties = {"TAGS": f"Tag{index % 3}", "UNIQ_KEY": f"U{index:030d}", "région": "é" * (index % 4)}
        if index % 2:
            properties["KEYS"] = "k1 k2"
        body = rng.randbytes(rng.randrange(1, 300)) if index % 5 else b"x"
        parts.append(stored(f"topic-{index % 4}", body, properties, index))
    return b"".join(parts)


@pytest.mark.parametrize("kernel", ["python", "whatever is loaded"])
def test_the_client_decodes_the_stores_records_as_the_store_does(kernel: str) -> None:
    data = records_of_the_store()
    decode = codec.python_decode_records if kernel == "python" else codec.decode_records
    expected = [as_tuple(message) for message in app.codec.python_decode_records(data)]
    for form in (data, memoryview(data), bytearray(data)):
        got = decode(form)
        assert all(type(message) is Message for message in got)
        assert [as_tuple(message) for message in got] == expected
    assert len(expected) == 60


@pytest.mark.parametrize(
    ("born", "store"),
    [(BORN_V4, STORE_V4), (BORN_V6, STORE_V4), (BORN_V4, STORE_V6), (BORN_V6, STORE_V6)],
    ids=["ipv4", "ipv6-born", "ipv6-store", "ipv6-both"],
)
def test_rocketmq_records_of_either_host_layout_decode_as_the_store_decodes_them(
    born: Host, store: Host
) -> None:
    properties = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U7\x02region\x01eu"
    data = rocketmq_record(properties, b"\x00\xffbody", 8192, born=born, store=store, reconsume_times=2)
    data += rocketmq_record(b"", b"", 8192 + len(data), born=born, store=store)
    (first, second) = codec.python_decode_records(data)
    assert [as_tuple(message) for message in (first, second)] == [
        as_tuple(message) for message in app.codec.python_decode_records(data)
    ]
    assert (first.tags, first.keys.split(), first.unique_id, first.reconsume_times) == (
        "TagA",
        ["k1", "k2"],
        "U7",
        2,
    )
    assert first.properties["region"] == "eu" and second.properties == {}
    assert [as_tuple(message) for message in codec.decode_records(data)] == [
        as_tuple(message) for message in (first, second)
    ]


@pytest.mark.parametrize("cut", [1, 4, 50, 95])
def test_a_cut_or_damaged_answer_is_a_format_error(cut: int) -> None:
    record = stored("t", b"body", {"TAGS": "a"}, 0)
    with pytest.raises(BatchFormatError):
        codec.python_decode_records(record[:-cut])
    with pytest.raises(BatchFormatError):
        codec.decode_records(record + record[:cut])
    damaged = bytearray(record)
    damaged[5] ^= 0xFF  # the magic code
    with pytest.raises(BatchFormatError):
        codec.python_decode_records(bytes(damaged))


def test_the_broker_uses_the_clients_batch_codec() -> None:
    for name in (
        "BATCH_MAGIC",
        "BATCH_MEDIA_TYPE",
        "RECORDS_MEDIA_TYPE",
        "BatchFormatError",
        "BodyEncodingError",
        "IncomingMessage",
        "batch_count",
        "decode_body",
        "encode_body",
        "encode_batch",
        "parse_batch",
        "split_records",
    ):
        assert getattr(app.codec, name) is getattr(codec, name), name
    messages = [
        IncomingMessage(b"a", "TagA", ["k1"], {"p": "1"}, 3, "order-7", "U1", 0, 12, delay_level=2),
        IncomingMessage(b"\xff" * 70_000, deliver_at_ms=1_800_000_000_000),
    ]
    data = codec.encode_batch(messages)
    assert codec.batch_count(data) == 2
    assert codec.parse_batch(data) == messages
    assert codec.decode_body(*codec.encode_body(b"\xff\x00")) == b"\xff\x00"
    assert codec.decode_body(*codec.encode_body("héllo".encode())) == "héllo".encode()


def test_the_constants_both_sides_name_agree() -> None:
    for name in (
        "PROPERTY_TAGS",
        "PROPERTY_KEYS",
        "PROPERTY_UNIQ_KEY",
        "PROPERTY_DELAY_TIME_LEVEL",
        "PROPERTY_TIMER_DELAY_MS",
        "PROPERTY_TIMER_DELIVER_MS",
        "MESSAGE_MAGIC",
    ):
        assert getattr(codec, name) == getattr(record_format, name), name
    assert codec._RECORD_FIXED_SIZE == record_format.FIXED_SIZE
    assert codec.message_id(HOST, 4096) == record_format.message_id(HOST, 4096)


def test_app_client_is_an_alias_of_wharf_client() -> None:
    import wharf_client.aio_producer
    import wharf_client.consumer

    from app.client import aio_producer, consumer

    assert aio_producer is wharf_client.aio_producer and consumer is wharf_client.consumer
    assert app.client.Producer is wharf_client.Producer
    assert set(app.client.__all__) == set(wharf_client.__all__)


def test_the_client_imports_no_server_module() -> None:
    """Without the broker, every client module imports (pure Python); with it, the client loads only
    the kernel's package (app.store), for its optional compiled functions."""
    code = (
        "import sys, pkgutil, importlib, wharf_client\n"
        "for info in pkgutil.iter_modules(wharf_client.__path__):\n"
        "    importlib.import_module('wharf_client.' + info.name)\n"
        "print(sorted(name for name in sys.modules if name == 'app' or name.startswith('app.')))\n"
    )
    blocked = "import sys; sys.modules['app'] = None\n"  # as if the broker were not installed
    done = subprocess.run([sys.executable, "-c", blocked + code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['app']", done.stdout  # only the blocked entry
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            blocked + "from wharf_client import codec, aio_producer\n"
            "assert codec.compiled is None and aio_producer.compiled is None",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # With the broker installed, only the kernel's package is loaded (app.store and what it imports).
    loaded = eval(done.stdout)
    assert all(name == "app" or name.startswith("app.store") for name in loaded), loaded
