"""The delivery services in process, on a real store, with a clock the test moves: a delayed message
reaches its topic at its time and never a millisecond before, whole, and exactly once across a
clean restart; a restart without saved progress delivers again (at least once, never lost)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.broker import Broker
from app.broker.delay_message import TIMER_TOPIC, Redeliverer
from app.broker.schedule import ScheduleMessageService
from app.broker.timer import TimerMessageService
from app.codec import IncomingMessage
from app.longpoll.hold import PullHoldService
from app.outbound import HttpOutbound
from app.routing.topic_config import TopicConfig, TopicConfigManager
from app.settings import Settings
from app.store import MessageStore
from app.store.record import StoredMessage
from app.store.record_format import SCHEDULE_TOPIC
from tests.store.conftest import tiny_config, wait_until

TOPIC = "orders"


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = int(time.time() * 1000)

    def __call__(self) -> float:
        return self.now_ms / 1000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    store = MessageStore(tiny_config(tmp_path / "store", commitlog_file_size=1 << 20)).open()
    yield store
    store.close()


@pytest.fixture
def broker(store: MessageStore, tmp_path: Path) -> Broker:
    topics = TopicConfigManager(tmp_path / "topics.json")
    topics.create_many([TopicConfig(TOPIC, 2, 2)])
    return Broker(Settings(), store, topics, PullHoldService(store.max_offset), outbound=HttpOutbound())


def produce(broker: Broker, unique_id: str = "order-7-timeout", **fields: Any) -> dict[str, Any]:
    incoming = IncomingMessage(
        b"close order 7 if unpaid",
        tags="TagA",
        keys=["order-7"],
        properties={"region": "eu"},
        queue_id=1,
        unique_id=unique_id,
        **fields,
    )
    (answer,) = asyncio.run(broker.produce(TOPIC, [incoming]))
    return answer


def schedule_service(store: MessageStore, tmp_path: Path, clock: FakeClock) -> ScheduleMessageService:
    service = ScheduleMessageService(
        store, Redeliverer(store, lambda topic: 2), tmp_path / "delayOffset.json", 3_600_000, clock
    )
    service.load()
    return service


def timer_service(
    store: MessageStore, tmp_path: Path, clock: FakeClock | None = None, roll_window_ms: int = 86_400_000
) -> TimerMessageService:
    service = TimerMessageService(
        store,
        Redeliverer(store, lambda topic: 2),
        tmp_path / "timerlog",
        tmp_path / "timerCheckpoint.json",
        3_600_000,
        roll_window_ms,
        *((clock,) if clock is not None else ()),
    )
    service.load()
    return service


def delivered(store: MessageStore) -> list[StoredMessage]:
    return store.read_messages(TOPIC, 1, 0, 100)


def assert_whole(message: StoredMessage, answer: dict[str, Any]) -> None:
    """The delivered message keeps its id, keys, tags and properties and records when it was due."""
    assert message.unique_id == answer["unique_id"] == "order-7-timeout"
    assert (message.tags, message.keys, message.body) == ("TagA", "order-7", b"close order 7 if unpaid")
    assert message.properties["region"] == "eu"
    assert message.properties["TIMER_OUT_MS"] == str(answer["deliver_at_ms"])
    assert not {"REAL_TOPIC", "REAL_QID", "DELAY"} & message.properties.keys()


def test_a_level_message_waits_in_the_schedule_topic_until_its_time(
    broker: Broker, store: MessageStore, tmp_path: Path
) -> None:
    answer = produce(broker, delay_level=2)  # 5 s
    stored = store.read_messages(SCHEDULE_TOPIC, 1, 0)[0]
    assert answer["deliver_at_ms"] == stored.store_timestamp + 5_000
    assert (answer["queue_id"], answer["queue_offset"]) == (1, None)
    clock = FakeClock()
    service = schedule_service(store, tmp_path, clock)

    clock.now_ms = answer["deliver_at_ms"] - 1
    service.run_once()
    assert delivered(store) == []

    clock.now_ms = answer["deliver_at_ms"]
    service.run_once()
    (message,) = delivered(store)
    assert_whole(message, answer)
    assert message.born_timestamp == stored.born_timestamp


def test_a_timer_message_is_delivered_at_its_time_never_before(
    broker: Broker, store: MessageStore, tmp_path: Path
) -> None:
    due = int(time.time() * 1000) + 60_000
    answer = produce(broker, deliver_at_ms=due)
    assert answer["deliver_at_ms"] == due and store.max_offset(TIMER_TOPIC, 0) == 1
    clock = FakeClock()
    service = timer_service(store, tmp_path, clock)

    clock.now_ms = due - 1
    service.run_once()
    assert delivered(store) == []

    clock.now_ms = due
    service.run_once()
    (message,) = delivered(store)
    assert_whole(message, answer)


def test_a_clean_restart_delivers_nothing_twice(broker: Broker, store: MessageStore, tmp_path: Path) -> None:
    level = produce(broker, delay_level=1)
    timer = produce(broker, "order-8-timeout", delay_ms=30_000)
    clock = FakeClock()
    due = max(level["deliver_at_ms"], timer["deliver_at_ms"])
    for make in (schedule_service, timer_service):
        clock.now_ms = due - 20_000
        service = make(store, tmp_path, clock)
        service.run_once()
        clock.now_ms = due
        service.run_once()  # delivered, within the persist interval: not saved yet
        service.on_stop()  # saves it

    clock.now_ms += 60_000
    for make in (schedule_service, timer_service):
        make(store, tmp_path, clock).run_once()
    assert len(delivered(store)) == 2


def test_a_crash_before_the_progress_is_saved_delivers_again(
    broker: Broker, store: MessageStore, tmp_path: Path
) -> None:
    answer = produce(broker, delay_ms=30_000)
    clock = FakeClock()
    crashed = timer_service(store, tmp_path, clock)
    crashed.run_once()  # enqueued
    clock.now_ms = answer["deliver_at_ms"]
    crashed.run_once()  # delivered, within the persist interval: not saved
    timer_service(store, tmp_path, clock).run_once()
    assert [message.unique_id for message in delivered(store)] == ["order-7-timeout"] * 2


def test_a_long_wait_is_stored_again_before_retention_can_take_it(
    broker: Broker, store: MessageStore, tmp_path: Path
) -> None:
    answer = produce(broker, delay_ms=2_500)
    service = timer_service(store, tmp_path, roll_window_ms=1_000)

    def passed() -> bool:
        service.run_once()
        return bool(delivered(store))

    wait_until(passed, 30, "the timer message")
    (message,) = delivered(store)
    assert message.store_timestamp >= answer["deliver_at_ms"]
    assert store.max_offset(TIMER_TOPIC, 0) >= 3  # stored, then stored again at +1 s and +2 s
