"""Reading a topic's event stream in tests: with httpx-sse, and raw Server-Sent Events parsing."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
from httpx_sse import ServerSentEvent, connect_sse

_names = itertools.count()


def new_topic(client: httpx.Client, name: str, queues: int = 4) -> str:
    topic = "".join(c if c.isalnum() or c in "-_" else "_" for c in f"{name[:60]}-{next(_names)}")
    response = client.post("/v1/topics", json={"name": topic, "queues": queues})
    assert response.status_code == 201, response.text
    return topic


def produce(client: httpx.Client, topic: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    response = client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def events(client: httpx.Client, topic: str, count: int, **params: Any) -> list[ServerSentEvent]:
    """The first ``count`` message events of a stream opened with ``params`` (pings skipped)."""
    headers = {}
    if "last_event_id_header" in params:
        headers["Last-Event-ID"] = params.pop("last_event_id_header")
    received = []
    with connect_sse(client, "GET", f"/v1/topics/{topic}/events", params=params, headers=headers) as source:
        assert source.response.status_code == 200, source.response.read()
        for event in source.iter_sse():
            if event.data:
                received.append(event)
                if len(received) == count:
                    break
    return received


def stream(client: httpx.Client, topic: str, **params: Any) -> Iterator[ServerSentEvent]:
    """Every event of a stream, the ``retry:`` one (no data) included."""
    with connect_sse(client, "GET", f"/v1/topics/{topic}/events", params=params) as source:
        assert source.response.status_code == 200, source.response.read()
        yield from source.iter_sse()


def message(event: ServerSentEvent) -> dict[str, Any]:
    decoded: dict[str, Any] = orjson.loads(event.data)
    return decoded


def positions(received: list[ServerSentEvent]) -> list[tuple[int, int]]:
    """(queue id, queue offset) of each event's message, in the order received."""
    return [(message(event)["queue_id"], message(event)["queue_offset"]) for event in received]


def parse_lines(lines: list[str]) -> list[dict[str, str]]:
    """Raw ``text/event-stream`` lines into events (field -> value); comments kept as ``comment``."""
    parsed: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in lines:
        if line == "":
            if current:
                parsed.append(current)
            current = {}
        elif line.startswith(":"):
            current["comment"] = line[1:].strip()
        else:
            field, _, value = line.partition(":")
            current[field] = value.removeprefix(" ")
    return parsed
