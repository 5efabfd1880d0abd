"""The produce the lane answers at once, on the connection (``LaneCycle.run_now``): the broker's
own HTTP protocol in this process, each connection's transport recording what the broker writes,
so that the order of two connections' answers is seen exactly, not through sockets."""

from __future__ import annotations

import asyncio
import gc
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop

from app.api.app import create_app
from app.api.fast_lane import MAX_MEDIA_TYPES
from app.broker.topic_admin import create_topic
from app.routing.topic_config import TopicConfig
from app.settings import Settings
from app.store import kernel
from tests.api.in_process import Transport, connector

TOPIC = "now"
# Without the compiled kernel every produce takes the general path, through the lane's task.
AT_ONCE = kernel.compiled is not None


def request(method: str, target: str, content_type: str = "", body: bytes = b"") -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nhost: test\r\n"
    if method == "POST":
        head += f"content-type: {content_type}\r\ncontent-length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


Scenario = Callable[[Any, Callable[[str], Any], list[tuple[str, bytes]]], Awaitable[None]]


def run(tmp_path: Path, scenario: Scenario, **settings: Any) -> None:
    """Run ``scenario(app, connect, log)`` against the app on the broker's protocol, in this
    process; ``connect(name)`` opens a connection (its ``data_received`` takes request bytes)."""

    async def main() -> None:
        app_settings = Settings(store_dir=tmp_path / "store", **settings)
        app = create_app(app_settings)
        log: list[tuple[str, bytes]] = []
        async with app.router.lifespan_context(app):
            await create_topic(app.state.broker, TopicConfig(TOPIC, 1, 1))
            open_connection = connector(app, app_settings)

            def connect(name: str) -> Any:
                return open_connection(Transport(lambda data: log.append((name, data))))

            await scenario(app, connect, log)

    uvloop.run(main())


