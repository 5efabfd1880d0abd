"""Producing a binary batch of plain messages in one compiled call.

Most batches a client sends are plain: every message has a body, maybe tags, keys, an explicit
queue or a unique id of its own, and nothing else (no properties, so no delay; no sharding key).
For those the kernel's ``encode_batch`` parses the batch, picks each message's queue and unique id
as :meth:`Broker.produce` does, and encodes the records, and the store appends them as they are:
no parsed message, no Message, no per-message Python on the way in. The general path (parse,
:meth:`Broker.produce`) is this path's twin and takes every other batch: one the kernel finds
malformed or not plain, a topic that does not exist yet or refuses writes, a supplied unique id
the idempotency window (or the batch itself) has seen already, and every batch when the kernel is
not loaded. tests/kernel checks that both store the same records.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from app.broker import repeats
from app.store.errors import InvalidTopicError
from app.store.kernel import compiled
from app.store.record_format import BLANK_MIN_SIZE, SYSFLAG_PRODUCER_UNIQ_KEY, validate_topic

if TYPE_CHECKING:
    from app.broker.delay import DelayedDelivery
    from app.broker.ha_role import HaRole
    from app.broker.idempotency import IdempotencyWindow
    from app.broker.metrics import BrokerMetrics
    from app.broker.unique_ids import UniqueIdGenerator
    from app.longpoll.hold import PullHoldService
    from app.routing.topic_config import TopicConfigManager
    from app.store import AppendResult, MessageStore


class Broker(Protocol):
    """What producing a plain batch needs of the broker core."""

    store: MessageStore
    topics: TopicConfigManager
    delays: DelayedDelivery
    idempotency: IdempotencyWindow
    unique_ids: UniqueIdGenerator
    round_robin: dict[str, int]
    holds: PullHoldService
    metrics: BrokerMetrics
    ha: HaRole

    async def acknowledge(self, appended: Sequence[AppendResult]) -> str: ...


async def produce_plain(broker: Broker, topic: str, data: bytes) -> list[dict[str, Any]] | None:
    """Store the binary batch ``data`` on ``topic`` if it is plain (see the module), and answer as
    :meth:`Broker.produce` does; None, with nothing stored, when the general path must take it."""
    if compiled is None:
        return None
    config = broker.topics.get(topic)
    if config is None or not config.writable:
        return None
    store = broker.store
    limits = store.limits
    try:
        topic_bytes = validate_topic(topic, limits.max_topic_length)
    except InvalidTopicError:
        return None
    unique_ids = broker.unique_ids
    made = compiled.encode_batch(
        data,
        topic,
        topic_bytes,
        store.store_host,
        int(time.time() * 1000),
        limits.max_message_size,
        limits.max_properties_size,
        store.commitlog.file_size - BLANK_MIN_SIZE,
        config.write_queue_nums,
        broker.round_robin.get(topic, 0),
        unique_ids.prefix,
        unique_ids.counter,
    )
    if made is None:
        return None
    records, supplied, entries, total_size, body_bytes, round_robin, counter = made
    window = broker.idempotency if broker.idempotency.enabled else None
    if supplied and window is not None:
        if len(set(supplied)) < len(supplied):
            return None  # a repeat within the batch
        for unique_id in supplied:
            if repeats.stored_first(broker, window, topic, unique_id) is not None:
                return None
    broker.ha.check_writable("messages")
    # Taken only now: a batch the general path takes chooses its queues and ids there.
    broker.round_robin[topic] = round_robin
    unique_ids.counter = counter
    woken = broker.holds.woken
    appended = store.append_records(records, total_size, entries)
    broker.metrics.count_produced(topic, len(records), body_bytes)
    if broker.holds.woken != woken:
        # The pulls this append woke answer before the producer does (as Broker.produce).
        await asyncio.sleep(0)
    if supplied and window is not None:
        # Remembered before the group commit, as Broker.produce does.
        window.put_many(
            topic,
            (
                (record[5], result.physical_offset)
                for record, result in zip(records, appended, strict=True)
                if record[6] & SYSFLAG_PRODUCER_UNIQ_KEY
            ),
        )
    status = await broker.acknowledge(appended)
    return [
        {
            "msg_id": result.msg_id,
            "unique_id": record[5],
            "queue_id": result.queue_id,
            "queue_offset": result.queue_offset,
            "status": status,
        }
        for record, result in zip(records, appended, strict=True)
    ]
