"""The compiled kernel and its pure-Python twins give the same bytes for the same input, including
the odd shapes a record or a batch can take (hypothesis builds them field by field)."""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import sys
import zlib
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app import codec
from app.broker import idempotency, plain
from app.client import OutgoingMessage, aio_producer
from app.store import kernel, log_codec, record_format, single_append, writer
from app.store import record as record_module
from app.store.consume_queue import UNIT
from app.store.index_file import IndexFile
from app.store.index_service import Placed
from app.store.record_format import (
    FIXED_SIZE,
    HEADER,
    MESSAGE_MAGIC,
    SYSFLAG_PRODUCER_UNIQ_KEY,
    EncodedRecord,
    Limits,
    Message,
)
from app.store.results import AppendResult, PutStatus

compiled = kernel.compiled
HOST = b"\x7f\0\0\1\0\0\x1f\x90"
needs_extension = pytest.mark.skipif(compiled is None, reason="the compiled kernel is not loaded")


def test_the_extension_is_built_and_loaded() -> None:
    """The install builds the extension on a machine with a C compiler; running without it is a
    choice (WHARF_KERNEL=python), never an accident."""
    if os.environ.get("WHARF_KERNEL", "").lower() == "python":
        assert kernel.NAME == "python" and codec.message_json is codec.python_message_json
    else:
        assert kernel.NAME == "compiled", (
            "app.store._kernel did not load: is the package installed with a C compiler?"
        )
        assert codec.message_json is not codec.python_message_json


def test_a_missing_extension_falls_back_and_says_so() -> None:
    code = (
        "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout);"
        "sys.modules['app.store._kernel'] = None;"  # what an import of a missing extension meets
        "from app import codec; from app.store import kernel;"
        "print(kernel.NAME, codec.messages_json is codec.python_messages_json)"
    )
    env = {name: value for name, value in os.environ.items() if name != "WHARF_KERNEL"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "compiled extension is missing" in out
    assert out.strip().endswith("python True")


# Text with what escaping and splitting must get right: quotes, backslashes, control characters,
# separators, ASCII and Unicode spaces, multi-byte characters.
texts: st.SearchStrategy[str] = st.text(
    alphabet=st.sampled_from(
        list('ab Z09_-%|"\\/\t\n\r\x08\x0c\x00\x1f\x7f\x1c')
        + ["\x01", "\x02", "é", "€", "😀", "\u3000", "\x85"]
    ),
    max_size=12,
)


def raw_property_bytes() -> st.SearchStrategy[bytes]:
    """Properties as stored, or as a damaged or odd record holds them: duplicates, a name without
    a value, no final separator, invalid UTF-8."""
    names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "RETRY_TOPIC", "a", "b", "", "é"])
    item = st.tuples(names, texts).map(lambda pair: f"{pair[0]}\x01{pair[1]}\x02".encode())
    odd = st.one_of(
        st.sampled_from([b"lone\x02", b"x\x01y", b"\x02\x02", b"\xff\x01v\x02", b"k\x01\xc3\x02"]), utf8_edges
    )
    many = st.integers(60, 70).map(lambda n: b"".join(b"p%d\x01v\x02" % i for i in range(n)))
    return st.one_of(
        st.lists(item, max_size=8).map(b"".join),
        st.lists(st.one_of(item, odd), max_size=6).map(b"".join),
        many,
    )


