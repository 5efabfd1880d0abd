"""Sending a message back for another try (RocketMQ's consumerSendMessageBack, SPEC 4).

A message a group could not consume goes to the group's retry topic, ``%RETRY%<group>`` (one
queue, made on first use), after a growing delay: delay level 3 + the times it was consumed again
before (10 s, 30 s, 1 min, 2 min, ... up to 2 h), through the delayed delivery of
app.broker.delay. The members of a clustering group read the retry topic beside their topics
(app.broker.group_consume), so the message comes back to the group by itself, with its
reconsume_times one higher. Past the group's max reconsume times it goes to the dead-letter topic
instead (app.broker.dead_letter).

A message of an ordered queue (its group consumes orderly, or the queue's lock lives) is retried in
place instead, as RocketMQ's orderly consumer does (SUSPEND_CURRENT_QUEUE_A_MOMENT): the queue is
suspended for WHARF_ORDERLY_SUSPEND_MS, then the same message is handed out again from the group's
offset, its reconsume count one higher; past the max reconsume times it goes to the dead-letter
topic and the group's offset moves past it, so that the queue goes on.

The copy keeps the body, unique id, keys, tags and properties; ``RETRY_TOPIC`` names the topic it
was first produced to and ``ORIGIN_MESSAGE_ID`` its first message id.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from app.broker import orderly
from app.broker.dead_letter import (
    append_durably,
    copy_to,
    group_topic,
    max_reconsume_times,
    send_to_dead_letter,
)
from app.broker.errors import MessageNotFoundError
from app.store.consumer_offsets import RETRY_TOPIC_PREFIX
from app.store.record import StoredMessage
from app.store.record_format import PROPERTY_RETRY_TOPIC

if TYPE_CHECKING:
    from app.broker.core import Broker

RETRY_QUEUE_NUMS = 1
FIRST_RETRY_LEVEL = 3  # RocketMQ: delayLevel = 3 + reconsumeTimes
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"


def retry_topic(group: str) -> str:
    return f"{RETRY_TOPIC_PREFIX}{group}"


async def ensure_retry_topic(broker: Broker, group: str) -> str:
    """The group's retry topic, made on first use. A clustering member's heartbeat makes it (as
    RocketMQ's heartbeat does), so that a first send-back changes none of the group's queues and
    does not fence the commit of the batch the message came in."""
    topic = retry_topic(group)
    await group_topic(broker, topic, RETRY_QUEUE_NUMS, "retry")
    return topic


@dataclasses.dataclass(frozen=True)
class SentBack:
    """Where a message sent back went: ``status`` RETRY or DEAD_LETTER."""

    status: str
    topic: str
    msg_id: str
    reconsume_times: int
    delay_level: int | None = None
    suspended_until_ms: int | None = None


def find(
    broker: Broker,
    msg_id: str | None,
    topic: str | None,
    queue_id: int | None,
    offset: int | None,
    produced_to: str | None = None,
) -> StoredMessage:
    """The stored message a send-back names: by its id, or by topic, queue and queue offset; in a
    retry topic, ``produced_to`` is the topic the message must have been first produced to."""
    if msg_id is not None:
        found = broker.store.query_message_by_id(msg_id)
        if found is None:
            raise MessageNotFoundError(f"no message with id {msg_id} on this broker")
        return found
    assert topic is not None and queue_id is not None and offset is not None
    read = broker.store.read_messages(topic, queue_id, offset, 1)
    if not read or read[0].queue_offset != offset:
        raise MessageNotFoundError(f"no message at offset {offset} of queue {queue_id} of {topic!r}")
    if produced_to not in (None, topic, read[0].properties.get(PROPERTY_RETRY_TOPIC)):
        raise MessageNotFoundError(
            f"the message at offset {offset} of queue {queue_id} of {topic!r} was not produced to {produced_to!r}"
        )
    return read[0]


async def send_back(broker: Broker, group: str, stored: StoredMessage) -> SentBack:
    """Send ``stored`` to the group's retry topic after its delay, or to the dead-letter topic when
    the group has consumed it again as often as it may; durable as the flush mode promises. A
    message of an ordered queue is retried in place instead."""
    if orderly.in_place(broker, group, stored.topic, stored.queue_id):
        return await _retry_in_place(broker, group, stored)
    reconsume_times = stored.reconsume_times + 1
    if reconsume_times > max_reconsume_times(broker, group):
        dead = await send_to_dead_letter(broker, group, stored, stored.reconsume_times)
        return SentBack("DEAD_LETTER", dead.topic, dead.msg_id, stored.reconsume_times)
    topic = await ensure_retry_topic(broker, group)
    properties = dict(stored.properties)
    properties.setdefault(PROPERTY_RETRY_TOPIC, stored.topic)
    properties.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, stored.msg_id)
    message = copy_to(stored, topic, properties, reconsume_times)
    level = FIRST_RETRY_LEVEL + stored.reconsume_times
    broker.delays.schedule_at_level(message, level)
    appended = await append_durably(broker, message)
    broker.delays.wakeup()
    return SentBack("RETRY", topic, appended.msg_id, reconsume_times, min(level, 18))


async def _retry_in_place(broker: Broker, group: str, stored: StoredMessage) -> SentBack:
    """Suspend the message's queue and hand the message out again (``SUSPENDED``), or past the
    max reconsume times send it to the dead-letter topic and move the group's offset past it."""
    locks = broker.queue_locks
    topic, queue_id, offset = stored.topic, stored.queue_id, stored.queue_offset
    times = max(stored.reconsume_times, locks.reconsume_times(group, topic, queue_id, offset))
    if times + 1 > max_reconsume_times(broker, group):
        dead = await send_to_dead_letter(broker, group, stored, times)
        locks.passed(group, topic, queue_id)
        offsets = broker.store.consumer_offsets
        if offsets.query(group, topic, queue_id) <= offset:
            offsets.commit(group, topic, queue_id, offset + 1)
        await orderly.persist(broker)
        return SentBack("DEAD_LETTER", dead.topic, dead.msg_id, times)
    suspend_ms = broker.settings.orderly_suspend_ms
    times = locks.failed(group, topic, queue_id, offset, suspend_ms, times + 1)
    await orderly.persist(broker)
    until = locks.suspended_until(group, topic, queue_id) or locks.now_ms()
    return SentBack("SUSPENDED", topic, stored.msg_id, times, suspended_until_ms=until)
