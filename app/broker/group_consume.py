"""Consuming as a member of a group: heartbeat (join and learn the assignment), pull across the
assigned queues from the group's committed offsets, and commit fenced by the generation.

A clustering group's offsets are the group's own (shared by whichever member owns a queue); a
broadcasting group keeps offsets per member, under :func:`offset_group`. When a member is given a
queue the group has no offset for, the offset its ``consume_from`` names is committed at once, so
that a pull before the first commit and the one after read from the same place.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from app.broker import orderly
from app.broker.core import parse_start
from app.broker.errors import BadRequestError, GenerationFencedError
from app.broker.filters import FilterExpression
from app.broker.groups import BROADCASTING, CLUSTERING, ORDERLY, Group, Member
from app.broker.pull import read_or_hold
from app.broker.retry import ensure_retry_topic
from app.longpoll.hold import Receive, WakeEvent
from app.store import GetMessageResult, GetMessageStatus

if TYPE_CHECKING:
    from app.broker.core import Broker


_OUT_OF_RANGE = (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY)


@dataclasses.dataclass(frozen=True)
class QueueRead:
    """One assigned queue's part of a group pull: where it read from and the offset to commit."""

    topic: str
    queue_id: int
    offset: int
    result: GetMessageResult
    # An ordered queue's message retried in place: (its queue offset, how often it was handed out again).
    reconsumed: tuple[int, int] | None = None


def offset_group(group: Group | str, member: Member) -> str:
    """The name the member's offsets are kept under: the group, or per member when broadcasting."""
    name = group if isinstance(group, str) else group.name
    return f"{name}%{member.client_id}" if member.model == BROADCASTING else name


def _start_offset(broker: Broker, name: str, member: Member, topic: str, queue_id: int) -> int:
    policy, timestamp_ms = parse_start(member.consume_from)
    return broker.group_offset(name, topic, queue_id, policy, timestamp_ms)


async def heartbeat(broker: Broker, name: str, member: Member) -> tuple[Group, list[tuple[str, int, int]]]:
    """Join or renew; the group and the member's (topic, queue id, offset to read from) list."""
    parse_start(member.consume_from)
    orderly.check_member(member)
    for topic, expression in member.subscriptions.items():
        await broker.topic(topic)  # here, or refused with where it is
        expression.compile()
    if member.model == CLUSTERING:
        # Messages sent back for another try come back to the group through its retry topic
        # (made here, so that a first send-back changes none of the group's queues).
        member.subscriptions.setdefault(await ensure_retry_topic(broker, name), FilterExpression.tags())
    group = broker.groups.heartbeat(name, member)
    member = group.members[member.client_id]
    key = offset_group(group, member)
    assignments = []
    offsets = broker.store.consumer_offsets
    for topic, queue_ids in sorted(member.assignment.items()):
        for queue_id in queue_ids:
            offset = _start_offset(broker, key, member, topic, queue_id)
            if offsets.query(key, topic, queue_id) < 0:
                offsets.commit(key, topic, queue_id, offset)
            assignments.append((topic, queue_id, offset))
    return group, assignments


def fence(group: Group, member: Member, generation: int, queues: list[tuple[str, int]]) -> None:
    """Refuse a commit from an older generation, or for a queue the member does not own."""
    if generation != group.generation:
        raise GenerationFencedError(
            f"generation {generation} is over: group {group.name!r} is at generation {group.generation}; "
            "heartbeat to learn the current assignment",
            group.generation,
        )
    for topic, queue_id in queues:
        if queue_id not in member.assignment.get(topic, ()):
            raise GenerationFencedError(
                f"{member.client_id!r} does not own queue {queue_id} of {topic!r} in generation "
                f"{group.generation}",
                group.generation,
            )


async def commit(
    broker: Broker, name: str, client_id: str, generation: int | None, offsets: list[tuple[str, int, int]]
) -> str:
    """Commit a member's offsets (all or nothing), fenced; the name they are kept under."""
    if generation is None:
        raise BadRequestError("a member's commit carries its generation beside its client_id")
    group, member = broker.groups.touch(name, client_id)
    queues = [(topic, queue_id) for topic, queue_id, _ in offsets]
    if generation < broker.groups.cut_generation:
        raise GenerationFencedError(
            f"generation {generation} read a log this broker cut since (it follows another master now): "
            f"group {group.name!r} is at generation {group.generation}; heartbeat and read again",
            group.generation,
        )
    if member.consume_mode == ORDERLY:
        orderly.fence(broker, group, member, queues)  # the locks fence, across rebalances too
    else:
        fence(group, member, generation, queues)
    for topic, queue_id, offset in offsets:
        broker.check_commit(topic, queue_id, offset)
    key = offset_group(group, member)
    for topic, queue_id, offset in offsets:
        broker.store.consumer_offsets.commit(key, topic, queue_id, offset)
    return key