# Bytes at the edges of UTF-8's rules (overlong forms, surrogates, past U+10FFFF, cut sequences).
utf8_edges = st.lists(
    st.sampled_from(
        [
            0x00,
            0x41,
            0x7F,
            0x80,
            0x8F,
            0x90,
            0x9F,
            0xA0,
            0xBF,
            0xC0,
            0xC1,
            0xC2,
            0xDF,
            0xE0,
            0xED,
            0xEF,
            0xF0,
            0xF4,
            0xF5,
            0xFF,
        ]
    ),
    max_size=8,
).map(bytes)
bodies = st.one_of(
    st.binary(max_size=40),
    utf8_edges,
    texts.map(str.encode),
    st.sampled_from([b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc2", b"\xf0\x9f\x98"]),
)
topics = st.one_of(
    st.sampled_from(["T", "orders", "%RETRY%group", "%DLQ%g"]), st.binary(max_size=6).map(lambda b: b.hex())
)
raw_topics = st.one_of(topics.map(str.encode), st.sampled_from([b"\xff", b"caf\xc3\xa9", b""]))


@st.composite
def records(draw: st.DrawFn) -> bytes:
    body = draw(bodies)
    topic = draw(raw_topics)
    properties = draw(raw_property_bytes())
    int32 = st.integers(-(2**31), 2**31 - 1)
    int64 = st.integers(-(2**63), 2**63 - 1)
    header = HEADER.pack(
        FIXED_SIZE + len(body) + len(topic) + len(properties),
        MESSAGE_MAGIC,
        draw(int32),
        draw(int32),
        draw(int32),
        draw(int64),
        draw(st.one_of(st.integers(0, 2**40), int64)),
        draw(int32),
        draw(int64),
        draw(st.binary(min_size=8, max_size=8)),
        draw(int64),
        draw(st.binary(min_size=8, max_size=8)),
        draw(int32),
        draw(int64),
        len(body),
    )
    return header + body + bytes([len(topic)]) + topic + struct.pack(">h", len(properties)) + properties


def outcome(encode: object, *args: object) -> bytes | type[BaseException]:
    try:
        result = encode(*args)  # type: ignore[operator]
    except Exception as exc:  # noqa: BLE001 - the twins must fail alike, too
        return type(exc)
    assert isinstance(result, bytes)
    return result


@needs_extension
@settings(max_examples=1500, deadline=None)
@given(st.lists(records(), min_size=1, max_size=4), st.booleans(), st.booleans())
def test_message_json_matches_its_python_twin(found: list[bytes], consumed: bool, as_view: bool) -> None:
    batch = [memoryview(record) if as_view else record for record in found]
    for record in batch:
        expected = outcome(codec.python_message_json, record, consumed)
        assert outcome(compiled.message_json, record, consumed, codec.python_message_json) == expected
    expected = outcome(codec.python_messages_json, batch, consumed)
    assert outcome(compiled.messages_json, batch, consumed, codec.python_message_json) == expected


@needs_extension
def test_message_json_encodes_plain_records_itself() -> None:
    """The fast path is taken, not only the fallback: a plain record never reaches the twin."""
    calls = []

    def fallback(record: bytes, consumed: bool) -> bytes:
        calls.append(record)
        return codec.python_message_json(record, consumed)

    body, topic, properties = (
        b"\x00\xffbinary",
        b"orders",
        b"TAGS\x01t\x02KEYS\x01a b\x02UNIQ_KEY\x01u\x02x\x01y\x02",
    )
    header = HEADER.pack(
        FIXED_SIZE + len(body) + len(topic) + len(properties),
        MESSAGE_MAGIC,
        0,
        1,
        0,
        7,
        4096,
        0,
        1,
        b"\x7f\0\0\1\0\0\x1f\x90",
        2,
        b"\x7f\0\0\1\0\0\x1f\x90",
        0,
        0,
        len(body),
    )
    record = header + body + bytes([len(topic)]) + topic + struct.pack(">h", len(properties)) + properties
    encoded = compiled.messages_json([record, memoryview(record)], False, fallback)
    assert calls == []
    assert encoded == codec.python_messages_json([record, record])


property_texts = st.one_of(texts, st.sampled_from(["\ud800", "TAGS", "KEYS", "UNIQ_KEY"]))
property_values = st.one_of(property_texts, st.integers(-5, 5))


names = st.one_of(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY"]), texts.filter(bool))


@st.composite
def messages(draw: st.DrawFn) -> Message:
    """Mostly messages the store takes; in some, one field the store must refuse (or a type the
    kernel leaves to the Python twin)."""
    int32 = st.integers(-(2**31), 2**31 - 1)
    int64 = st.integers(-(2**63), 2**63 - 1)
    fields: dict[str, object] = {
        "topic": draw(topics),
        "body": draw(st.one_of(bodies, st.binary(min_size=60, max_size=80)).filter(bool)),
        "queue_id": draw(int32),
        "properties": draw(st.dictionaries(names, texts, max_size=5)),
        "flag": draw(int32),
        "sysflag": draw(int32),
        "born_timestamp": draw(st.one_of(st.just(0), int64)),
        "born_host": draw(st.binary(min_size=8, max_size=8)),
        "reconsume_times": draw(int32),
        "prepared_transaction_offset": draw(int64),
    }
    odd = {
        "topic": st.sampled_from(["", "bad topic", "x" * 130]),
        "body": st.sampled_from([b"", bytearray(b"ab"), "text"]),
        "queue_id": st.sampled_from([2**31, -(2**31) - 1, "1", 1.5]),
        "properties": st.dictionaries(property_texts, property_values, min_size=1, max_size=4),
        "born_timestamp": st.sampled_from([2**63, -(2**63) - 1]),
        "born_host": st.binary(max_size=10).filter(lambda raw: len(raw) != 8),
    }
    for name in draw(st.lists(st.sampled_from(sorted(odd)), max_size=2, unique=True)):
        fields[name] = draw(odd[name])
    return Message(**fields)  # type: ignore[arg-type]


def encoded(encode: object, *args: object) -> object:
    try:
        return encode(*args)  # type: ignore[operator]
    except Exception as exc:  # noqa: BLE001 - the twins must refuse alike, too
        return type(exc), str(exc)


@needs_extension
@settings(max_examples=1500, deadline=None)
@given(messages(), st.integers(0, 2**40), st.integers(50, 4096), st.integers(10, 200))
def test_encode_record_matches_its_python_twin(
    message: Message, now_ms: int, max_body: int, max_props: int
) -> None:
    limits = Limits(max_message_size=max_body, max_properties_size=max_props)
    host = b"\x7f\0\0\1\0\0\x1f\x90"
    expected = encoded(record_format.python_encode_record, message, host, now_ms, limits)
    assert encoded(record_format.encode_record, message, host, now_ms, limits) == expected


@needs_extension
def test_encode_record_encodes_plain_messages_itself() -> None:
    message = Message("orders", b"body", 2, {"TAGS": "t€", "KEYS": "a b", "UNIQ_KEY": "u", "x": "y"})
    host = b"\x7f\0\0\1\0\0\x1f\x90"
    assert compiled is not None
    made = compiled.encode_record(message, host, 5, Limits())
    assert made is not None
    assert made == record_format.python_encode_record(message, host, 5, Limits())


@needs_extension
@settings(max_examples=800, deadline=None)
@given(
    st.lists(messages(), min_size=1, max_size=6), st.integers(2**16 - 2, 2**16 + 1), st.integers(150, 4096)
)
def test_encode_records_matches_its_python_twin(
    batch: list[Message], queue_id: int, segment_size: int
) -> None:
    """Batches of messages (with every transaction kind among their sysflags: half and rolled-back
    ones take no ConsumeQueue entry), a queue id about its limit, records about the segment's size:
    the kernel's loop and the writer's agree, or the kernel leaves the batch to the writer's."""
    for message in batch:
        if isinstance(message.queue_id, int):
            message.queue_id %= 4  # mostly in range, so that the kernel takes most batches itself
    if isinstance(batch[-1].queue_id, int):
        batch[-1].queue_id = queue_id
    expected = encoded(writer.python_encode_records, batch, HOST, 7, Limits(), segment_size)
    assert encoded(writer.encode_records, batch, HOST, 7, Limits(), segment_size) == expected


@needs_extension
def test_encode_records_encodes_plain_batches_itself() -> None:
    batch = [
        Message(
            "orders", b"body %d" % n, n % 3, {"TAGS": "t", "KEYS": "a b", "UNIQ_KEY": f"u{n}"}, sysflag=flag
        )
        for n, flag in enumerate([0, 0x04, 0x08, 0x0C, 0])
    ]
    assert compiled is not None
    made = compiled.encode_records(batch, HOST, 5, Limits(), 1 << 20)
    assert made is not None
    assert made == writer.python_encode_records(
        batch, HOST, 5, Limits(), (1 << 20) + record_format.BLANK_MIN_SIZE
    )
    records, total, entries = made
    assert total == sum(len(record.data) for record in records)
    assert entries == {("orders", 0): 1, ("orders", 2): 1, ("orders", 1): 1}  # prepared and rolled back: none
    # What the writer must refuse, the kernel leaves to it: a queue id out of range, a record too large.
    assert compiled.encode_records([Message("orders", b"x", 1 << 16)], HOST, 5, Limits(), 1 << 20) is None
    assert compiled.encode_records(batch, HOST, 5, Limits(), len(records[0].data) - 1) is None


@needs_extension
@settings(max_examples=500, deadline=None)
@given(st.text(min_size=1), st.text())
def test_the_tag_code_matches_its_python_twin(tags: str, keys: str) -> None:
    """The ConsumeQueue's tag code is Java's hash over UTF-16 units: astral characters count twice."""
    message = Message("orders", b"body", 0, {"TAGS": tags, "KEYS": keys})
    host = b"\x7f\0\0\1\0\0\x1f\x90"
    expected = encoded(record_format.python_encode_record, message, host, 1, Limits())
    assert encoded(record_format.encode_record, message, host, 1, Limits()) == expected


@st.composite
def logs(draw: st.DrawFn) -> tuple[bytes, int, int]:
    """A stretch of CommitLog: records stored at their offsets, maybe a blank filler, then damage a
    crash or a stale read leaves (bytes cut, zeroed or flipped); and a position to check in it."""
    base = draw(st.integers(0, 2**40))
    data = bytearray()
    starts = [0]  # where records begin
    for item in draw(st.lists(st.one_of(messages(), records()), max_size=4)):
        if isinstance(item, bytes):
            # Odd properties (duplicates, no value, invalid UTF-8) in a record with a good CRC.
            record = bytearray(item)
            body_length = struct.unpack_from(">i", record, 84)[0]
            struct.pack_into(">I", record, 8, zlib.crc32(record[88 : 88 + body_length]))
        else:
            try:
                made = record_format.python_encode_record(item, b"\x7f\0\0\1\0\0\x1f\x90", 1, Limits())
            except Exception:  # noqa: BLE001 - a message the store refuses is not in a log
                continue
            record = bytearray(made.data)
        struct.pack_into(">qq", record, 20, draw(st.integers(-2, 2**40)), base + len(data))
        struct.pack_into(">q", record, 56, draw(st.integers(-1, 2**41)))
        starts.append(len(data))
        data += record
    if draw(st.booleans()):
        data += struct.pack(">ii", draw(st.sampled_from([8, 16, 9])), -(0xFFFFFFFF - 0xCBD43194 + 1)) + bytes(
            8
        )
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        damage = draw(st.sampled_from(["cut", "zero", "flip"]))
        if damage == "cut":
            del data[at:]
        elif damage == "zero":
            data[at : at + draw(st.integers(1, 16))] = bytes(min(len(data) - at, 16))[
                : len(data[at : at + 16])
            ]
        else:
            data[at] ^= 1 << draw(st.integers(0, 7))
    position = draw(st.one_of(st.sampled_from(starts), st.integers(0, len(data) + 4)))
    return bytes(data), position, base + position


@needs_extension
@settings(max_examples=1500, deadline=None)
@given(logs(), st.booleans(), st.sampled_from(["bytes", "memoryview", "bytearray"]))
def test_check_record_matches_its_python_twin(
    log: tuple[bytes, int, int], with_properties: bool, kind: str
) -> None:
    data, position, offset = log
    buf = {"bytes": data, "memoryview": memoryview(data), "bytearray": bytearray(data)}[kind]
    expected = encoded(record_module.python_check_record, buf, position, offset, with_properties)
    assert encoded(record_module.check_record, buf, position, offset, with_properties) == expected
    # At the next record's offset too: the walk's step.
    if isinstance(expected, record_module.CheckedRecord) and expected.size:
        following = (buf, position + expected.size, offset + expected.size, with_properties)
        assert encoded(record_module.check_record, *following) == encoded(
            record_module.python_check_record, *following
        )


@needs_extension
def test_check_record_checks_plain_records_itself() -> None:
    assert compiled is not None
    made = record_format.python_encode_record(
        Message("orders", b"body", 1, {"TAGS": "t", "KEYS": "k", "UNIQ_KEY": "u"}), bytes(8), 1, Limits()
    )
    data = bytearray(made.data)
    struct.pack_into(">qq", data, 20, 0, 4096)
    struct.pack_into(">q", data, 56, 7)
    checked = compiled.check_record(bytes(data), 0, 4096, True)
    assert checked == record_module.python_check_record(bytes(data), 0, 4096) and checked is not None


@needs_extension
@settings(max_examples=1500, deadline=None)
@given(
    logs(),
    st.integers(0, 300),
    st.sampled_from(["true", "other", "other", "huge"]),
    st.tuples(st.integers(0, 2), st.sampled_from([-1, 1])),
    st.sampled_from([None, None, None, b"", b"T", b"orders"]),
)
def test_record_is_matches_its_python_twin(
    log: tuple[bytes, int, int], length: int, which: str, nudge: tuple[int, int], topic: bytes | None
) -> None:
    """A read of ``length`` bytes at a position, asked whether it is a record with these fields:
    the record's own, one of them off by one, or numbers no stored field can hold."""
    data, position, offset = log
    read = memoryview(data)[position : position + length]
    fields = (0, 0, offset)
    found = record_module.python_check_record(data, position, offset, False)
    if found:
        read = memoryview(data)[position : position + found.size] if length % 4 else read
        fields = (found.queue_id, found.queue_offset, offset)
        topic = found.topic.encode() if topic is None else topic
    if which == "huge":
        fields = (2**31, 2**63, -(2**63) - 1)
    elif which == "other":
        fields = tuple(field + nudge[1] if index == nudge[0] else field for index, field in enumerate(fields))
    arguments = (read, topic or b"", *fields)
    assert record_module.record_is(*arguments) == record_module.python_record_is(*arguments)
    assert record_module.record_is is compiled.record_is


@needs_extension
@settings(max_examples=1000, deadline=None)
@given(
    st.lists(records(), max_size=4), st.sampled_from(["", "cut", "zero size", "flip"]), st.integers(0, 400)
)
def test_decode_records_matches_its_python_twin(found: list[bytes], damage: str, at: int) -> None:
    """A binary pull answer decoded by the client: the same messages, or the same refusal."""
    data = bytearray(b"".join(found))
    if data and damage == "cut":
        del data[at % len(data) :]
    elif data and damage == "zero size":
        data[:4] = bytes(4)
    elif data and damage == "flip":
        data[at % len(data)] ^= 0x40
    expected = encoded(codec.python_decode_records, bytes(data))
    assert encoded(codec.decode_records, bytes(data)) == expected
    assert encoded(codec.decode_records, memoryview(bytes(data))) == expected


class Keyed(NamedTuple):
    topic: str
    keys: str
    uniq_key: str
    sysflag: int


key_texts = st.text(alphabet=st.sampled_from(list("ab  Z9-é😀")), max_size=8)


@st.composite
def indexed_batches(draw: st.DrawFn) -> tuple[list[Keyed], list[Placed]]:
    """Records with keys (spaces doubled, leading, trailing), unique ids, rolled-back transactions,
    and placements whose times run before and after the file's begin time."""
    count = draw(st.integers(1, 12))
    records = [
        Keyed(
            draw(st.sampled_from(["orders", "t%1|x", "é"])),
            draw(key_texts),
            draw(st.sampled_from(["", "u1", "0A0B0C"])),
            draw(st.sampled_from([0, 0, 4, 8, 12])),
        )
        for _ in range(count)
    ]
    placements = [
        Placed(100 * i, draw(st.integers(91, 4096)), draw(st.integers(0, 4_000_000_000_000)))
        for i in range(count)
    ]
    return records, placements


@needs_extension
@settings(max_examples=500, deadline=None)
@given(indexed_batches(), st.integers(1, 7), st.integers(2, 30), st.integers(0, 5), st.booleans())
def test_index_messages_matches_its_python_twin(
    tmp_path_factory: pytest.TempPathFactory,
    batch: tuple[list[Keyed], list[Placed]],
    slots: int,
    limit: int,
    start: int,
    stale: bool,
) -> None:
    """Same file bytes, same entry number, slots, coverage and stopping point: including a file
    too small for a message's keys, slots shared by many keys, and (``stale``) slots that point at
    entries written after the last flush, as a crash leaves them."""
    records, placements = batch
    start = min(start, len(records) - 1)
    directory = tmp_path_factory.mktemp("index")
    ends = []
    for name, run in (("1", IndexFile.python_index_messages), ("2", IndexFile.index_messages)):
        index = IndexFile.create(directory, name, slots, limit, 0, 2_000_000_000_000)
        if stale:
            IndexFile.python_index_messages(index, records, placements, 0, {})
            index.next_entry, index.used_slots = 1, 0
        position = run(index, records, placements, start, {})
        ends.append(
            (
                position,
                index.next_entry,
                index.used_slots,
                index.end_offset,
                index.end_timestamp,
                bytes(index.mapped.mm),
            )
        )
        index.close()
    assert ends[0] == ends[1]


@st.composite
def appended_batches(draw: st.DrawFn) -> list[EncodedRecord]:
    """Records for two topics and three queues, some of them half or rolled-back transaction
    messages (which take no queue offset), of sizes that make a segment's end fall anywhere."""
    return [
        record_format.python_encode_record(
            Message(
                draw(st.sampled_from(["orders", "t%1"])),
                draw(st.binary(min_size=1, max_size=300)),
                draw(st.integers(0, 2)),
                {"TAGS": draw(st.sampled_from(["a", "b"])), "UNIQ_KEY": "u"},
                sysflag=draw(st.sampled_from([0, 0, 4, 8, 12])),
            ),
            HOST,
            7,
            Limits(),
        )
        for _ in range(draw(st.integers(1, 12)))
    ]


@needs_extension
@settings(max_examples=500, deadline=None)
@given(
    appended_batches(),
    st.integers(0, 2000),
    st.integers(0, 3000),
    st.integers(0, 11),
    st.dictionaries(st.tuples(st.sampled_from(["orders", "t%1"]), st.integers(0, 2)), st.integers(0, 2**40)),
)
def test_write_records_matches_its_python_twin(
    records: list[EncodedRecord], position: int, room: int, start: int, offsets: dict[tuple[str, int], int]
) -> None:
    """The same bytes in the segment, the same places, queue offsets and ConsumeQueue runs, and
    the same stopping point when the next record would pass the limit."""
    start = min(start, len(records) - 1)
    limit = position + room
    ends = []
    for write in (log_codec.python_write_records, compiled.write_records):
        mm = mmap.mmap(-1, 8192)
        mm[:] = bytes(range(256)) * 32
        queue_offsets = dict(offsets)
        results: list[object] = []
        runs: dict[tuple[str, int], tuple[int, bytearray]] = {}
        written = write(
            mm,
            position,
            limit,
            1 << 33,
            records,
            start,
            1_700_000_000_000,
            queue_offsets,
            HOST,
            results,
            runs,
        )
        ends.append((written, bytes(mm), queue_offsets, results, runs))
        mm.close()
    assert ends[0] == ends[1]


@needs_extension
@settings(max_examples=500, deadline=None)
@given(
    appended_batches(),
    st.integers(0, 8192),
    st.integers(0, 2**40),
    st.integers(0, 4096),
    st.integers(-(2**63), 2**63 - 1),
)
def test_write_single_matches_its_python_twin(
    records: list[EncodedRecord], position: int, queue_offset: int, cq_position: int, tags_code: int
) -> None:
    """The same record bytes and ConsumeQueue entry, the same AppendResult; the same ValueError,
    with nothing written, when the record or the entry does not fit its mapping."""
    record = records[0]
    ends = []
    for write in (single_append.python_write_single, compiled.write_single):
        mm, cq = mmap.mmap(-1, 8192), mmap.mmap(-1, 4096)
        mm[:] = bytes(range(256)) * 32
        cq[:] = bytes(range(256)) * 16
        try:
            made: object = write(
                mm,
                position,
                1 << 33,
                record.data,
                1_700_000_000_000,
                queue_offset,
                cq,
                cq_position,
                tags_code,
                record.topic,
                record.queue_id,
                HOST,
            )
        except ValueError as error:
            made = str(error)
        ends.append((made, bytes(mm), bytes(cq)))
        mm.close()
        cq.close()
    assert ends[0] == ends[1]
    made, log_bytes, queue_bytes = ends[0]
    if isinstance(made, AppendResult):
        size = len(record.data)
        assert made == AppendResult(
            PutStatus.PUT_OK,
            record.topic,
            record.queue_id,
            queue_offset,
            (1 << 33) + position,
            size,
            1_700_000_000_000,
            HOST,
        )
        checked = record_module.check_record(log_bytes, position, (1 << 33) + position)
        assert checked is not None and checked.queue_offset == queue_offset
        assert UNIT.unpack_from(queue_bytes, cq_position) == ((1 << 33) + position, size, tags_code)
    else:
        assert log_bytes == bytes(range(256)) * 32 and queue_bytes == bytes(range(256)) * 16


@needs_extension
@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(min_size=8, max_size=8), st.integers(0, 2**63 - 1), st.integers(0, 2**40)),
        max_size=5,
    ),
    st.sampled_from(["SEND_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT"]),
)
def test_plain_answers_match_their_python_twin(places: list[tuple[bytes, int, int]], status: str) -> None:
    records = [EncodedRecord(b"", "orders", 1, 0, "", f"id-{index}é", 0) for index in range(len(places))]
    appended = [
        AppendResult(PutStatus.PUT_OK, "orders", 1, queue_offset, offset, 100, 1, host)
        for host, offset, queue_offset in places
    ]
    assert compiled.plain_answers(records, appended, status) == plain.python_answers(
        records, appended, status
    )


