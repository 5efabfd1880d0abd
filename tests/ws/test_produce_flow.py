"""A producer that does not read its results meets back-pressure, not a growing buffer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import orjson

from app.api.ws.produce import ProduceSession
from app.codec import IncomingMessage


class EndlessProducer:
    """A client that sends frames as fast as they are read and reads its results only when let."""

    def __init__(self) -> None:
        self.scope: dict[str, Any] = {"type": "websocket", "client": ("127.0.0.1", 50000)}
        self.frames_read = 0
        self.reading_results = asyncio.Event()
        self.results: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        self.frames_read += 1
        return {
            "type": "websocket.receive",
            "text": orjson.dumps({"id": self.frames_read, "body": "x"}).decode(),
        }

    async def send_text(self, text: str) -> None:
        await self.reading_results.wait()
        self.results.extend(orjson.loads(text)["results"])


class CountingBroker:
    def __init__(self, max_pending: int, max_bytes: int = 1024 * 1024) -> None:
        self.settings = SimpleNamespace(
            ws_produce_max_pending=max_pending,
            ws_max_queued_bytes=max_bytes,
            ws_send_timeout_s=60.0,
            ws_produce_max_frame_bytes=1024 * 1024,
        )
        self.batches: list[int] = []
        self.stored = 0

    async def produce(
        self, topic: str, batch: Sequence[IncomingMessage], born_host: bytes = b""
    ) -> list[dict[str, Any]]:
        self.batches.append(len(batch))
        first, self.stored = self.stored, self.stored + len(batch)
        return [{"status": "SEND_OK", "queue_offset": first + i} for i in range(len(batch))]


def assert_results_in_order(client: EndlessProducer, at_least: int) -> None:
    """Every result came, in frame order, each with the offset its message was stored at."""
    assert len(client.results) >= at_least
    assert [result["id"] for result in client.results] == list(range(1, len(client.results) + 1))
    assert [result["queue_offset"] for result in client.results] == list(range(len(client.results)))


async def settle() -> None:
    """Run every task that can run (the session never sleeps, so this ends)."""
    for _ in range(50):
        await asyncio.sleep(0)


def test_reading_stops_at_the_pending_limit_until_results_are_taken() -> None:
    async def scenario() -> None:
        client, broker = EndlessProducer(), CountingBroker(max_pending=5)
        session = ProduceSession(client, broker, "t")  # type: ignore[arg-type]
        task = asyncio.ensure_future(session.run())
        await settle()
        assert client.frames_read == 5  # the first batch's results cannot be delivered
        assert broker.batches == [5]
        client.reading_results.set()
        await settle()
        assert client.frames_read > 5
        # The held batch's results and at least one batch read after them reach the client.
        assert_results_in_order(client, at_least=6)
        assert max(broker.batches) <= 5
        task.cancel()

    asyncio.run(scenario())


def test_reading_stops_at_the_pending_bytes_limit_until_results_are_taken() -> None:
    async def scenario() -> None:
        client, broker = EndlessProducer(), CountingBroker(max_pending=1000, max_bytes=100)
        session = ProduceSession(client, broker, "t")  # type: ignore[arg-type]
        task = asyncio.ensure_future(session.run())
        await settle()
        frame_bytes = len(orjson.dumps({"id": 1, "body": "x"}))  # the ids 1-9 are one digit
        assert client.frames_read == -(-100 // frame_bytes)  # the frame that reaches 100 bytes is the last
        assert session.pending_bytes >= 100
        client.reading_results.set()
        await settle()
        assert client.frames_read > -(-100 // frame_bytes)
        assert_results_in_order(client, at_least=-(-100 // frame_bytes) + 1)
        task.cancel()

    asyncio.run(scenario())