async def pull(
    broker: Broker,
    name: str,
    client_id: str,
    max_messages: int,
    max_wait_ms: int,
    receive: Receive | None = None,
) -> tuple[Group, list[QueueRead]]:
    """Read up to ``max_messages`` across the member's queues from the group's offsets; with
    nothing there, hold until a message arrives on any of them, the wait ends, or the group's
    assignment changes."""
    group, member = broker.groups.touch(name, client_id)
    key = offset_group(group, member)
    filters = {topic: expression.compile() for topic, expression in member.subscriptions.items()}
    reads: list[QueueRead] = []
    room = max_messages
    for topic, queue_ids in sorted(member.assignment.items()):
        for queue_id in queue_ids:
            if room <= 0:
                break
            if not orderly.readable(broker, name, member, topic, queue_id):
                continue
            offset = _start_offset(broker, key, member, topic, queue_id)
            result = broker.store.get_message(topic, queue_id, offset, room, filters[topic])
            if result.status in _OUT_OF_RANGE:
                # Retention took the group's offset (or the queue was rebuilt shorter): go on from
                # where the queue now starts or ends, as RocketMQ's consumer corrects its offset.
                offset = result.next_offset
                broker.store.consumer_offsets.commit(key, topic, queue_id, offset)
                result = broker.store.get_message(topic, queue_id, offset, room, filters[topic])
            reads.append(QueueRead(topic, queue_id, offset, result))
            room -= len(result.records)
    wait_s = min(max_wait_ms, broker.settings.max_wait_ms) / 1000
    if not reads and member.consume_mode == ORDERLY and wait_s > 0:
        # Its queues wait after a failure: read them again once the first one may be read.
        pause_s = orderly.suspended_for_s(broker, name, member)
        if pause_s is not None:
            pause_s = min(pause_s, wait_s)
            await asyncio.sleep(pause_s)
            left_ms = max(0, max_wait_ms - int(pause_s * 1000))
            return await pull(broker, name, client_id, max_messages, left_ms, receive)
    if room < max_messages or not reads:
        return group, _counted(broker, name, _ordered(broker, name, member, reads))
    if wait_s <= 0:
        return group, reads
    wake = WakeEvent()
    group.watchers.add(wake)
    # One budget for every queue: each read takes what is left, so the answer holds at most
    # max_messages (a read and its accounting run with no other task in between).
    budget = [max_messages]

    async def hold(first: QueueRead) -> QueueRead | None:
        if budget[0] <= 0:  # filled by a queue that started first
            return None
        read = await read_or_hold(
            broker.store,
            broker.holds,
            first.topic,
            first.queue_id,
            first.offset,
            lambda: budget[0],
            filters[first.topic],
            wait_s,
            receive,
            wake,
        )
        if read.result.status is GetMessageStatus.FOUND:
            budget[0] -= len(read.result.records)
            wake.set()  # the other queues' holds end: this answer goes out now
        return dataclasses.replace(first, result=read.result)

    try:
        held = await asyncio.gather(*(hold(read) for read in reads))
    finally:
        group.watchers.discard(wake)
    found = [read for read in held if read is not None]
    return group, _counted(broker, name, _ordered(broker, name, member, found))


def _ordered(broker: Broker, name: str, member: Member, reads: list[QueueRead]) -> list[QueueRead]:
    """An ordered member's reads of the queues it still holds (a lock may have ended while the
    pull was held), each with the in-place retry count of its head message."""
    if member.consume_mode != ORDERLY:
        return reads
    locks = broker.queue_locks
    kept = []
    for read in reads:
        if not locks.holds(name, member.client_id, read.topic, read.queue_id):
            continue
        times = locks.reconsume_times(name, read.topic, read.queue_id, read.offset)
        kept.append(dataclasses.replace(read, reconsumed=(read.offset, times)) if times else read)
    return kept


def _counted(broker: Broker, group: str, reads: list[QueueRead]) -> list[QueueRead]:
    """``reads``, once the messages they hand out are counted as consumed by ``group``."""
    for read in reads:
        if read.result.records:
            broker.metrics.count_consumed(read.topic, group, len(read.result.records))
    return reads