# Operations on a digest table: insert (digest from a small set, so keys repeat), expire, find.
table_operations = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(1, 60), st.integers(0, 50), st.integers(0, 3)),
        st.tuples(st.just("insert"), st.integers(1, 6), st.integers(0, 5), st.integers(0, 3)),
        st.tuples(st.just("expire"), st.integers(0, 40), st.just(0), st.just(0)),
        st.tuples(st.just("find"), st.integers(1, 60), st.just(0), st.just(0)),
    ),
    max_size=300,
)


@needs_extension
@settings(max_examples=400, deadline=None)
@given(table_operations, st.integers(1, 40))
def test_the_digest_table_matches_its_python_twin(
    operations: list[tuple[str, int, int, int]], limit: int
) -> None:
    """Same finds and counts through inserts that replace, evict past the limit, expire, and grow
    the table (digests that share low bits share slots)."""
    twin, table = idempotency.BucketTable(), compiled.DigestTable()
    clock = 0.0
    for name, key, offset, step in operations:
        d = idempotency.DIGEST_SIGN | (key << 40) | (key % 7)
        if name == "insert":
            clock += step
            twin.insert(d, offset, clock + 10, limit)
            table.insert(d, offset, clock + 10, limit)
        elif name == "expire":
            twin.expire(float(key))
            table.expire(float(key))
        assert table.find(d) == twin.find(d)
        assert table.count == twin.count
    for key in range(1, 61):
        d = idempotency.DIGEST_SIGN | (key << 40) | (key % 7)
        assert table.find(d) == twin.find(d)


