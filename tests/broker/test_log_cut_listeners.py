"""The cursors above the core hear of a cut of the log: ``Broker.on_log_cut`` registers a listener,
``Broker.log_cut`` calls every one after the groups moved to a new generation, a listener that fails
is logged and the others are still called, and a removed listener is not called again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.broker import Broker
from app.broker.listeners import Listeners
from app.longpoll.hold import PullHoldService
from app.outbound import HttpOutbound
from app.routing.topic_config import TopicConfigManager
from app.settings import Settings
from app.store import MessageStore
from tests.store.conftest import tiny_config


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    store = MessageStore(tiny_config(tmp_path / "store", commitlog_file_size=1 << 20)).open()
    try:
        topics = TopicConfigManager(tmp_path / "topics.json")
        yield Broker(Settings(), store, topics, PullHoldService(store.max_offset), outbound=HttpOutbound())
    finally:
        store.close()


def test_a_cut_calls_every_listener_after_the_groups_moved_on(broker: Broker) -> None:
    heard: list[tuple[str, int]] = []
    broker.on_log_cut(lambda: heard.append(("first", broker.groups.cut_generation)))
    broker.on_log_cut(lambda: heard.append(("second", broker.groups.cut_generation)))
    broker.log_cut()
    generation = broker.groups.cut_generation
    assert generation > 0
    assert heard == [("first", generation), ("second", generation)]
    broker.log_cut()
    assert [name for name, _ in heard] == ["first", "second", "first", "second"]


def test_a_removed_listener_is_not_called_again(broker: Broker) -> None:
    heard: list[str] = []
    remove = broker.on_log_cut(lambda: heard.append("gone"))
    broker.on_log_cut(lambda: heard.append("kept"))
    remove()
    remove()  # repeat-safe
    broker.log_cut()
    assert heard == ["kept"]


def test_a_listener_that_fails_is_logged_and_the_others_are_called(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[str] = []

    def fails() -> None:
        raise RuntimeError("a listener's own fault")

    broker.on_log_cut(fails)
    broker.on_log_cut(lambda: heard.append("after"))
    broker.log_cut()
    assert heard == ["after"]
    assert "a listener of the log's cut failed" in caplog.text
    assert "a listener's own fault" in caplog.text


def test_a_listener_may_remove_itself_while_called() -> None:
    """A subscriber that ends on the cut unregisters as it ends, possibly within the call."""
    listeners = Listeners("an event")
    heard: list[str] = []
    removers = []

    def once() -> None:
        heard.append("once")
        removers[0]()

    removers.append(listeners.add(once))
    listeners.add(lambda: heard.append("always"))
    listeners.call()
    listeners.call()
    assert heard == ["once", "always", "always"]
    assert len(listeners) == 1
