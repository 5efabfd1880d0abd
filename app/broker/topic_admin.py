"""Creating topics on this broker: one, or a list in one append to the topic log and one registry write.

A create of a topic that exists with the same configuration is not an error (it answers "exists"), so
a create repeated after a lost answer is safe; with another configuration it is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.broker.errors import BrokerError, TooManyTopicsError, TopicExistsError
from app.routing.topic_config import TopicConfig

if TYPE_CHECKING:
    from app.broker.core import Broker

MAX_BULK_TOPICS = 1000


async def create_topic(broker: Broker, wanted: TopicConfig) -> bool:
    """Create ``wanted`` here: True if it was made, False if it was there already, as wanted."""
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
