"""Creating topics: one here, a list here in one append to the topic log and one registry write, or
one on every live master of a cluster (or of a list of brokers); changing one's queue numbers and
permission (RocketMQ's updateTopic).

A create of a topic that exists with the same configuration is not an error (it answers "exists"), so
a create repeated after a lost answer is safe; with another configuration it is refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.broker.dead_letter import DLQ_TOPIC_PREFIX
from app.broker.delay_message import INTERNAL_TOPICS
from app.broker.errors import (
    BrokerError,
    ClusterNotFoundError,
    InvalidParameterError,
    NoRegistryError,
    TooManyTopicsError,
    TopicExistsError,
)
from app.broker.transaction_message import TRANSACTION_TOPICS
from app.routing.topic_config import TopicConfig
from app.store.consumer_offsets import RETRY_TOPIC_PREFIX
from app.store.errors import InvalidTopicError

if TYPE_CHECKING:
    from app.broker.core import Broker

MAX_BULK_TOPICS = 1000


@dataclasses.dataclass(frozen=True)
class Placement:
    """What one master answered to a create across brokers: ``created`` (True made, False there
    already) or ``refused`` for this broker; the HTTP ``status`` and ``error`` another broker answered."""

    broker_name: str
    address: str
    created: bool | None = None
    refused: BrokerError | None = None
    status: int | None = None
    error: str | None = None


async def create_topic(broker: Broker, wanted: TopicConfig) -> bool:
    """Create ``wanted`` here: True if it was made, False if it was there already, as wanted."""
    broker.refuse_on_slave("topic changes")
    existing = broker.topics.get(wanted.name)
    if existing is not None:
        if existing != wanted:
            raise TopicExistsError(wanted.name, existing)
        await broker.topics_published()  # a create repeated after a 503 answers once it is published
        return False
    await broker.require_registry()
    ((config, created),) = await broker.creator.create([wanted])
    if not created and config != wanted:
        raise TopicExistsError(wanted.name, config)
    return created


@dataclasses.dataclass(frozen=True)
class TopicChange:
    """What an update sets; None keeps the topic's current value."""

    read_queues: int | None = None
    write_queues: int | None = None
    perm: int | None = None
    order: bool | None = None

    def applied_to(self, current: TopicConfig) -> TopicConfig:
        def pick(value: Any, now: Any) -> Any:
            return now if value is None else value

        return TopicConfig(
            current.name,
            pick(self.read_queues, current.read_queue_nums),
            pick(self.write_queues, current.write_queue_nums),
            pick(self.perm, current.perm),
            pick(self.order, current.order),
        )


def refuse_system_topic(name: str) -> None:
    """InvalidTopicError for a topic the broker makes and runs itself: a group's retry and
    dead-letter topics, and the internal topics of delayed and transactional messages."""
    if name in INTERNAL_TOPICS or name in TRANSACTION_TOPICS:
        raise InvalidTopicError(f"topic {name!r} is internal to the broker and is not changed by hand")
    for prefix in (RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX):
        if name.startswith(prefix):
            raise InvalidTopicError(f"topic {name!r} is a group's {prefix} topic, which the broker manages")


async def update_topic(broker: Broker, name: str, change: TopicChange) -> TopicConfig:
    """Change a topic's queue numbers, permission or order flag here, at once; the configuration now
    in force. More queues are added empty. Fewer write queues stop writes to the dropped ones, whose
    messages stay readable while the read queues still cover them: the read queues may not go under
    the write queues. The change reaches the route registry and, through the metadata version, the
    slaves."""
    broker.refuse_on_slave("topic changes")
    refuse_system_topic(name)
    await broker.topic(name)  # 404 (or 421) before the registry is asked
    await broker.require_registry()
    current = await broker.topic(name)  # as it is now, after the wait
    wanted = change.applied_to(current)
    if wanted.read_queue_nums < wanted.write_queue_nums:
        raise InvalidParameterError(
            f"read queues ({wanted.read_queue_nums}) may not be fewer than write queues "
            f"({wanted.write_queue_nums}): a queue written but not read is never consumed; shrink the "
            "write queues first, and the read queues once their messages are consumed"
        )
    if wanted == current:
        await broker.topics_published()
        return current
    await asyncio.to_thread(broker.topics.put, wanted)
    await broker.topics_changed(upserted=[wanted])
    return wanted


async def create_topics(
    broker: Broker, wanted: Sequence[TopicConfig]
) -> list[tuple[TopicConfig, bool] | BrokerError]:
    """Create a list of topics: per topic, (its configuration, whether it was made) or the refusal."""
    broker.refuse_on_slave("topic changes")
    if len(wanted) > MAX_BULK_TOPICS:
        raise TooManyTopicsError(
            f"at most {MAX_BULK_TOPICS} topics per request, got {len(wanted)}: send them in several"
        )
    await broker.require_registry()
    outcomes = await broker.creator.create(list(wanted))
    return [
        (config, created) if created or config == want else TopicExistsError(want.name, config)
        for want, (config, created) in zip(wanted, outcomes, strict=True)
    ]


async def create_across(
    broker: Broker,
    wanted: TopicConfig,
    request: Mapping[str, Any],
    cluster: str | None,
    brokers: Sequence[str] | None,
    headers: Mapping[str, str],
) -> list[Placement]:
    """Create ``wanted`` on every live master of ``cluster`` (or of ``brokers``): here directly, on the
    others by forwarding ``request`` (the create's body) with ``headers`` (the caller's credentials,
    which the other brokers' ACL asks too) over the outbound adapter (app.broker.outbound)."""
    routing = broker.routing
    if routing is None:
        raise NoRegistryError("this broker has no route registry")
    targets = await routing.masters(cluster, brokers)
    if not targets:
        where = f"cluster {cluster!r}" if cluster else f"brokers {list(brokers or [])}"
        raise ClusterNotFoundError(f"no live master in {where}")
    placements = []
    async with broker.outbound.peers() as peers:
        for name, address in targets:
            if name == routing.identity.broker_name:
                try:
                    created = await create_topic(broker, wanted)
                    placements.append(Placement(name, address, created=created))
                except BrokerError as refused:
                    placements.append(Placement(name, address, refused=refused))
                continue
            answer = await peers.create_topic(address, request, headers)
            placements.append(Placement(name, address, status=answer.status, error=answer.error))
    return placements
