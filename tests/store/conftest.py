"""Shared fixtures for the store's specification tests.

Stores are built with tiny segments (a 4 KiB CommitLog segment holds a few dozen small messages, a
ConsumeQueue segment 8 entries), so rolling over to a new segment happens all the time, and a small
message index (index files are allocated whole: a default one takes 420 MB of disk).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from app.store import Message, MessageStore, StoreConfig
from app.store.flush import CommitLogFlusher
from app.store.message_store import FlusherFactory

TINY_COMMITLOG_FILE_SIZE = 4096
TINY_CONSUMEQUEUE_FILE_ENTRIES = 8
SMALL_INDEX = {"max_hash_slots": 1024, "max_index_count": 4096}


def tiny_config(store_dir: Path, **overrides: Any) -> StoreConfig:
    """A configuration with tiny segments; any field can be overridden."""
    values: dict[str, Any] = {
        "store_dir": store_dir,
        "commitlog_file_size": TINY_COMMITLOG_FILE_SIZE,
        "consumequeue_file_entries": TINY_CONSUMEQUEUE_FILE_ENTRIES,
        **SMALL_INDEX,
    }
    values.update(overrides)
    return StoreConfig(**values)


class StoreFactory(Protocol):
    def __call__(
        self,
        store_dir: Path | None = None,
        *,
        on_arrival: Callable[[str, int, int, int], None] | None = None,
        flusher: FlusherFactory | None = None,
        **overrides: Any,
    ) -> MessageStore: ...


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[StoreFactory]:
    """``make_store(store_dir=None, *, on_arrival=None, flusher=None, **config_overrides)``: an open store.

    ``store_dir`` defaults to ``tmp_path / "store"``; calling again with the same directory after
    closing the first store reopens it. ``flusher`` receives the CommitLog's files and the
    checkpoint and returns the CommitLog flusher the store will use: the seam for injecting a slow, stalled or
    counting disk. Every store still open at teardown is closed.
    """
    stores: list[MessageStore] = []

    def factory(
        store_dir: Path | None = None,
        *,
        on_arrival: Callable[[str, int, int, int], None] | None = None,
        flusher: FlusherFactory | None = None,
        **overrides: Any,
    ) -> MessageStore:
        store = MessageStore(
            tiny_config(store_dir or tmp_path / "store", **overrides),
            [on_arrival] if on_arrival is not None else (),
            flusher=flusher or CommitLogFlusher,
        )
        stores.append(store)
        return store.open()

    yield factory
    for store in reversed(stores):
        store.close()


@pytest.fixture
def store(make_store: StoreFactory) -> MessageStore:
    """An open ASYNC_FLUSH store with tiny segments."""
    return make_store()


def message(
    topic: str = "orders",
    body: bytes = b"body",
    queue_id: int = 0,
    tags: str | None = None,
    **properties: str,
) -> Message:
    """A message with optional TAGS and further properties."""
    props = dict(properties)
    if tags is not None:
        props["TAGS"] = tags
    return Message(topic, body, queue_id=queue_id, properties=props)


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition") -> None:
    """Poll ``condition`` until it holds; fail the test when ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.002)


class CountingFlusher(CommitLogFlusher):
    """A real flusher that counts its calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0
        self._count_lock = threading.Lock()

    def flush(self, least_pages: int = 0) -> None:
        with self._count_lock:
            self.calls += 1
        super().flush(least_pages)


class GatedFlusher(CountingFlusher):
    """A disk that does not finish a flush until ``gate`` is opened (or ``gate_timeout_s`` passes)."""

    def __init__(self, *args: Any, gate_timeout_s: float = 10.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.gate_timeout_s = gate_timeout_s
        self.entered = threading.Event()
        self.timed_out = False

    def flush(self, least_pages: int = 0) -> None:
        self.entered.set()
        if not self.gate.wait(self.gate_timeout_s):
            self.timed_out = True
        super().flush(least_pages)


class StalledFlusher(CommitLogFlusher):
    """A disk that never makes progress: every flush returns without writing anything."""

    def flush(self, least_pages: int = 0) -> None:
        return None
