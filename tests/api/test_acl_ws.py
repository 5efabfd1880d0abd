"""Authentication and ACL over WebSocket: the Authorization header or a ``token`` query parameter;
a refusal is a close frame, 4401 or 4403, with the HTTP error code at the start of the reason."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.api.acl_setup import ADMIN, CONSUMER, PRODUCER, READ_WRITE, acl_broker, client_for
from tests.api.server import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = acl_broker(tmp_path_factory.mktemp("acl-ws"), log_level="info", access_log="true").start()
    with client_for(process, ADMIN) as admin:
        for name in ("orders", "audit"):
            assert admin.post("/v1/topics", json={"name": name, "queues": 2}).status_code == 201
    yield process
    process.stop()


def token(account: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(f"{account[0]}:{account[1]}".encode()).decode().rstrip("=")


def open_socket(
    broker: BrokerProcess, path: str, *, header: tuple[str, str] | None = None, **params: Any
) -> ClientConnection:
    url = broker.url.replace("http://", "ws://") + f"{path}?{urlencode(params)}"
    headers = None
    if header is not None:
        headers = {"Authorization": "Basic " + base64.b64encode(f"{header[0]}:{header[1]}".encode()).decode()}
    return connect(url, additional_headers=headers, open_timeout=10, close_timeout=5)


def close_frame(socket: ClientConnection) -> tuple[int, str]:
    try:
        while True:
            socket.recv(timeout=10)
    except ConnectionClosed as closed:
        assert closed.rcvd is not None, "dropped without a close frame"
        return closed.rcvd.code, closed.rcvd.reason


def first_frame(socket: ClientConnection) -> dict[str, Any]:
    frame: dict[str, Any] = orjson.loads(socket.recv(timeout=10))
    return frame


def assert_closed(socket: ClientConnection, code: int) -> str:
    with socket:
        found, reason = close_frame(socket)
    assert found == code, reason
    assert reason.startswith(f"{code - 4000}01 "), reason
    return reason


def test_subscribe_without_credentials_is_closed_4401(broker: BrokerProcess) -> None:
    assert_closed(open_socket(broker, "/v1/ws/subscribe", topic="orders"), 4401)
    assert_closed(open_socket(broker, "/v1/ws/subscribe", topic="orders", token="not base64!"), 4401)
    assert_closed(
        open_socket(broker, "/v1/ws/subscribe", topic="orders", token=token((CONSUMER[0], "wrong"))), 4401
    )


def test_subscribe_with_a_token_or_the_header(broker: BrokerProcess) -> None:
    with open_socket(
        broker, "/v1/ws/subscribe", topic="orders", group="billing", token=token(CONSUMER)
    ) as socket:
        assert first_frame(socket)["type"] == "assignment"
    with open_socket(broker, "/v1/ws/subscribe", topic="orders", header=CONSUMER) as socket:
        assert first_frame(socket)["type"] == "assignment"


def test_subscribe_needs_sub_on_the_topic_and_the_group(broker: BrokerProcess) -> None:
    assert_closed(open_socket(broker, "/v1/ws/subscribe", topic="orders", token=token(PRODUCER)), 4403)
    reason = assert_closed(
        open_socket(broker, "/v1/ws/subscribe", topic="orders", group="shipping", token=token(CONSUMER)), 4403
    )
    assert "shipping" in reason
    assert_closed(open_socket(broker, "/v1/ws/subscribe", topic="audit", token=token(READ_WRITE)), 4403)
    assert_closed(
        open_socket(broker, "/v1/ws/subscribe", topic="orders", group="blocked", token=token(READ_WRITE)),
        4403,
    )


def test_produce_needs_pub_and_a_refused_socket_stores_nothing(broker: BrokerProcess) -> None:
    with open_socket(broker, "/v1/ws/produce", topic="orders", token=token(PRODUCER)) as socket:
        socket.send(orjson.dumps({"id": "a", "body": "over a socket", "queue_id": 0}).decode())
        assert first_frame(socket)["results"][0]["status"] == "SEND_OK"
    with client_for(broker, ADMIN) as admin:
        before = admin.get("/v1/topics/orders/queues").json()
        assert_closed(open_socket(broker, "/v1/ws/produce", topic="orders", token=token(CONSUMER)), 4403)
        assert_closed(open_socket(broker, "/v1/ws/produce", topic="ws-made", token=token(READ_WRITE)), 4403)
        assert admin.get("/v1/topics/orders/queues").json() == before
        assert admin.get("/v1/topics/ws-made").status_code == 404


def test_the_token_is_cut_out_of_the_logged_query(broker: BrokerProcess) -> None:
    secret_token = token(READ_WRITE)
    with open_socket(broker, "/v1/ws/subscribe", topic="orders", token=secret_token) as socket:
        assert first_frame(socket)["type"] == "assignment"
    with httpx.Client(base_url=broker.url) as client:  # a request after the socket: its line is written
        client.get("/healthz")
    log = broker.log()
    assert "/v1/ws/subscribe?topic=orders" in log  # the server logs the socket's query...
    assert secret_token not in log and READ_WRITE[1] not in log  # ...without the token
