"""Wharf's Python client: a route-aware producer, a group consumer whose queues the brokers allocate,
a long-polling pull consumer of given queues, topic administration and reads of queues at given
offsets (sync, httpx); and their asyncio counterparts: a producer with several batches in flight,
a pull consumer, and a WebSocket subscriber."""

from app.client.admin import Admin
from app.client.aio_consumer import AsyncConsumer
from app.client.aio_producer import AsyncProducer
from app.client.aio_subscriber import AsyncSubscriber
from app.client.consumer import ConsumedMessage, PullConsumer
from app.client.errors import BrokerError, BrokerUnavailableError, WharfClientError
from app.client.fault import LatencyFaultTolerance
from app.client.group_consumer import GroupBatch, GroupConsumer
from app.client.producer import OutgoingMessage, Producer, SendResult
from app.client.queues import PullPage, QueueClient, QueueOffsets
from app.client.routes import MessageQueue, RouteCache, TopicRoute

__all__ = [
    "Admin",
    "AsyncConsumer",
    "AsyncProducer",
    "AsyncSubscriber",
    "BrokerError",
    "BrokerUnavailableError",
    "ConsumedMessage",
    "GroupBatch",
    "GroupConsumer",
    "LatencyFaultTolerance",
    "MessageQueue",
    "OutgoingMessage",
    "Producer",
    "PullConsumer",
    "PullPage",
    "QueueClient",
    "QueueOffsets",
    "RouteCache",
    "SendResult",
    "TopicRoute",
    "WharfClientError",
]
