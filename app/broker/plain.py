"""Producing plain messages in one compiled call.

Most batches a client sends are plain: every message has a body, maybe tags, keys, an explicit
queue or a unique id of its own, and nothing else (no properties, so no delay; no sharding key).
For those the kernel picks each message's queue and unique id as :meth:`Broker.produce_general`
does and encodes the records (``encode_batch`` straight from a binary batch, ``encode_messages``
from messages a JSON or NDJSON body or a produce socket's JSON frame was parsed into), and the store
appends them as they are: no Message, no per-message Python on the way in. The general path is
this path's twin and takes every other batch: one the kernel finds malformed or not plain, a topic
that does not exist yet or refuses writes, a supplied unique id the idempotency window (or the
batch itself) has seen already, and every batch when the kernel is not loaded.
tests/kernel/test_plain_batch.py drives two brokers, one each way, and compares answers and bytes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from app.broker import repeats
from app.broker.idempotency import IdempotencyWindow
from app.codec import IncomingMessage
from app.store.errors import InvalidTopicError
from app.store.kernel import compiled
from app.store.record_format import BLANK_MIN_SIZE, NO_HOST, EncodedRecord, validate_topic

if TYPE_CHECKING:
    from wharf_client.unique_ids import UniqueIdGenerator

    from app.broker.delay import DelayedDelivery
    from app.broker.ha_role import HaRole
    from app.broker.metrics import BrokerMetrics
    from app.longpoll.hold import PullHoldService
    from app.routing.topic_config import TopicConfig, TopicConfigManager
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

    def acknowledge_now(self, appended: Sequence[AppendResult]) -> str | None: ...

    async def acknowledge(self, appended: Sequence[AppendResult]) -> str: ...


async def produce_messages(
    broker: Broker, topic: str, messages: Sequence[IncomingMessage], born_host: bytes = NO_HOST
) -> list[dict[str, Any]] | None:
    """Store parsed ``messages`` on ``topic`` in one compiled call if each is plain (see the module)
    and answer as :meth:`Broker.produce` does; None, with nothing stored, when the general path must
    take them."""
    if compiled is None:
        return None
    stored = await produce_encoded(broker, topic, [messages], compiled.encode_messages, born_host)
    return stored[0] if stored else None


async def produce_plain(
    broker: Broker, topic: str, batches: Sequence[bytes], born_host: bytes = NO_HOST
) -> list[list[dict[str, Any]]]:
    """Store the binary ``batches`` on ``topic``, in order and in one append, as long as each is
    plain (see the module), and answer each as :meth:`Broker.produce` does. Stops before the first
    batch the general path must take (it may be the first: then nothing is stored), so that what
    comes after it is stored after it; returns the answers of the batches it stored."""
    if compiled is None:
        return []
    return await produce_encoded(broker, topic, batches, compiled.encode_batch, born_host)


def plain_encoder(
    store: MessageStore,
    config: TopicConfig,
    topic_bytes: bytes,
    now_ms: int,
    round_robin: int,
    unique_ids: tuple[str, int],
    born_host: bytes,
) -> Any:
    """The kernel's encoder of plain messages into ``config``'s topic on ``store``: its limits and
    host, the topic's write queues from ``round_robin``, unique ids from ``unique_ids`` (the
    generator's prefix and counter)."""
    assert compiled is not None
    limits = store.limits
    return compiled.PlainEncoder(
        config.name,
        topic_bytes,
        store.store_host,
        now_ms,
        limits.max_message_size,
        limits.max_properties_size,
        store.commitlog.file_size - BLANK_MIN_SIZE,
        config.write_queue_nums,
        round_robin,
        *unique_ids,
        born_host,
    )


class Stored(NamedTuple):
    """Records :func:`store_encoded` appended, not yet acknowledged."""

    records: list[EncodedRecord]
    appended: Sequence[AppendResult]
    sizes: list[int]  # records per stored batch
    woke: bool  # the append woke held pulls, which answer before the producer does

    def answers(self, status: str) -> list[list[dict[str, Any]]]:
        """Each stored batch's answers, every message with ``status``."""
        assert compiled is not None
        answers = compiled.plain_answers(self.records, self.appended, status)
        stored, start = [], 0
        for size in self.sizes:
            stored.append(answers[start : start + size])
            start += size
        return stored


