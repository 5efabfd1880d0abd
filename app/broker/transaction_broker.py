"""What transactions need of the broker core (:class:`app.broker.core.Broker`): the protocol the
transaction modules (:mod:`app.broker.transactions`, :mod:`app.broker.transaction_batch`,
:mod:`app.broker.transaction_torn`) are written against, in a module of its own so that none of
them imports another for its type."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from app.broker.delay import DelayedDelivery
    from app.broker.ha_role import HaRole
    from app.broker.idempotency import IdempotencyWindow
    from app.broker.metrics import BrokerMetrics
    from app.broker.outbound import Outbound
    from app.codec import IncomingMessage
    from app.routing.topic_config import TopicConfig, TopicConfigManager
    from app.settings import Settings
    from app.store import Message, MessageStore


class UniqueIds(Protocol):
    prefix: str
    counter: int

    def next(self) -> str: ...


class Broker(Protocol):
    """What transactions need of the broker core (app.broker.core.Broker)."""

    settings: Settings
    store: MessageStore
    topics: TopicConfigManager
    delays: DelayedDelivery
    idempotency: IdempotencyWindow
    metrics: BrokerMetrics
    ha: HaRole
    outbound: Outbound
    round_robin: dict[str, int]

    @property
    def unique_ids(self) -> UniqueIds: ...

    async def topic_for_write(self, name: str) -> TopicConfig: ...

    def choose_queue(self, config: TopicConfig, incoming: IncomingMessage) -> int: ...

    def to_message(
        self, topic: str, queue_id: int, incoming: IncomingMessage, unique_id: str, born_host: bytes = ...
    ) -> Message: ...
