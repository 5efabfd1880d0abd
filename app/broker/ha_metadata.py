"""Metadata a slave copies from its master besides the CommitLog (RocketMQ's SlaveSynchronize):
topic configurations, consumer offsets (pop consumption keeps its progress there too), the
delay levels' delivery progress, and what services above the broker add as parts of their own
(:class:`MetadataPart`: the push subscriptions).

The master answers ``GET /v1/ha/metadata?version=V&wait_ms=W`` with ``{"version", "topics",
"offsets", "delay_offsets"}``, at once when its metadata version is not ``V`` (a topic was created, changed or
deleted since), else once it changes or ``W`` ms have passed. The slave asks again as soon as it has
applied an answer, so topic changes follow at once and offsets at least every ``W`` ms.

A slave takes the master's topic configurations as they are (creating, changing and deleting its
own) and each committed offset that is ahead of its own: an offset committed on the slave while the
master was away is not moved back. The other way, before each request the slave hands the master
the offsets committed on it that are ahead of the master's last answer (``POST /v1/ha/offsets``),
and the master takes those ahead of its own: the greater offset wins on both sides, except that
no offset goes past the master's queue end (a former master's offsets may cover messages it alone
had), and a slave promoted lowers the offsets it copied past its own queue ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any, Protocol

from app.routing.topic_config import TopicConfig, TopicConfigManager
from app.store import MessageStore


class MetadataVersion:
    """A counter of metadata changes that waiters can wait on."""

    def __init__(self) -> None:
        self.version = 0
        self._changed = asyncio.Event()

    def bump(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def is_current(self, version: int) -> bool:
        """Whether ``version`` is the current one: a request for it waits (:meth:`wait_past`)."""
        return self.version == version

    async def wait_past(self, version: int, timeout_s: float) -> None:
        """Return once the version is not ``version``, or after ``timeout_s``."""
        if not self.is_current(version):
            return
        with contextlib.suppress(TimeoutError):
            # asyncio.timeout, not wait_for, which on Python 3.11 can lose a cancellation.
            async with asyncio.timeout(timeout_s):
                await self._changed.wait()


class MetadataPart(Protocol):
    """Metadata of a service above the broker that a slave copies as it is (a master's answer
    carries it under the part's name): what the master holds, and the slave taking it, which
    makes its own what the master's is."""

    def metadata(self) -> Any: ...

    async def follow_metadata(self, found: Any) -> None: ...


def snapshot(
    version: int,
    topics: TopicConfigManager,
    store: MessageStore,
    delay_offsets: list[int],
    parts: dict[str, MetadataPart],
) -> dict[str, Any]:
    """What a slave copies: the master's topic configurations, committed offsets, the next
    offset of each delay level's queue, and every part's own."""
    return {
        "version": version,
        "topics": [dataclasses.asdict(config) for config in topics.all()],
        "offsets": [entry._asdict() for entry in store.consumer_offsets.all()],
        "delay_offsets": list(delay_offsets),
        **{name: part.metadata() for name, part in parts.items()},
    }


def apply_topics(
    topics: TopicConfigManager, store: MessageStore, found: list[dict[str, Any]]
) -> tuple[list[TopicConfig], list[str]]:
    """Make the slave's topic configurations the master's, and drop the queues and offsets of the
    topics the master deleted, as it did; (upserted, deleted)."""
    wanted = {config.name: config for config in (TopicConfig(**fields) for fields in found)}
    upserted = [config for name, config in wanted.items() if topics.get(name) != config]
    for config in upserted:
        topics.put(config)
    deleted = [config.name for config in topics.all() if config.name not in wanted]
    for name in deleted:
        topics.delete(name)
        store.delete_topic(name)
    return upserted, deleted


def apply_offsets(store: MessageStore, found: list[dict[str, Any]], within_queues: bool = False) -> int:
    """Take each of the other side's committed offsets that is ahead of this store's; how many
    moved. ``within_queues`` (a master taking a slave's): none past this store's queue end, which
    would skip the messages this log stores next at those offsets."""
    offsets = store.consumer_offsets
    moved = 0
    for entry in found:
        group, topic, queue_id, offset = entry["group"], entry["topic"], entry["queue_id"], entry["offset"]
        if within_queues:
            offset = min(offset, store.max_offset(topic, queue_id))
        if offset > offsets.committed(group, topic, queue_id):
            offsets.commit(group, topic, queue_id, offset)
            moved += 1
    return moved


OffsetKey = tuple[str, str, int]  # (group, topic, queue id)


def offsets_of(found: list[dict[str, Any]]) -> dict[OffsetKey, int]:
    return {(entry["group"], entry["topic"], entry["queue_id"]): entry["offset"] for entry in found}


def offsets_ahead(store: MessageStore, known: dict[OffsetKey, int]) -> list[dict[str, Any]]:
    """This store's committed offsets that are ahead of ``known`` (the master's, as last seen)."""
    return [
        entry._asdict()
        for entry in store.consumer_offsets.all()
        if entry.offset > known.get((entry.group, entry.topic, entry.queue_id), -1)
    ]