@needs_extension
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b", "c", "é"]), st.booleans(), st.integers(0, 99)), max_size=8),
    st.lists(st.sampled_from(["a", "b", "c", "é", "z"]), max_size=6),
    st.integers(0, 6),
)
def test_the_digest_tables_remember_records_and_find_ids_alike(
    stored: list[tuple[str, bool, int]], asked: list[str], start: int
) -> None:
    """Only records whose sysflag says their unique id was supplied are remembered; the first id
    remembered from ``start`` on is the same one."""
    records = [
        EncodedRecord(b"", "orders", 0, 0, "", unique_id, SYSFLAG_PRODUCER_UNIQ_KEY if supplied else 0)
        for unique_id, supplied, _ in stored
    ]
    appended = [
        AppendResult(PutStatus.PUT_OK, "orders", 0, 0, offset, 100, 1, HOST) for _, _, offset in stored
    ]
    twin, table = idempotency.BucketTable(), compiled.DigestTable()
    for each in (twin, table):
        each.put_records("orders", records, appended, 10.0, 5)
    assert table.count == twin.count
    assert table.first_known("orders", asked, start) == twin.first_known("orders", asked, start)
    for unique_id in ("a", "b", "c", "é"):
        d = hash(("orders", unique_id)) | idempotency.DIGEST_SIGN
        assert table.find(d) == twin.find(d)


