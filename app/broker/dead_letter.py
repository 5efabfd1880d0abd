"""Dead letters (SPEC 4): a message a group failed to consume more than its max reconsume times
goes to the group's dead-letter topic, ``%DLQ%<group>``, and is not delivered to the group again.

The topic is made on its first dead letter with one queue, as RocketMQ makes it, readable and
writable so that an operator can look into it and consume it. The copy keeps the message's body,
flag, born timestamp and host, and its properties (unique id, keys, tags and the rest); the topic
and message id it came from go into :data:`PROPERTY_DLQ_ORIGIN_TOPIC` and
:data:`PROPERTY_DLQ_ORIGIN_MESSAGE_ID`, and its record's reconsume times say how often it was
delivered again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.broker.durable import append_all_durably
from app.broker.errors import MessageNotFoundError, TopicNotWritableError
from app.routing.topic_config import TopicConfig
from app.store import Message
from app.store.record import StoredMessage, decode_record
from app.store.record_format import PROPERTY_RETRY_TOPIC
from app.store.results import AppendResult

if TYPE_CHECKING:
    from app.broker.core import Broker

DLQ_TOPIC_PREFIX = "%DLQ%"
DLQ_QUEUE_NUMS = 1
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
# A resend of all holds at most this many dead letters in memory at once.
MAX_RESEND = 1000


def dead_letter_topic(group: str) -> str:
    return f"{DLQ_TOPIC_PREFIX}{group}"


def max_reconsume_times(broker: Broker, group: str) -> int:
    """How often the group may be handed a message again before it is a dead letter: a message
    delivered with this many reconsumes and not consumed goes to the dead-letter topic (the
    group's setting, PUT /v1/groups/{group}/config; WHARF_MAX_RECONSUME_TIMES by default)."""
    return broker.group_configs.get(group).max_reconsume_times


async def group_topic(broker: Broker, topic: str, queues: int, what: str) -> TopicConfig:
    """A group's own topic (retry or dead letters), made with ``queues`` queues on first use."""
    config = broker.topics.get(topic)
    if config is None:
        ((config, _),) = await broker.creator.create([TopicConfig(topic, queues, queues)])
    if not config.writable:
        raise TopicNotWritableError(f"{what} topic {topic!r} does not accept messages")
    return config


def copy_to(record: StoredMessage, topic: str, properties: dict[str, str], reconsume_times: int) -> Message:
    """A copy of ``record`` for queue 0 of ``topic``: body, flag, born time and host kept."""
    return Message(
        topic,
        record.body,
        0,
        properties,
        flag=record.flag,
        born_timestamp=record.born_timestamp,
        born_host=record.born_host,
        reconsume_times=reconsume_times,
    )


async def append_durably(broker: Broker, message: Message) -> AppendResult:
    """Append one message and wait until it is as durable as the flush mode promises."""
    (appended,), _ = await append_all_durably(broker.store, [message])
    return appended


async def send_to_dead_letter(
    broker: Broker, group: str, record: StoredMessage, reconsume_times: int
) -> AppendResult:
    """Append a copy of ``record`` to the group's dead-letter topic (made if needed) and wait
    until it is as durable as the flush mode promises; where it landed."""
    topic = dead_letter_topic(group)
    await group_topic(broker, topic, DLQ_QUEUE_NUMS, "dead-letter")
    properties = dict(record.properties)
    properties[PROPERTY_DLQ_ORIGIN_TOPIC] = record.topic
    properties[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] = record.msg_id
    return await append_durably(broker, copy_to(record, topic, properties, reconsume_times))


def original_topic(record: StoredMessage) -> str:
    """The topic a dead letter was first produced to (through the retry topic, if it went there)."""
    origin = record.properties.get(PROPERTY_DLQ_ORIGIN_TOPIC, record.topic)
    return record.properties.get(PROPERTY_RETRY_TOPIC, origin) if origin.startswith("%RETRY%") else origin


def list_dead_letters(
    broker: Broker, group: str, offset: int, limit: int
) -> tuple[list[tuple[StoredMessage, memoryview]], int]:
    """Up to ``limit`` dead letters of the group from queue offset ``offset`` (decoded, and their
    records), and the next offset."""
    result = broker.store.get_message(dead_letter_topic(group), 0, offset, limit)
    return [(decode_record(record), record) for record in result.records], result.next_offset


async def resend(broker: Broker, group: str, msg_ids: list[str] | None) -> list[tuple[StoredMessage, str]]:
    """Send dead letters back to the topics they were first produced to, with reconsume times 0:
    those named by ``msg_ids``, or (None) the next :data:`MAX_RESEND` past the group's resend mark,
    which then moves past them (call again for more). (dead letter, msg id of the copy) for each one sent."""
    topic = dead_letter_topic(group)
    offsets = broker.store.consumer_offsets
    if msg_ids is None:
        start = max(offsets.query(group, topic, 0), 0)
        end = broker.store.max_offset(topic, 0)
        count = min(end - start, MAX_RESEND)
        chosen = broker.store.read_messages(topic, 0, start, count) if count > 0 else []
    else:
        chosen = []
        for msg_id in msg_ids:
            found = broker.store.query_message_by_id(msg_id)
            if found is None or found.topic != topic:
                raise MessageNotFoundError(f"no dead letter of group {group!r} has id {msg_id}")
            chosen.append(found)
    copies = []
    for letter in chosen:
        properties = dict(letter.properties)
        properties.pop(PROPERTY_DLQ_ORIGIN_TOPIC, None)
        properties.pop(PROPERTY_DLQ_ORIGIN_MESSAGE_ID, None)
        properties.pop(PROPERTY_RETRY_TOPIC, None)
        destination = original_topic(letter)
        config = await broker.topic_for_write(destination)
        copies.append(
            Message(
                destination,
                letter.body,
                int(letter.msg_id[-8:], 16) % config.write_queue_nums,
                properties,
                flag=letter.flag,
                born_timestamp=letter.born_timestamp,
                born_host=letter.born_host,
            )
        )
    appended = broker.store.append(copies) if copies else []
    if appended and broker.store.group_commit is not None:
        await broker.store.wait_durable(appended)
    if msg_ids is None and chosen:
        offsets.commit(group, topic, 0, chosen[-1].queue_offset + 1)
    return [(letter, result.msg_id) for letter, result in zip(chosen, appended, strict=True)]


def skip(broker: Broker, group: str, through_offset: int | None) -> tuple[int, int]:
    """Pass over dead letters without sending them anywhere (RocketMQ has no per-message delete):
    the group's mark on its dead-letter topic, the one a resend of all moves, goes past every dead
    letter (``through_offset`` None) or every one up to and including ``through_offset``. Never
    back. (How many it passed, the mark now.) The letters stay stored until retention deletes them."""
    topic = dead_letter_topic(group)
    store, offsets = broker.store, broker.store.consumer_offsets
    mark = max(offsets.query(group, topic, 0), store.min_offset(topic, 0))
    end = store.max_offset(topic, 0)
    target = end if through_offset is None else min(through_offset + 1, end)
    if target <= mark:
        return 0, max(mark, 0)
    offsets.commit(group, topic, 0, target)
    return target - mark, target
