"""A delayed message on its way: the internal topics it waits in, the properties that say where it
goes and when, and the re-append to its real topic once it is due.

A delayed message is stored in an internal topic - ``SCHEDULE_TOPIC_XXXX`` (queue = level - 1) for a
delay level, ``rmq_sys_wheel_timer`` (queue 0) for a delay in ms or a delivery time - with its real
topic and queue in REAL_TOPIC and REAL_QID, and DELAY (the level) or TIMER_OUT_MS (when it is due).
Internal topics have no topic configuration: they are not listed, pulled or produced to.

When it is due, :class:`Redeliverer` appends it again to its real topic and queue with its unique
id (UNIQ_KEY), keys, tags, user properties, flag, born time and host, and TIMER_OUT_MS: the time it
was due. It goes to the store directly, not through the produce path, so the idempotency window on
unique ids never takes it for a producer's retry.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence

from app.store import Message, MessageStore, record_format
from app.store.errors import MessageRejectedError
from app.store.record import StoredMessage
from app.store.record_format import (
    LEVEL_DELAYS_MS,
    POS_PHYSICALOFFSET,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_OUT_MS,
    SCHEDULE_TOPIC,
    SHORT,
    decode_properties,
    layout_at,
)
from app.store.results import PutStatus

log = logging.getLogger(__name__)

TIMER_TOPIC = "rmq_sys_wheel_timer"
INTERNAL_TOPICS = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC})

# RocketMQ's messageDelayLevel "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
# (WHARF_MESSAGE_DELAY_LEVEL changes the delays, never their number).
MAX_LEVEL = len(LEVEL_DELAYS_MS)

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")


def level_due_ms(level: int, store_timestamp: int) -> int:
    """When a message of delay ``level`` stored at ``store_timestamp`` is due."""
    return store_timestamp + record_format.LEVEL_DELAYS_MS[level - 1]


def record_physical_offset(record: memoryview | bytes) -> int:
    return int(_INT64.unpack_from(record, POS_PHYSICALOFFSET)[0])


def record_properties(record: memoryview | bytes) -> dict[str, str]:
    """The properties of a stored record, read without copying its body."""
    body_at = layout_at(record).body
    (body_length,) = _INT32.unpack_from(record, body_at - 4)
    topic_at = body_at + body_length
    properties_at = topic_at + 1 + record[topic_at]
    (length,) = SHORT.unpack_from(record, properties_at)
    return decode_properties(record[properties_at + 2 : properties_at + 2 + length])


def real_placement(stored: StoredMessage) -> tuple[str, int]:
    """The topic and queue a scheduled message is for."""
    properties = stored.properties
    return properties[PROPERTY_REAL_TOPIC], int(properties[PROPERTY_REAL_QUEUE_ID])


def scheduled_due_ms(stored: StoredMessage) -> int:
    """When a message waiting in an internal topic is due."""
    due = stored.properties.get(PROPERTY_TIMER_OUT_MS)
    if due is not None:
        return int(due)
    return level_due_ms(int(stored.properties[PROPERTY_DELAY_TIME_LEVEL]), stored.store_timestamp)


def delivered_message(stored: StoredMessage, due_ms: int) -> Message:
    """The message as it goes to its real topic: the internal properties dropped, TIMER_OUT_MS kept."""
    properties = dict(stored.properties)
    topic = properties.pop(PROPERTY_REAL_TOPIC)
    queue_id = int(properties.pop(PROPERTY_REAL_QUEUE_ID))
    properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    properties[PROPERTY_TIMER_OUT_MS] = str(due_ms)
    return copy_message(stored, topic, queue_id, properties)


def rolled_message(stored: StoredMessage) -> Message:
    """The same scheduled message stored again, so that it outlives the CommitLog's retention."""
    return copy_message(stored, stored.topic, stored.queue_id, dict(stored.properties))


def copy_message(stored: StoredMessage, topic: str, queue_id: int, properties: dict[str, str]) -> Message:
    """``stored`` as a new message for ``topic`` and ``queue_id``: body, flag, sysflag, born time and
    host, and reconsume times kept; ``properties`` in place of its own."""
    return Message(
        topic,
        stored.body,
        queue_id,
        properties,
        flag=stored.flag,
        sysflag=stored.sysflag,
        born_timestamp=stored.born_timestamp,
        born_host=stored.born_host,
        reconsume_times=stored.reconsume_times,
    )


class Redeliverer:
    """Appends due messages to their topics and waits until they are as durable as the flush mode
    promises. ``queue_count(topic)`` is the topic's queue count here, 0 if it is gone: a message for
    a deleted topic is dropped, one for a queue the topic no longer has goes to queue id modulo
    the count."""

    def __init__(self, store: MessageStore, queue_count: Callable[[str], int]) -> None:
        self.store = store
        self.queue_count = queue_count

    def deliver(self, messages: Sequence[Message]) -> None:
        """Store ``messages``; StoreError (a full disk, a closed store) if none could be stored."""
        placed = []
        for message in messages:
            if message.topic in INTERNAL_TOPICS:
                placed.append(message)
                continue
            count = self.queue_count(message.topic)
            if count == 0:
                log.warning("delayed message for deleted topic %r dropped", message.topic)
                continue
            message.queue_id %= count
            placed.append(message)
        if not placed:
            return
        try:
            self._put(placed)
        except MessageRejectedError:
            for message in placed:  # one refused message must not hold back the others
                try:
                    self._put([message])
                except MessageRejectedError as error:
                    log.error("delayed message for %r dropped: %s", message.topic, error)

    def _put(self, messages: list[Message]) -> None:
        results = self.store.put(messages)
        if results and results[0].status is PutStatus.FLUSH_DISK_TIMEOUT:
            log.warning("delivered %d delayed messages; the disk did not confirm them in time", len(results))
