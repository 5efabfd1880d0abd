"""A binary batch of plain messages is stored in one compiled call (app.broker.plain); its twin is
the general path (parse_batch, Broker.produce). Two brokers on two stores take the same batches,
one each way: they must answer alike and store the same bytes, whatever the batch holds (tags,
keys, unique ids repeated within a batch or across batches, queues out of range, properties,
sharding keys, fields the store refuses), and plain batches must take the compiled call."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.broker import Broker, plain
from app.codec import BatchFormatError, IncomingMessage, decode_records, encode_batch, parse_batch
from app.longpoll.hold import PullHoldService
from app.outbound import HttpOutbound
from app.routing.topic_config import TopicConfig, TopicConfigManager
from app.settings import Settings
from app.store import MessageStore, kernel
from app.store.record_format import POS_STORETIMESTAMP
from tests.store.conftest import tiny_config

pytestmark = pytest.mark.skipif(kernel.compiled is None, reason="the compiled kernel is not loaded")

TOPIC = "orders"
QUEUES = 3

texts = st.text(alphabet=st.sampled_from(list("ab Z9-_\t\x1cé€\x01\u3000")), max_size=6)
plain_texts = st.text(alphabet=st.sampled_from(list("ab Z9-_")), max_size=6)


def incoming(plain: bool) -> st.SearchStrategy[IncomingMessage]:
    text = plain_texts if plain else texts
    return st.builds(
        IncomingMessage,
        body=st.binary(min_size=1, max_size=40) if plain else st.binary(max_size=40),
        tags=text,
        keys=st.lists(st.text(alphabet="abZ9-_", min_size=1, max_size=6) if plain else text, max_size=3),
        properties=st.just({}) if plain else st.sampled_from([{}, {}, {"region": "eu"}, {"KEYS": "k"}]),
        queue_id=st.one_of(st.none(), st.integers(0, QUEUES - 1 if plain else QUEUES + 1)),
        sharding_key=st.none() if plain else st.sampled_from([None, None, "customer-7"]),
        unique_id=st.one_of(
            st.none(), st.sampled_from(["u1", "u2", "é"]) if not plain else st.uuids().map(str)
        ),
        flag=st.integers(-(2**31), 2**31 - 1),
        born_timestamp=st.integers(1, 2**62),
    )


def make_broker(directory: Path, max_message_size: int) -> Broker:
    store = MessageStore(tiny_config(directory / "store", max_message_size=max_message_size)).open()
    topics = TopicConfigManager(directory / "topics.json")
    topics.create_many([TopicConfig(TOPIC, QUEUES, QUEUES)])
    broker = Broker(Settings(), store, topics, PullHoldService(store.max_offset), outbound=HttpOutbound())
    broker.unique_ids.prefix, broker.unique_ids.counter = "0A0B0C0D0E0F10111213", 0xFFFFFFFFFFF0
    return broker


async def general(broker: Broker, data: bytes) -> object:
    try:
        batch = parse_batch(data)
        return await broker.produce_general(TOPIC, batch) if batch else "empty"
    except (BatchFormatError, Exception) as exc:  # noqa: BLE001 - both paths must refuse alike
        return type(exc).__name__, str(exc)


async def compiled_first(broker: Broker, data: bytes, taken: list[bool]) -> object:
    try:
        answers = await broker.produce_batch(TOPIC, data)
    except Exception as exc:  # noqa: BLE001
        taken.append(True)
        return type(exc).__name__, str(exc)
    taken.append(answers is not None)
    return answers if answers is not None else await general(broker, data)


def log_bytes(broker: Broker) -> bytes:
    """The CommitLog's records, store timestamps blanked (the two brokers store at other times)."""
    out = bytearray()
    for mapped in broker.store.commitlog.files.files:
        out += mapped.mm[: mapped.wrote_position]
    position = 0
    while position + 4 <= len(out):
        size = int.from_bytes(out[position : position + 4], "big")
        if size <= 8 or position + size > len(out):
            break
        out[position + POS_STORETIMESTAMP : position + POS_STORETIMESTAMP + 8] = bytes(8)
        position += size
    return bytes(out)


