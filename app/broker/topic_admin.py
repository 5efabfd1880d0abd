"""Creating topics: one here, a list here in one append to the topic log and one registry write, or
one on every live master of a cluster (or of a list of brokers).

A create of a topic that exists with the same configuration is not an error (it answers "exists"), so
a create repeated after a lost answer is safe; with another configuration it is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.broker.errors import (
    BrokerError,
    ClusterNotFoundError,
    NoRegistryError,
    TooManyTopicsError,
    TopicExistsError,
)
from app.routing.topic_config import TopicConfig

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
