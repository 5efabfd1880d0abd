"""What a producer sends and what it gets back: the messages, and one result per message."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from wharf_client.routes import MessageQueue


@dataclass(slots=True)
class OutgoingMessage:
    body: bytes
    tags: str = ""
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    unique_id: str | None = None
    born_timestamp: int = 0  # milliseconds; 0: when the broker receives it
    # Delayed delivery (at most one): a level 1-18, a delay in ms, or an epoch time in ms.
    delay_level: int | None = None
    delay_ms: int | None = None
    deliver_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class SendResult:
    msg_id: str
    unique_id: str
    queue_id: int
    queue_offset: int | None  # None for a half message (a transaction's begin) or a delayed one
    status: str
    broker_name: str
    address: str
    transaction_id: str | None = None  # a begin's: commit or roll back with it


def send_results(response: httpx.Response, queue: MessageQueue) -> list[SendResult]:
    """The results of a produce the broker of ``queue`` answered."""
    return results_of(response.json()["results"], queue)


def results_of(results: list[dict[str, Any]], queue: MessageQueue) -> list[SendResult]:
    """:class:`SendResult` of each of a produce's result objects (HTTP or WebSocket)."""
    return [
        SendResult(
            result["msg_id"],
            result["unique_id"],
            result["queue_id"],
            result["queue_offset"],
            result["status"],
            queue.broker_name,
            queue.address,
            result.get("transaction_id"),
        )
        for result in results
    ]