ENTRY = struct.Struct(">qiq")


@st.composite
def queue_reads(draw: st.DrawFn) -> tuple[bytes, bytes, int, int]:
    """A segment of records of three queues laid out by the writer, and the ConsumeQueue entries
    of queue ("orders", 0) as a crash or retention can leave them: entries of no size, entries
    before the CommitLog's start, entries pointing at another queue's record, at the wrong offset,
    past the written bytes or outside the segment. Returns (segment, entries, the segment's
    CommitLog offset, the first entry's queue offset)."""
    records = [
        record_format.python_encode_record(
            Message("orders", draw(st.binary(min_size=1, max_size=200)), draw(st.sampled_from([0, 0, 0, 1]))),
            HOST,
            7,
            Limits(),
        )
        for _ in range(draw(st.integers(1, 14)))
    ]
    base = 1 << 20
    mm = mmap.mmap(-1, 4096)
    results: list[AppendResult] = []
    log_codec.python_write_records(mm, 0, 4096, base, records, 0, 1_700_000_000_000, {}, HOST, results, {})
    segment = bytes(mm)
    mm.close()
    placed = [result for result in results if result.queue_id == 0]
    entries = []
    for result in placed:
        physical, size = result.physical_offset, result.size
        shape = draw(st.sampled_from(["true"] * 24 + ["empty", "early", "other", "shifted", "far", "beyond"]))
        if shape == "empty":
            size = draw(st.sampled_from([0, -1]))
        elif shape == "early":
            physical = base - draw(st.integers(1, 200))
        elif shape == "other":
            physical = draw(st.sampled_from(results)).physical_offset
        elif shape == "shifted":
            physical += draw(st.sampled_from([-1, 1]))
        elif shape == "far":
            physical = base + 4096 + draw(st.integers(0, 100))
        elif shape == "beyond":
            size += draw(st.integers(1, 5000))
        entries.append(ENTRY.pack(physical, size, 0))
    return segment, b"".join(entries), base, placed[0].queue_offset if placed else 0


