"""The Spark executor's record batches: built by the compiled kernel from a pull answer's bytes,
they are the batches the Python path builds from the same records, column for column."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.store import kernel, record_format
from app.store.record_format import OFFSETS, POS_QUEUEOFFSET, Limits, Message
from tests.kernel.test_kernel import HOST, records

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from spark_jobs.schema import SCHEMA, BatchBuilder, decode_records  # noqa: E402
from tests.store.test_rocketmq_store import rocketmq_log  # noqa: E402

needs_extension = pytest.mark.skipif(kernel.compiled is None, reason="the compiled kernel is not loaded")

# Text of properties; keys split at tabs or other spaces than U+0020 are left to the Python path.
plain_words = st.text(alphabet=st.sampled_from(list("ab Z9_-é€")), max_size=10)
words = st.one_of(
    plain_words, st.text(alphabet=st.sampled_from(list("a \t\u3000\x1f\x85\u2028\u200b")), max_size=6)
)


@st.composite
def stored(draw: st.DrawFn, text: st.SearchStrategy[str] = words) -> bytes:
    """A record as the store writes it: tags, keys, a unique id and user properties or not."""
    names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "RETRY_TOPIC", "a", "é", "b"])
    properties = draw(st.dictionaries(names, text.filter(bool), max_size=5))  # no empty value: refused
    message = Message(
        draw(st.sampled_from(["orders", "t%1"])), draw(st.binary(min_size=1, max_size=64)), 0, properties
    )
    data = bytearray(
        record_format.python_encode_record(message, HOST, draw(st.integers(0, 2**41)), Limits()).data
    )
    OFFSETS.pack_into(data, POS_QUEUEOFFSET, draw(st.integers(0, 2**40)), draw(st.integers(0, 2**40)))
    return bytes(data)


def python_batch(
    builder: BatchBuilder, data: bytes, until: int
) -> tuple[object, list[int]] | type[Exception]:
    """What the executor's Python path makes of the answer: its batch and queue offsets, or its error."""
    taken = []
    try:
        for record in decode_records(data):
            if record.queue_offset >= until:
                break
            taken.append(record)
            builder.add(record)
        return builder.build(), [record.queue_offset for record in taken]
    except Exception as exc:  # noqa: BLE001 - the kernel must leave such an answer to this path
        return type(exc)


@needs_extension
@settings(max_examples=1500, deadline=None)
@given(
    st.lists(st.one_of(stored(), stored(), records()), max_size=6),
    st.one_of(st.just(2**62), st.integers(0, 2**40)),
    st.sampled_from(["broker-a", ""]),
    st.permutations(list(SCHEMA.fieldNames())).map(lambda names: names[: len(names) // 2 + 1]),
    st.one_of(st.none(), st.integers(0, 2**40)),
)
def test_the_kernel_builds_the_batch_the_python_path_builds(
    found: list[bytes], until: int, broker: str, names: list[str], numbered_from: int | None
) -> None:
    """Any answer, any limit, any choice of columns: a batch the kernel builds equals the Python
    path's, which must then succeed, and says whether its queue offsets follow one another."""
    schema = SCHEMA.__class__([SCHEMA[name] for name in names])
    if numbered_from is not None:  # the queue offsets a page of one queue has
        found = [bytearray(record) for record in found]
        for index, record in enumerate(found):
            struct.pack_into(">q", record, POS_QUEUEOFFSET, numbered_from + index)
        until = numbered_from + len(found) - until % 3
    data = b"".join(found)
    made = BatchBuilder(schema, broker).from_page(data, until)
    expected = python_batch(BatchBuilder(schema, broker), data, until)
    if made is None:
        return
    assert not isinstance(expected, type), expected
    batch, first = made
    assert batch.equals(expected[0])
    offsets = expected[1]
    if offsets:
        assert first == (offsets[0] if offsets == list(range(offsets[0], offsets[0] + len(offsets))) else -1)


@needs_extension
@settings(max_examples=300, deadline=None)
@given(st.lists(stored(plain_words), min_size=1, max_size=6), st.integers(0, 2**40))
def test_an_answer_as_the_store_writes_it_is_never_left_to_the_python_path(
    found: list[bytes], until: int
) -> None:
    made = BatchBuilder(SCHEMA, "b").from_page(b"".join(found), until)
    assert made is not None
    expected = python_batch(BatchBuilder(SCHEMA, "b"), b"".join(found), until)
    assert not isinstance(expected, type) and made[0].equals(expected[0])


def test_records_with_ipv6_hosts_go_to_the_python_path_and_read_right() -> None:
    # RocketMQ's IPv6 hosts (20 bytes, sysflag 0x10/0x20) move the fields after them: the kernel
    # leaves such an answer to the Python path, which reads every field where it is.
    log = rocketmq_log()
    data = b"".join(record for record, _, _ in log)
    builder = BatchBuilder(SCHEMA, "broker-a")
    assert builder.from_page(data, 2**62) is None
    decoded = decode_records(data)
    for record in decoded:
        builder.add(record)
    rows = builder.build().to_pylist()
    offset = 0
    for n, (row, (record, host, properties)) in enumerate(zip(rows, log, strict=True)):
        assert row["msg_id"] == (host.packed() + offset.to_bytes(8, "big")).hex().upper()
        assert (row["queue_id"], row["queue_offset"], row["body"]) == (
            n % 2,
            n // 2,
            f"body {n} ünïcode".encode(),
        )
        assert (row["tags"], row["keys"], row["unique_id"]) == (
            properties["TAGS"],
            properties["KEYS"].split(),
            properties["UNIQ_KEY"],
        )
        offset += len(record)
