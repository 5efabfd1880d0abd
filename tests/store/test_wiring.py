"""The store's parts are wired at construction: arrival listeners are passed in, and a listener
that needs the queues' offsets can be given them before the store exists (the QueueTable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.store import MessageStore
from app.store.queue_table import QueueTable
from app.store.record_format import tags_hash
from tests.store.conftest import message, tiny_config


def test_a_listener_built_before_the_store_reads_the_store_s_offsets(tmp_path: Path) -> None:
    config = tiny_config(tmp_path / "store")
    queues = QueueTable(config)
    seen: list[tuple[str, int, int, int]] = []

    def on_arrival(topic: str, queue_id: int, next_offset: int, tags_code: int) -> None:
        seen.append((topic, queue_id, next_offset, queues.max_offset(topic, queue_id)))

    with MessageStore(config, [on_arrival], queues=queues) as store:
        store.append([message(queue_id=1), message(queue_id=1)])
        assert store.max_offset("orders", 1) == queues.max_offset("orders", 1) == 2
    # Every listener runs after the batch is in its queue: once for the queue, at its last message.
    assert seen == [("orders", 1, 2, 2)]

    reopened = QueueTable(config)
    assert reopened.max_offset("orders", 1) == 0  # nothing loaded before the store opens
    with MessageStore(config, queues=reopened):
        assert reopened.max_offset("orders", 1) == 2


def test_every_listener_hears_every_append(tmp_path: Path) -> None:
    first: list[int] = []
    second: list[int] = []
    listeners = [lambda *args: first.append(args[2]), lambda *args: second.append(args[2])]
    with MessageStore(tiny_config(tmp_path / "store"), listeners) as store:
        store.append([message(), message()])
        store.append([message()])
    assert first == second == [2, 3]


def test_an_append_is_told_once_per_queue_and_tags_code_at_its_last_message(tmp_path: Path) -> None:
    """What a held pull needs from a batch: for each of its queues and each tags code among the
    messages, the next offset after the last message of that code (a pull filtering on a tag in
    the middle of the batch is woken as by that message itself)."""
    heard: list[tuple[str, int, int, int]] = []
    with MessageStore(tiny_config(tmp_path / "store"), [lambda *args: heard.append(args)]) as store:
        store.append(
            [
                message(queue_id=0, tags="A"),
                message(queue_id=0, tags="B"),
                message(queue_id=1, tags="A"),
                message(queue_id=0, tags="A"),
            ]
        )
    a, b = tags_hash("A"), tags_hash("B")
    assert sorted(heard) == sorted([("orders", 0, 3, a), ("orders", 0, 2, b), ("orders", 1, 1, a)])


def test_a_table_of_another_configuration_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="another StoreConfig"):
        MessageStore(tiny_config(tmp_path / "a"), queues=QueueTable(tiny_config(tmp_path / "b")))
