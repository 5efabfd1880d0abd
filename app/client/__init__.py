"""Wharf's Python client: a route-aware producer, a long-polling pull consumer and topic administration (sync, httpx)."""

from app.client.admin import Admin
from app.client.consumer import ConsumedMessage, PullConsumer
from app.client.errors import BrokerError, WharfClientError
from app.client.fault import LatencyFaultTolerance
from app.client.producer import OutgoingMessage, Producer, SendResult
from app.client.routes import MessageQueue, RouteCache, TopicRoute

__all__ = [
    "Admin",
    "BrokerError",
    "ConsumedMessage",
    "LatencyFaultTolerance",
    "MessageQueue",
    "OutgoingMessage",
    "Producer",
    "PullConsumer",
    "RouteCache",
    "SendResult",
    "TopicRoute",
    "WharfClientError",
]
