"""CORS for listed origins, the WebSocket Origin check, and HTTPS/WSS, against real broker processes."""

from __future__ import annotations

import json
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from app.api.errors import ErrorCode
from tests.api.server import BrokerProcess

LISTED = "https://console.example.com"
UNLISTED = "https://evil.example.net"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("cors") / "store", cors_origins=f"{LISTED}, http://other.test"
    ).start()
    yield process
    process.stop()


def test_a_listed_origin_gets_cors_headers_for_preflight_and_simple_requests(client: httpx.Client) -> None:
    preflight = client.options(
        "/v1/topics",
        headers={
            "Origin": LISTED,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == LISTED
    assert "POST" in preflight.headers["access-control-allow-methods"]
    simple = client.get("/v1/topics", headers={"Origin": LISTED})
    assert simple.headers["access-control-allow-origin"] == LISTED
    assert "X-Wharf-Next-Offset" in simple.headers["access-control-expose-headers"]
    refused = client.post(
        "/v1/topics", content=b"x", headers={"Origin": LISTED, "content-type": "text/plain"}
    )
    assert refused.status_code == 415 and refused.headers["access-control-allow-origin"] == LISTED


def test_an_unlisted_origin_gets_no_cors_header(client: httpx.Client) -> None:
    preflight = client.options(
        "/v1/topics", headers={"Origin": UNLISTED, "Access-Control-Request-Method": "POST"}
    )
    assert preflight.status_code == 400
    assert "access-control-allow-origin" not in preflight.headers
    simple = client.get("/v1/topics", headers={"Origin": UNLISTED})
    assert simple.status_code == 200
    assert "access-control-allow-origin" not in simple.headers


def test_without_listed_origins_there_is_no_cors_at_all(tmp_path: Path) -> None:
    plain = BrokerProcess(tmp_path / "store").start()
    try:
        answer = httpx.get(f"{plain.url}/v1/topics", headers={"Origin": LISTED})
        assert "access-control-allow-origin" not in answer.headers
    finally:
        plain.stop()


def ws_url(broker: BrokerProcess, topic: str) -> str:
    return broker.url.replace("http", "ws", 1) + f"/v1/ws/subscribe?topic={topic}&from=first&credit=10"


@pytest.mark.parametrize("origin", [UNLISTED, "null", "http://127.0.0.1:1", "file://"])
def test_a_websocket_from_a_foreign_origin_is_refused_403(
    broker: BrokerProcess, topic: str, origin: str
) -> None:
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(ws_url(broker, topic), origin=origin, open_timeout=10)  # type: ignore[arg-type]
    response = refused.value.response
    assert response.status_code == 403
    assert json.loads(response.body)["error_code"] == ErrorCode.ORIGIN_NOT_ALLOWED


@pytest.mark.parametrize("origin", [None, LISTED, "own"])
def test_a_websocket_from_no_origin_a_listed_one_or_the_brokers_own_opens(
    broker: BrokerProcess, topic: str, origin: str | None
) -> None:
    if origin == "own":
        origin = broker.url
    with ws_connect(ws_url(broker, topic), origin=origin, open_timeout=10) as socket:  # type: ignore[arg-type]
        assert json.loads(socket.recv(timeout=10))["type"] == "assignment"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def test_https_produce_and_wss_subscribe(
    tmp_path: Path, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the readiness probe's httpx trusts it
    broker = BrokerProcess(tmp_path / "store", tls_certfile=cert, tls_keyfile=key)
    broker.url = broker.url.replace("http://", "https://")
    broker.start()
    trust = ssl.create_default_context(cafile=str(cert))
    try:
        with httpx.Client(base_url=broker.url, verify=trust, timeout=30) as client:
            client.post("/v1/topics", json={"name": "secure", "queues": 1}).raise_for_status()
            produced = client.post("/v1/topics/secure/messages", json={"body": "over tls"})
            assert produced.status_code == 200, produced.text
            msg_id = produced.json()["results"][0]["msg_id"]
            route = client.get("/v1/topics/secure/route").json()
            assert "https://" in json.dumps(route)  # the advertised URL follows the scheme
        with pytest.raises(httpx.TransportError):
            httpx.get(broker.url.replace("https://", "http://") + "/healthz", timeout=5)
        url = broker.url.replace("https://", "wss://") + "/v1/ws/subscribe?topic=secure&from=first&credit=10"
        with ws_connect(url, ssl=trust, open_timeout=10) as socket:
            assert json.loads(socket.recv(timeout=10))["type"] == "assignment"
            frame = json.loads(socket.recv(timeout=10))
            assert frame["type"] == "messages"
            assert [(m["msg_id"], m["body"]) for m in frame["messages"]] == [(msg_id, "over tls")]
    finally:
        broker.stop()