async def answered(log: list[tuple[str, bytes]], names: set[str], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not names <= {name for name, _ in log}:
            await asyncio.sleep(0.001)


async def until_written(
    log: list[tuple[str, bytes]], name: str, text: bytes, timeout_s: float = 10.0
) -> None:
    """Until what the broker wrote to connection ``name`` holds ``text``."""
    async with asyncio.timeout(timeout_s):
        while text not in b"".join(data for written, data in log if written == name):
            await asyncio.sleep(0.001)


def status_of(data: bytes) -> int:
    match = re.match(rb"HTTP/1.1 (\d{3}) ", data)
    assert match is not None, data[:200]
    return int(match.group(1))


def test_a_pull_the_produce_woke_is_answered_before_the_producer(tmp_path: Path) -> None:
    """Both answers are written in the loop turns the produce starts, the woken pull's first (the
    latency a consumer sees is the producer's round trip, not one more turn)."""

    async def scenario(app: Any, connect: Callable[[str], Any], log: list[tuple[str, bytes]]) -> None:
        durations = app.state.http_durations
        answers_now = durations.lane_answered_now
        for round_ in range(3):
            log.clear()
            consumer = connect("consumer")
            consumer.data_received(
                request("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset={round_}&max_wait_ms=5000")
            )
            await asyncio.sleep(0.05)  # held: nothing to read yet
            assert log == []
            producer = connect("producer")
            producer.data_received(
                request("POST", f"/v1/topics/{TOPIC}/messages", "application/octet-stream", b"hello")
            )
            await answered(log, {"consumer", "producer"})
            assert [name for name, _ in log] == ["consumer", "producer"], [(n, d[:120]) for n, d in log]
            assert {status_of(data) for _, data in log} == {200}
            assert b'"body":"hello"' in log[0][1]
        # Answered at once, not through the lane's task (which must keep the order too).
        assert durations.lane_answered_now == answers_now + (3 if AT_ONCE else 0)

    run(tmp_path, scenario)


def test_only_plain_produces_acknowledged_at_once_are_answered_at_once(tmp_path: Path) -> None:
    """What the app must answer (a refusal, a transaction, the binary batch, a message the general
    path takes) goes through the lane's task as before, with the app's answer."""
    json = "application/json"
    cases = [
        (json, b'{"messages": [{"body": "a"}, {"body": "b", "tags": "t", "keys": ["k"]}]}', 200, True),
        ("application/x-ndjson", b'{"body": "a"}\n{"body": "b"}\n', 200, True),
        ("application/octet-stream", b"raw", 200, True),
        (json, b"{not json", 400, False),
        (json, b'{"body": "x", "queue_id": 9}', 400, False),
        (json, b'{"body": "x", "properties": {"p": "v"}}', 200, False),  # the general path's
        ("application/vnd.wharf.batch", b"WHB1 broken", 400, False),
    ]

    async def scenario(app: Any, connect: Callable[[str], Any], log: list[tuple[str, bytes]]) -> None:
        durations = app.state.http_durations
        for number, (content_type, body, status, at_once) in enumerate(cases):
            before = durations.lane_answered_now
            connect(f"p{number}").data_received(
                request("POST", f"/v1/topics/{TOPIC}/messages", content_type, body)
            )
            await answered(log, {f"p{number}"})
            assert status_of(log[-1][1]) == status, (body, log[-1][1][-300:])
            assert durations.lane_answered_now - before == (1 if at_once and AT_ONCE else 0), body
        target = f"/v1/topics/{TOPIC}/messages?transaction=begin&producer_group=g"
        connect("half").data_received(request("POST", target, json, b'{"body": "half"}'))
        await answered(log, {"half"})
        assert status_of(log[-1][1]) == 200
        assert durations.lane_answered_now == (3 if AT_ONCE else 0)

    run(tmp_path, scenario)


def test_a_produce_that_waits_for_its_flush_is_not_answered_at_once(tmp_path: Path) -> None:
    async def scenario(app: Any, connect: Callable[[str], Any], log: list[tuple[str, bytes]]) -> None:
        connect("p").data_received(
            request("POST", f"/v1/topics/{TOPIC}/messages", "application/octet-stream", b"x")
        )
        await answered(log, {"p"})
        assert status_of(log[-1][1]) == 200
        assert app.state.http_durations.lane_answered_now == 0
        assert app.state.http_durations.lane_cycle_requests == 1

    run(tmp_path, scenario, flush_mode="SYNC")


def test_a_served_request_leaves_nothing_for_the_garbage_collector(tmp_path: Path) -> None:
    """Every request's objects (its cycle, scope, headers) are freed when it is answered, not left
    in reference cycles: the collector, which they would make run every few hundred requests over
    all of them, finds nothing of them."""

    async def scenario(app: Any, connect: Callable[[str], Any], log: list[tuple[str, bytes]]) -> None:
        producer, consumer = connect("producer"), connect("consumer")
        produce = request("POST", f"/v1/topics/{TOPIC}/messages", "application/octet-stream", b"x")
        pull = request("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&max_messages=1")
        for _ in range(10):  # warm: what the first requests make once stays
            producer.data_received(produce)
            consumer.data_received(pull)
            await answered(log, {"producer", "consumer"})
            log.clear()
        gc.collect()
        gc.disable()
        try:
            for _ in range(200):
                producer.data_received(produce)
                consumer.data_received(pull)
                await answered(log, {"producer", "consumer"})
                log.clear()
            found = gc.collect()
        finally:
            gc.enable()
        assert found < 200, f"{found} objects in reference cycles after 400 requests"

    run(tmp_path, scenario)


def test_the_media_types_the_lane_keeps_are_bounded(tmp_path: Path) -> None:
    """A client sending a new Content-Type on every request does not grow what the lane keeps of
    them past MAX_MEDIA_TYPES, and every one is still answered."""

    async def scenario(app: Any, connect: Callable[[str], Any], log: list[tuple[str, bytes]]) -> None:
        producer = connect("p")
        for number in range(MAX_MEDIA_TYPES + 50):
            log.clear()
            content_type = f"application/json; variant={number}"
            producer.data_received(
                request("POST", f"/v1/topics/{TOPIC}/messages", content_type, b'{"body": "x"}')
            )
            await answered(log, {"p"})
            assert status_of(log[-1][1]) == 200
            assert len(app.fast_lane._media_types) <= MAX_MEDIA_TYPES

    run(tmp_path, scenario)


def test_a_produce_expecting_100_continue_is_told_to_go_on_then_stored(tmp_path: Path) -> None:
    """The edge protocol writes uvicorn's head callbacks out: ``Expect: 100-continue`` (the lane
    leaves it to uvicorn's cycle) still gets its interim answer before the body is sent, and the
    header names still reach the app lowercased."""

    async def scenario(app: Any, connect: Callable[[str], Any], log: list[tuple[str, bytes]]) -> None:
        body = b'{"body": "go on"}'
        head = (
            f"POST /v1/topics/{TOPIC}/messages HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-Continue\r\n\r\n"
        )
        producer = connect("producer")
        producer.data_received(head.encode())
        await answered(log, {"producer"})
        assert log == [("producer", b"HTTP/1.1 100 Continue\r\n\r\n")]
        producer.data_received(body)
        await until_written(log, "producer", b'"status":"SEND_OK"')
        assert status_of(log[1][1]) == 200, log[1][1][:300]
        connect("consumer").data_received(request("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=0"))
        await until_written(log, "consumer", b'"body":"go on"')

    run(tmp_path, scenario)