@needs_extension
@settings(max_examples=1000, deadline=None)
@given(
    queue_reads(),
    st.integers(0, 16).map(lambda at: at if at > 12 else at // 6),
    st.one_of(st.just(4096), st.integers(0, 4096)),
    st.integers(1, 16),
    # Negative: exactly the bytes of the records named by that many entries from ``at``.
    st.one_of(st.just(1 << 20), st.integers(0, 3000), st.integers(-5, -1)),
    st.integers(0, 2),
    st.sampled_from([b"orders", b"orders", b"orders", b"order", b"t%1"]),
)
def test_collect_records_matches_its_python_twin(
    read: tuple[bytes, bytes, int, int],
    at: int,
    readable: int,
    max_messages: int,
    max_bytes: int,
    already: int,
    topic: bytes,
) -> None:
    """The same slices, queue offsets, total and stopping entry, from any entry, with any part of
    the segment written, limits of messages and bytes, and records already taken."""
    segment, entries, base, first_offset = read
    if max_bytes < 0:
        sizes = [size for _, size, _ in ENTRY.iter_unpack(entries)][at : at - max_bytes]
        max_bytes = 10 * already + sum(size for size in sizes if size > 0)
    answers = []
    for collect in (log_codec.python_collect_records, compiled.collect_records):
        records: list[memoryview] = [memoryview(b"x" * 10)] * already
        queue_offsets = [-1] * already
        answer = collect(
            entries,
            at,
            memoryview(segment),
            base,
            readable,
            base,
            topic,
            0,
            first_offset,
            max_messages,
            max_bytes,
            records,
            queue_offsets,
            10 * already,
        )
        answers.append((answer, [bytes(record) for record in records], queue_offsets))
    assert answers[0] == answers[1]
    assert log_codec.collect_records is compiled.collect_records


@st.composite
def outgoing(draw: st.DrawFn) -> OutgoingMessage:
    """What an application hands an AsyncProducer: text of every kind, sometimes too long for its
    length field, a delay, a timestamp past 64 bits, a value of another type than declared."""
    message = OutgoingMessage(
        draw(st.binary(min_size=1, max_size=40)),
        draw(st.one_of(texts, st.just("t" * 70_000))),
        draw(st.lists(st.one_of(texts, st.just("k" * 40_000)), max_size=3)),
        draw(st.dictionaries(texts, texts, max_size=3)),
        draw(st.one_of(st.none(), texts)),
        draw(st.one_of(st.integers(0, 2**41), st.just(2**63))),
    )
    odd = draw(st.sampled_from(["none"] * 8 + ["delay", "tuple keys", "int property", "bytearray"]))
    if odd == "delay":
        message.delay_level = 3
    elif odd == "tuple keys":
        message.keys = tuple(message.keys)  # type: ignore[assignment]
    elif odd == "int property":
        message.properties = {"n": 1}  # type: ignore[dict-item]
    elif odd == "bytearray":
        message.body = bytearray(message.body)  # type: ignore[assignment]
    return message


@needs_extension
@settings(max_examples=1500, deadline=None)
@given(st.lists(outgoing(), max_size=4), st.integers(0, 7))
def test_the_client_batch_encoder_matches_its_python_twin(
    messages: list[OutgoingMessage], queue_id: int
) -> None:
    """The kernel's batch is byte for byte the twin's; a batch it leaves to the twin is one it may
    not encode (a delay, a field of another type, text too long for its length field)."""
    expected = outcome(lambda: codec.encode_batch(aio_producer._incoming(messages, queue_id)))
    made = compiled.encode_outgoing(messages, queue_id)
    if made is None:
        plain = all(
            message.delay_level is None
            and type(message.keys) is list
            and type(message.body) is bytes
            and all(type(value) is str for value in message.properties.values())
            and message.born_timestamp < 2**63
            and len(message.tags.encode()) <= 0xFFFF
            and len(" ".join(message.keys).encode()) <= 0xFFFF
            for message in messages
        )
        assert not plain
        return
    assert made == expected
    assert aio_producer.outgoing_batch(messages, queue_id) == made