async def compiled_in_one_append(broker: Broker, batches: list[bytes], taken: list[bool]) -> list[object]:
    """As a produce socket stores the frames waiting: plain batches together, the first other one
    through the general path, then on."""
    answers: list[object] = []
    while len(answers) < len(batches):
        try:
            stored = await broker.produce_batches(TOPIC, batches[len(answers) :])
        except Exception as exc:  # noqa: BLE001
            stored, answers = [], [*answers, (type(exc).__name__, str(exc))]
        taken.extend([True] * len(stored))
        answers.extend(stored)
        if len(answers) < len(batches) and not stored:
            taken.append(False)
            answers.append(await general(broker, batches[len(answers)]))
    return answers


def run_both(
    tmp_path: Path, batches: list[list[IncomingMessage]], max_message_size: int = 30, together: bool = False
) -> list[bool]:
    twin, fast = (
        make_broker(tmp_path / "twin", max_message_size),
        make_broker(tmp_path / "fast", max_message_size),
    )
    taken: list[bool] = []
    try:
        datas = [encode_batch(batch) for batch in batches]
        expected = [asyncio.run(general(twin, data)) for data in datas]
        if together:
            assert asyncio.run(compiled_in_one_append(fast, datas, taken)) == expected
        else:
            assert [asyncio.run(compiled_first(fast, data, taken)) for data in datas] == expected
        assert log_bytes(fast) == log_bytes(twin)
        for queue_id in range(QUEUES):
            assert fast.store.max_offset(TOPIC, queue_id) == twin.store.max_offset(TOPIC, queue_id)
    finally:
        twin.store.close()
        fast.store.close()
    return taken


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(incoming(plain=False), max_size=4), min_size=1, max_size=4))
def test_any_batch_is_stored_as_the_general_path_stores_it(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[IncomingMessage]]
) -> None:
    run_both(tmp_path_factory.mktemp("brokers"), batches)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(incoming(plain=False), max_size=4), min_size=1, max_size=5))
def test_batches_stored_in_one_append_are_stored_as_one_by_one(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[IncomingMessage]]
) -> None:
    """Repeats across the batches of one append too; a batch that is not plain splits them."""
    run_both(tmp_path_factory.mktemp("brokers"), batches, together=True)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(incoming(plain=True), min_size=1, max_size=6), min_size=1, max_size=4))
def test_a_plain_batch_takes_the_compiled_call(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[IncomingMessage]]
) -> None:
    assert all(run_both(tmp_path_factory.mktemp("brokers"), batches, max_message_size=4096))


async def messages_general(broker: Broker, batch: list[IncomingMessage]) -> object:
    try:
        return await broker.produce_general(TOPIC, batch)
    except Exception as exc:  # noqa: BLE001 - both paths must refuse alike
        return type(exc).__name__, str(exc)


async def messages_compiled_first(broker: Broker, batch: list[IncomingMessage], taken: list[bool]) -> object:
    try:
        answers = await plain.produce_messages(broker, TOPIC, batch)
    except Exception as exc:  # noqa: BLE001
        taken.append(True)
        return type(exc).__name__, str(exc)
    taken.append(answers is not None)
    return answers if answers is not None else await messages_general(broker, batch)


# One field away from plain: each is refused by the general path, or makes the message one the
# general path must take.
deviations = st.sampled_from(
    [
        ("properties", {"region": "eu"}),
        ("sharding_key", "customer-7"),
        ("deliver_at_ms", 1),  # a delay the clock does not move: already due
        ("queue_id", QUEUES),
        ("queue_id", -1),
        ("queue_id", True),
        ("keys", ["a b"]),
        ("keys", [""]),
        ("keys", ["é"]),
        ("keys", ("a",)),
        ("body", b""),
        ("body", "text"),
        ("body", bytearray(b"ab")),
        ("flag", 2**31),
        ("flag", 1.5),
        ("born_timestamp", 2**63),
        ("unique_id", ""),
        ("unique_id", "\ud800"),
        ("unique_id", "a\x01b"),
        ("tags", "\ud800"),
        ("tags", "a\x02"),
    ]
)


