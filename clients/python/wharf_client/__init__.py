"""Wharf's Python client: a route-aware producer, a group consumer whose queues the brokers allocate,
a long-polling pull consumer of given queues, topic administration and reads of queues at given
offsets (sync, httpx); and their asyncio counterparts: a producer with several batches in flight,
a pull consumer, and a WebSocket subscriber. Consumed messages are :class:`Message` (in
:class:`ConsumedMessage`, with the queue they came from); the wire formats are in
:mod:`wharf_client.codec`. Runtime dependencies: httpx and websockets."""

from wharf_client.admin import Admin
from wharf_client.aio_consumer import AsyncConsumer
from wharf_client.aio_producer import AsyncProducer
from wharf_client.aio_subscriber import AsyncSubscriber
from wharf_client.codec import Message
from wharf_client.consumer import ConsumedMessage, PullConsumer
from wharf_client.errors import BrokerError, BrokerUnavailableError, WharfClientError
from wharf_client.fault import LatencyFaultTolerance
from wharf_client.group_consumer import GroupBatch, GroupConsumer
from wharf_client.producer import OutgoingMessage, Producer, SendResult
from wharf_client.queues import PullPage, QueueClient, QueueOffsets
from wharf_client.routes import MessageQueue, RouteCache, TopicRoute

__version__ = "0.1.0"

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
    "Message",
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
