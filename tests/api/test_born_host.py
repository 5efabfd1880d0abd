"""The producer's address is each record's born host (RocketMQ's BORNHOST), on every produce path:
JSON (the compiled path and the general one), the binary batch, a transaction's half message and a
WebSocket; from ``X-Forwarded-For`` when the peer is a trusted proxy (127.0.0.1 by default)."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import httpx
import websockets

from app.api.peers import born_host
from app.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch
from app.store import decode_record, parse_message_id
from app.store.record_format import NO_HOST, decode_host
from tests.api.server import BrokerProcess


def produce_raw(
    broker: BrokerProcess, topic: str, body: bytes, content_type: str, extra: str = "", query: str = ""
) -> tuple[dict[str, Any], int]:
    """POST from a socket of our own, so that its port is known; the answer's first result and
    that port."""
    with socket.create_connection(("127.0.0.1", broker.port)) as connection:
        port = connection.getsockname()[1]
        head = (
            f"POST /v1/topics/{topic}/messages{query} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n"
        )
        connection.sendall(head.encode() + body)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    status, _, rest = answer.partition(b"\r\n")
    assert b" 200 " in status, answer
    (result, *_) = json.loads(rest.partition(b"\r\n\r\n")[2])["results"]
    return result, port


def stored_born_host(store_dir: Path, msg_id: str) -> tuple[str, int]:
    _, _, offset = parse_message_id(msg_id)
    segments = sorted(path for path in (store_dir / "commitlog").iterdir() if path.name.isdigit())
    segment = next(path for path in reversed(segments) if int(path.name) <= offset)
    with segment.open("rb") as file:
        file.seek(offset - int(segment.name))
        data = file.read(64 * 1024)
    return decode_host(decode_record(data).born_host)


def make_topic(broker: BrokerProcess, name: str) -> str:
    response = httpx.post(f"{broker.url}/v1/topics", json={"name": name, "queues": 1})
    assert response.status_code == 201, response.text
    return name


def test_each_produce_path_stores_the_clients_address(broker: BrokerProcess) -> None:
    topic = make_topic(broker, "born-host")
    cases = [
        (b'{"messages": [{"body": "plain"}]}', "application/json"),  # the compiled path
        (b'{"messages": [{"body": "x", "properties": {"a": "b"}}]}', "application/json"),  # general
        (encode_batch([IncomingMessage(b"batched")]), BATCH_MEDIA_TYPE),
        (b"raw", "application/octet-stream"),
    ]
    for body, content_type in cases:
        result, port = produce_raw(broker, topic, body, content_type)
        assert stored_born_host(broker.store_dir, result["msg_id"]) == ("127.0.0.1", port), content_type


def test_a_half_message_stores_the_clients_address(broker: BrokerProcess) -> None:
    topic = make_topic(broker, "born-host-half")
    body = b'{"messages": [{"body": "half"}]}'
    query = "?transaction=begin&producer_group=pg"
    result, port = produce_raw(broker, topic, body, "application/json", query=query)
    assert "transaction_id" in result, result
    assert stored_born_host(broker.store_dir, result["msg_id"]) == ("127.0.0.1", port)


def test_a_trusted_proxy_names_the_client(broker: BrokerProcess) -> None:
    topic = make_topic(broker, "born-host-proxy")
    result, _ = produce_raw(
        broker,
        topic,
        b'{"messages": [{"body": "p"}]}',
        "application/json",
        "X-Forwarded-For: 203.0.113.9\r\n",
    )
    assert stored_born_host(broker.store_dir, result["msg_id"])[0] == "203.0.113.9"


def test_a_websocket_producer_is_the_born_host_of_what_it_sends(broker: BrokerProcess) -> None:
    topic = make_topic(broker, "born-host-ws")

    async def send() -> tuple[dict[str, Any], int]:
        url = f"ws://127.0.0.1:{broker.port}/v1/ws/produce?topic={topic}"
        async with websockets.connect(url) as connection:
            port = connection.local_address[1]
            await connection.send(json.dumps({"id": "m1", "body": "over a socket"}))
            (result,) = json.loads(await connection.recv())["results"]
            return result, port

    answer, port = asyncio.run(send())
    assert stored_born_host(broker.store_dir, answer["msg_id"]) == ("127.0.0.1", port), answer


def test_an_ipv4_mapped_client_is_its_ipv4_address_and_an_ipv6_one_is_not_written_yet() -> None:
    assert decode_host(born_host("::ffff:10.1.2.3", 5000)) == ("10.1.2.3", 5000)
    assert born_host("2001:db8::1", 5000) == NO_HOST
    assert born_host("not an address", 1) == NO_HOST