async def produce_encoded(
    broker: Broker,
    topic: str,
    batches: Sequence[Any],
    encode: Callable[..., Any],
    born_host: bytes = NO_HOST,
) -> list[list[dict[str, Any]]]:
    """Encode ``batches`` with the kernel's ``encode`` (``encode_batch`` or ``encode_messages``) up
    to the first it refuses, append their records in one append, and answer each batch once they
    are acknowledged. The records carry ``born_host``, the producer's address."""
    stored = store_encoded(broker, topic, batches, encode, born_host)
    if stored is None:
        return []
    if stored.woke:
        # The pulls this append woke answer before the producer does (as Broker.produce).
        await asyncio.sleep(0)
    status = broker.acknowledge_now(stored.appended) or await broker.acknowledge(stored.appended)
    return stored.answers(status)


def store_messages_now(
    broker: Broker, topic: str, messages: Sequence[IncomingMessage], born_host: bytes = NO_HOST
) -> Stored | None:
    """:func:`store_encoded` of parsed ``messages``, for a caller that acknowledges them itself
    (:meth:`Broker.acknowledge_now`); None, with nothing stored, when the general path must take
    them or the kernel is not loaded."""
    if compiled is None:
        return None
    return store_encoded(broker, topic, [messages], compiled.encode_messages, born_host)


def store_encoded(
    broker: Broker,
    topic: str,
    batches: Sequence[Any],
    encode: Callable[..., Any],
    born_host: bytes = NO_HOST,
) -> Stored | None:
    """The part of :func:`produce_encoded` that does not wait: encode, check, append. None when
    nothing was stored."""
    assert compiled is not None
    if not batches:
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
    window = broker.idempotency if broker.idempotency.enabled else None
    now_ms = int(time.time() * 1000)
    round_robin = broker.round_robin.get(topic, 0)
    counter = broker.unique_ids.counter
    records: list[EncodedRecord] = []
    entries: dict[tuple[str, int], int] = {}
    supplied: set[str] = set()
    sizes: list[int] = []
    total_size = body_bytes = 0
    for batch in batches:
        encoder = plain_encoder(
            store, config, topic_bytes, now_ms, round_robin, (broker.unique_ids.prefix, counter), born_host
        )
        if not encode(batch, encoder):
            break
        made, ids, queues, size, body_size, round_robin_after, counter_after = encoder.result()
        if ids and window is not None and repeated(broker, window, topic, ids, supplied):
            break
        records.extend(made)
        supplied.update(ids)
        for key, count in queues.items():
            entries[key] = entries.get(key, 0) + count
        total_size += size
        body_bytes += body_size
        round_robin, counter = round_robin_after, counter_after
        sizes.append(len(made))
    if not records:
        return None
    broker.ha.check_writable("messages")
    # Taken only now: a batch the general path takes chooses its queues and ids there.
    broker.round_robin[topic] = round_robin
    broker.unique_ids.counter = counter
    woken = broker.holds.woken
    appended = store.append_records(records, total_size, entries)
    broker.metrics.count_produced(topic, len(records), body_bytes)
    if supplied and window is not None:
        window.put_records(topic, records, appended)  # before the group commit, as in produce_general
    return Stored(records, appended, sizes, broker.holds.woken != woken)


def repeated(
    broker: Broker, window: IdempotencyWindow, topic: str, ids: list[str], earlier: set[str]
) -> bool:
    """Whether a supplied unique id repeats one of its batch, of an earlier batch of this append
    (``earlier``), or one the idempotency window remembers: the general path answers repeats."""
    if len(set(ids)) < len(ids) or not earlier.isdisjoint(ids):
        return True
    index = window.first_known(topic, ids)
    while index >= 0:
        if repeats.stored_first(broker, window, topic, ids[index]) is not None:
            return True
        index = window.first_known(topic, ids, index + 1)
    return False


def python_answers(
    records: Sequence[EncodedRecord], appended: Sequence[AppendResult], status: str
) -> list[dict[str, Any]]:
    """The answers of stored records, as :meth:`Broker.produce` makes them: the twin of the
    kernel's ``plain_answers``."""
    return [
        {
            "msg_id": result.msg_id,
            "unique_id": record.uniq_key,
            "queue_id": result.queue_id,
            "queue_offset": result.queue_offset,
            "status": status,
        }
        for record, result in zip(records, appended, strict=True)
    ]
