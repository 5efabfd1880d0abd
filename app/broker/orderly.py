"""Ordered consumption by members of a group (RocketMQ's ConsumeMessageOrderlyService, with the
broker doing the client's part for HTTP consumers).

A member asks for it in its heartbeat (``consume_mode`` ``orderly``). It then locks the queues the
broker allocated to it (:func:`lock`, renewed every 20 s) and reads a queue only while it holds
the queue's lock: a group pull hands it the messages of its locked queues only, from the group's
committed offset, so the next batch of a queue comes only after the previous one was committed.
Its commits are fenced by the locks instead of the generation: a member that still holds a queue's
lock after a rebalance may commit what it read, and nobody else reads the queue until it unlocks
or its lock expires. A failed message is retried in place (:mod:`app.broker.retry`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from app.broker.errors import BadRequestError, QueueNotLockedError
from app.broker.groups import BROADCASTING, ORDERLY, Group, Member
from app.broker.queue_locks import QueueId

if TYPE_CHECKING:
    from app.broker.core import Broker


def check_member(member: Member) -> None:
    """An ordered member consumes in clustering: a broadcasting member reads every queue itself."""
    if member.consume_mode == ORDERLY and member.model == BROADCASTING:
        raise BadRequestError(
            "consume_mode orderly needs model clustering (a broadcasting member locks nothing)"
        )


async def persist(broker: Broker) -> None:
    """Write the locks and in-place retries if they changed (before the change is answered)."""
    await broker.queue_locks.flush()


async def lock(broker: Broker, name: str, client_id: str, queues: Iterable[QueueId]) -> list[QueueId]:
    """Lock or renew ``queues`` for an ordered member: those allocated to it in the current
    generation that are free, expired or its own. The queues it now holds of those asked for."""
    _, member = broker.groups.touch(name, client_id)
    if member.consume_mode != ORDERLY:
        raise BadRequestError(
            f"{client_id!r} consumes concurrently: heartbeat with consume_mode orderly to lock"
        )
    owned = [(topic, queue_id) for topic, queue_id in queues if queue_id in member.assignment.get(topic, ())]
    held = broker.queue_locks.lock(name, client_id, owned)
    await persist(broker)
    return held


async def unlock(
    broker: Broker, name: str, client_id: str, queues: Iterable[QueueId] | None
) -> list[QueueId]:
    """Release the client's locks on ``queues`` (None: all of them); the queues released."""
    released = broker.queue_locks.unlock(name, client_id, queues)
    await persist(broker)
    return released


async def leave(broker: Broker, name: str, client_id: str) -> bool:
    """Leave the group; a member that leaves releases its locks at once."""
    left = broker.groups.leave(name, client_id)
    await unlock(broker, name, client_id, None)
    return left


def readable(broker: Broker, name: str, member: Member, topic: str, queue_id: int) -> bool:
    """May a group pull hand ``member`` messages of this queue now? Always for a concurrent
    member; for an ordered one, only while it holds the queue's lock and the queue is not
    suspended after a failure."""
    if member.consume_mode != ORDERLY:
        return True
    locks = broker.queue_locks
    return (
        locks.holds(name, member.client_id, topic, queue_id)
        and locks.suspended_until(name, topic, queue_id) is None
    )


def suspended_for_s(broker: Broker, name: str, member: Member) -> float | None:
    """How long until the first of the member's suspended queues may be read again, if any is."""
    locks = broker.queue_locks
    untils = [
        until
        for topic, queue_id in locks.held_by(name, member.client_id)
        if (until := locks.suspended_until(name, topic, queue_id)) is not None
    ]
    return max(0, min(untils) - locks.now_ms()) / 1000 if untils else None


def fence(broker: Broker, group: Group, member: Member, queues: Iterable[QueueId]) -> None:
    """An ordered member commits only queues whose lock it holds."""
    for topic, queue_id in queues:
        if not broker.queue_locks.holds(group.name, member.client_id, topic, queue_id):
            raise QueueNotLockedError(
                f"{member.client_id!r} does not hold the lock on queue {queue_id} of {topic!r} in group "
                f"{group.name!r}: lock it again"
            )


def in_place(broker: Broker, name: str, topic: str, queue_id: int) -> bool:
    """Is a failed message of this queue retried in place? When the group consumes orderly, or
    (the members not back yet after a restart) the queue's lock lives."""
    group = broker.groups.get(name)
    if group is not None and group.consume_mode == ORDERLY:
        return True
    return broker.queue_locks.holder(name, topic, queue_id) is not None
