"""Reading delivered messages over HTTP, and what a delayed message's lateness is."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest


def now_ms() -> int:
    return int(time.time() * 1000)


def read_queue(
    client: httpx.Client, topic: str, queue_id: int, count: int, timeout_s: float = 30.0
) -> list[Any]:
    """Pull a queue from offset 0 until it holds ``count`` messages (long polling: a delivery wakes
    the pull); fail the test when ``timeout_s`` passes first."""
    messages: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(messages) < count:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            pytest.fail(f"{topic}/{queue_id} holds {len(messages)} of {count} messages after {timeout_s} s")
        answer = client.get(
            f"/v1/topics/{topic}/queues/{queue_id}/messages",
            params={"offset": len(messages), "max_wait_ms": min(left_ms, 5_000)},
        )
        assert answer.status_code == 200, answer.text
        messages.extend(answer.json()["messages"])
    return messages


def lateness_ms(message: dict[str, Any]) -> int:
    """How long after its time a delivered message was stored in its topic (never negative)."""
    return int(message["store_timestamp"]) - int(message["properties"]["TIMER_OUT_MS"])