@st.composite
def parsed_messages(draw: st.DrawFn) -> IncomingMessage:
    """Plain messages as the JSON path parses them, and now and then one a field away from plain."""
    message = draw(incoming(plain=True))
    if draw(st.booleans()):
        name, value = draw(deviations)
        setattr(message, name, value)
    return message


def run_messages(tmp_path: Path, batches: list[list[IncomingMessage]], max_message_size: int) -> list[bool]:
    twin, fast = (
        make_broker(tmp_path / "twin", max_message_size),
        make_broker(tmp_path / "fast", max_message_size),
    )
    taken: list[bool] = []
    try:
        for batch in batches:
            expected = asyncio.run(messages_general(twin, batch))
            assert asyncio.run(messages_compiled_first(fast, batch, taken)) == expected
        assert log_bytes(fast) == log_bytes(twin)
    finally:
        twin.store.close()
        fast.store.close()
    return taken


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(parsed_messages(), min_size=1, max_size=4), min_size=1, max_size=4))
def test_parsed_messages_are_stored_as_the_general_path_stores_them(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[IncomingMessage]]
) -> None:
    run_messages(tmp_path_factory.mktemp("brokers"), batches, 30)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(incoming(plain=True), min_size=1, max_size=6), min_size=1, max_size=4))
def test_plain_parsed_messages_take_the_compiled_call(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[IncomingMessage]]
) -> None:
    assert all(run_messages(tmp_path_factory.mktemp("brokers"), batches, 4096))


def test_a_born_timestamp_of_zero_is_the_time_of_the_produce(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, 4096)
    try:
        before = int(time.time() * 1000)
        answers: Any = asyncio.run(
            broker.produce_batch(TOPIC, encode_batch([IncomingMessage(b"x", queue_id=0)]))
        )
        (message,) = decode_records(bytes(broker.store.get_message(TOPIC, 0, 0, 1).records[0]))
        assert answers[0]["queue_offset"] == 0
        assert before <= message.born_timestamp <= message.store_timestamp
    finally:
        broker.store.close()


def test_a_unique_id_repeated_in_a_later_batch_of_the_same_append_is_a_repeat(tmp_path: Path) -> None:
    first = [IncomingMessage(b"pay 10", queue_id=0, unique_id="payment-42", born_timestamp=1)]
    again = [
        IncomingMessage(b"pay 10", queue_id=1, unique_id="payment-42", born_timestamp=1),
        IncomingMessage(b"ship", queue_id=1, born_timestamp=1),
    ]
    assert run_both(tmp_path, [first, again, first], max_message_size=4096, together=True) == [
        True,
        False,
        False,
    ]


@pytest.mark.parametrize("delay", [{"delay_ms": 60_000}, {"delay_level": 3}, {"deliver_at_ms": 120_000}])
def test_a_delayed_message_is_no_plain_message(tmp_path: Path, delay: dict[str, int]) -> None:
    """It waits for its time (the general path schedules it), rather than being stored at once."""
    broker = make_broker(tmp_path, 4096)
    if "deliver_at_ms" in delay:  # from now
        delay["deliver_at_ms"] += int(time.time() * 1000)
    try:
        (answer,) = asyncio.run(broker.produce(TOPIC, [IncomingMessage(b"later", queue_id=0, **delay)]))
        assert answer["deliver_at_ms"] > time.time() * 1000
        assert broker.store.max_offset(TOPIC, 0) == 0
    finally:
        broker.store.close()
