"""What one client may cost: request bodies, Content-Types, and connections (a real broker process)."""

from __future__ import annotations

import contextlib
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.api.errors import ErrorCode
from app.server import descriptor_budget
from tests.api.raw_http import connect, exchange, read_response, read_until_closed
from tests.api.server import BrokerProcess

ADMIN_LIMIT = 64 * 1024
PRODUCE_LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("edge") / "store",
        max_admin_request_bytes=ADMIN_LIMIT,
        max_request_bytes=PRODUCE_LIMIT,
    ).start()
    yield process
    process.stop()


def assert_error(response: httpx.Response, code: ErrorCode) -> None:
    assert response.status_code == code.http_status, response.text
    assert response.json()["error_code"] == int(code), response.text


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def chunks(total: int, size: int = 16 * 1024) -> Iterator[bytes]:
    while total > 0:
        yield b" " * min(size, total)
        total -= size


# Request bodies.


@pytest.mark.parametrize(
    ("method", "path", "limit"),
    [
        ("POST", "/v1/topics", ADMIN_LIMIT),
        ("PUT", "/v1/groups/g/offsets", ADMIN_LIMIT),
        ("POST", "/v1/topics/edge-body/messages", PRODUCE_LIMIT),
    ],
)
def test_a_body_over_its_limit_is_refused_413_with_content_length_or_chunked(
    client: httpx.Client, method: str, path: str, limit: int
) -> None:
    headers = {"content-type": "application/json"}
    # Content-Length: answered from the header.
    assert_error(
        client.request(method, path, content=b" " * (limit + 1), headers=headers), ErrorCode.REQUEST_TOO_LARGE
    )
    # Chunked: answered once the limit is crossed.
    answer = client.request(method, path, content=chunks(limit + 1), headers=headers)
    assert_error(answer, ErrorCode.REQUEST_TOO_LARGE)
    assert answer.headers["connection"] == "close"


def test_a_content_length_over_the_limit_is_answered_before_the_body_is_sent(broker: BrokerProcess) -> None:
    head = b"POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    answer = exchange(broker.port, head + b"Content-Length: 1000000000\r\n\r\n", timeout_s=10)
    assert answer.status == 413 and answer.envelope()["error_code"] == ErrorCode.REQUEST_TOO_LARGE


def test_a_route_that_takes_no_body_answers_and_closes_instead_of_reading_one(client: httpx.Client) -> None:
    assert_error(
        client.post("/v1/admin/clean", content=b" " * (ADMIN_LIMIT + 1)), ErrorCode.REQUEST_TOO_LARGE
    )
    answer = client.post("/v1/admin/clean", content=chunks(ADMIN_LIMIT + 1))
    assert answer.status_code == 200
    assert answer.headers["connection"] == "close"


def test_a_body_at_the_limit_is_read(client: httpx.Client) -> None:
    name = "edge-at-limit"
    document = b'{"name": "%s", "queues": 2}' % name.encode()
    padded = document + b" " * (ADMIN_LIMIT - len(document))
    answer = client.post(
        "/v1/topics", content=chunks_of(padded), headers={"content-type": "application/json"}
    )
    assert answer.status_code == 201, answer.text


def chunks_of(data: bytes, size: int = 8192) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_an_endless_chunked_body_gets_413_and_costs_the_broker_nothing(broker: BrokerProcess) -> None:
    """A chunked body that never ends: the 413 arrives, the connection is closed, RSS does not grow."""
    assert broker.process is not None
    before = rss_bytes(broker.process.pid)
    sent = 0
    stop = threading.Event()
    sock = connect(broker.port)

    def send_forever() -> None:
        nonlocal sent
        chunk = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
        try:
            sock.sendall(b"POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
            sock.sendall(b"Transfer-Encoding: chunked\r\n\r\n")
            while not stop.is_set() and sent < 256 * 1024 * 1024:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the broker closed the connection

    sender = threading.Thread(target=send_forever)
    sender.start()
    try:
        response = read_response(sock)
        assert response.status == 413
        assert response.envelope()["error_code"] == ErrorCode.REQUEST_TOO_LARGE
        read_until_closed(sock)
    finally:
        stop.set()
        sender.join(60)
        sock.close()
    assert sent < 64 * 1024 * 1024, f"the broker went on reading: {sent} bytes sent"
    assert rss_bytes(broker.process.pid) - before < 32 * 1024 * 1024
    assert httpx.get(f"{broker.url}/healthz").status_code == 200


# Content-Type.


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/json"],
)
def test_a_topic_is_created_only_from_application_json(
    client: httpx.Client, content_type: str | None
) -> None:
    name = f"edge-ct-{abs(hash(content_type))}"
    headers = {} if content_type is None else {"content-type": content_type}
    answer = client.post("/v1/topics", content=b'{"name": "%s"}' % name.encode(), headers=headers)
    assert_error(answer, ErrorCode.UNSUPPORTED_MEDIA_TYPE)
    assert client.get(f"/v1/topics/{name}").status_code == 404


def test_json_may_name_its_charset_but_only_utf8(client: httpx.Client) -> None:
    body = b'{"name": "edge-charset"}'
    assert_error(
        client.post(
            "/v1/topics", content=body, headers={"content-type": "application/json; charset=latin-1"}
        ),
        ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    )
    answer = client.post(
        "/v1/topics", content=body, headers={"content-type": "application/json; charset=UTF-8"}
    )
    assert answer.status_code == 201, answer.text


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
def test_a_produce_needs_a_content_type_it_takes(
    client: httpx.Client, topic: str, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    answer = client.post(f"/v1/topics/{topic}/messages", content=b'{"body": "forged"}', headers=headers)
    assert_error(answer, ErrorCode.UNSUPPORTED_MEDIA_TYPE)
    pulled = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0}).json()
    assert pulled["max_offset"] == 0


def test_offsets_are_committed_only_from_application_json(client: httpx.Client, topic: str) -> None:
    client.post(f"/v1/topics/{topic}/messages", json={"body": "x", "queue_id": 0}).raise_for_status()
    body = b'{"offsets": [{"topic": "%s", "queue_id": 0, "offset": 1}]}' % topic.encode()
    for headers in ({}, {"content-type": "text/plain"}):
        assert_error(
            client.put("/v1/groups/edge/offsets", content=body, headers=headers),
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        )
    assert client.get("/v1/groups/edge/offsets").status_code == 404
    answer = client.put("/v1/groups/edge/offsets", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text


def test_a_body_less_post_takes_no_form(client: httpx.Client) -> None:
    assert client.post("/v1/admin/clean").status_code == 200
    assert_error(
        client.post(
            "/v1/admin/clean", content=b"a=b", headers={"content-type": "application/x-www-form-urlencoded"}
        ),
        ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    )


# Connections.


def test_the_descriptor_budget_keeps_connections_clear_of_the_store() -> None:
    budget = descriptor_budget(1024, 65530)
    assert (budget.store_files, budget.reserve, budget.backlog, budget.connections) == (512, 64, 56, 392)
    assert budget.store_files + budget.reserve + budget.backlog + budget.connections == 1024
    assert descriptor_budget(1024, 65530, max_connections=100).connections == 100
    assert descriptor_budget(1024, 65530, max_connections=5000).connections == 392


def test_url_and_headers_over_their_limits_get_414_and_431(broker: BrokerProcess) -> None:
    long_url = exchange(broker.port, b"GET /healthz?q=" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert long_url.status == 414 and long_url.envelope()["error_code"] == ErrorCode.URI_TOO_LONG
    big = exchange(broker.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
    assert big.status == 431 and big.envelope()["error_code"] == ErrorCode.HEADERS_TOO_LARGE
    many = b"".join(b"X-%d: %d\r\n" % (i, i) for i in range(3000))
    too_many = exchange(broker.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
    assert too_many.status == 431


def test_a_header_value_that_never_ends_is_cut(broker: BrokerProcess) -> None:
    with connect(broker.port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        try:
            for _ in range(1000):  # 64 MB, unless the broker stops reading first
                sock.sendall(b"a" * 65536)
        except OSError:
            pass
        answer = read_response(sock)
    assert answer.status == 431


def test_a_websocket_handshake_with_a_long_url_is_refused_not_hung(broker: BrokerProcess) -> None:
    # Within WHARF_MAX_URL_BYTES (8,192), but the request line is over the websockets library's 8,192.
    url = b"/v1/ws/subscribe?topic="
    url += b"t" * (8180 - len(url))
    handshake = (
        b"GET " + url + b" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    answer = exchange(broker.port, handshake, timeout_s=10)
    assert answer.status == 414 and answer.envelope()["error_code"] == ErrorCode.URI_TOO_LONG


@pytest.mark.slow
def test_each_request_on_a_kept_connection_gets_the_whole_header_deadline(tmp_path: Path) -> None:
    """A connection answered once, then sending its next request's headers a byte at a time: that
    request is answered 408 at its own deadline, counted from when it began, not at the one armed
    for the connection's first request; a connection idle between requests is not cut by it."""
    timeout_s = 2.0
    broker = BrokerProcess(tmp_path / "store", header_timeout_s=timeout_s, keep_alive_timeout_s=120).start()
    try:
        idle = connect(broker.port)
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(idle).status == 200
        sock = connect(broker.port)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock).status == 200
        time.sleep(timeout_s * 0.75)  # the first request's deadline falls inside the next one's head
        began = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        sock.settimeout(0.2)
        answer = b""
        while not answer and time.monotonic() - began < timeout_s * 3:
            with contextlib.suppress(OSError):
                sock.sendall(b"X")
            with contextlib.suppress(TimeoutError):
                answer = sock.recv(65536)
        waited = time.monotonic() - began
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert timeout_s - 0.1 <= waited <= timeout_s + 1.5, waited
        # The idle connection, past both deadlines, still answers.
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(idle).status == 200
        idle.close()
        sock.close()
    finally:
        broker.stop()


def test_idle_and_slowloris_connections_do_not_starve_a_normal_request(tmp_path: Path) -> None:
    """500 idle keep-alive connections and 50 that send their headers a byte at a time: a normal
    request still answers at once, the slow ones are answered 408 and closed at the header
    deadline, and connections past the cap are answered 503."""
    broker = BrokerProcess(
        tmp_path / "store", header_timeout_s=4, keep_alive_timeout_s=120, max_connections=600
    ).start()
    sockets = []
    try:
        for _ in range(500):
            sock = connect(broker.port)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock).status == 200
            sockets.append(sock)
        slow = [connect(broker.port) for _ in range(50)]
        sockets += slow
        stop = threading.Event()

        def dribble() -> None:
            for sock in slow:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            while not stop.wait(0.2):
                for sock in slow:
                    with contextlib.suppress(OSError):
                        sock.sendall(b"X")

        dribbler = threading.Thread(target=dribble)
        dribbler.start()
        try:
            with httpx.Client(base_url=broker.url, timeout=30) as client:
                latencies = []
                for _ in range(7):
                    started = time.perf_counter()
                    assert client.post("/v1/topics/edge-load/messages", json={"body": "x"}).status_code == 200
                    latencies.append(time.perf_counter() - started)
                assert statistics.median(latencies) < 1.0, latencies

                extra = []
                statuses = []
                for _ in range(100):
                    sock = connect(broker.port)
                    extra.append(sock)
                    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    response = read_response(sock)
                    statuses.append(response.status)
                    if response.status != 200:
                        assert response.status == 503
                        assert response.envelope()["error_code"] == ErrorCode.TOO_MANY_CONNECTIONS
                sockets += extra
                assert 503 in statuses, statuses

                for sock in slow:
                    sock.settimeout(30)
                    answer = read_until_closed(sock)
                    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
                    assert b'"error_code":40801' in answer
        finally:
            stop.set()
            dribbler.join()
    finally:
        for sock in sockets:
            sock.close()
        broker.stop()


@pytest.mark.slow
def test_a_connection_flood_leaves_the_store_its_descriptors(tmp_path: Path) -> None:
    """Under 1,024 open files, 1,000 connections: those past the cap are answered 503 and closed,
    and a SYNC produce (group commit, an fdatasync through a descriptor of its own) goes on."""
    broker = BrokerProcess(
        tmp_path / "store",
        module="tests.api.low_nofile",
        flush_mode="SYNC",
        header_timeout_s=120,
        keep_alive_timeout_s=120,
        consumequeue_file_entries=10,
    ).start()
    flood = []
    try:
        with httpx.Client(base_url=broker.url, timeout=30) as client:
            client.post("/v1/topics", json={"name": "flood", "queues": 8}).raise_for_status()
            statuses = []
            for _ in range(1000):
                sock = connect(broker.port)
                flood.append(sock)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                statuses.append(read_response(sock).status)
            assert set(statuses) == {200, 503}
            assert statuses.count(200) < descriptor_budget(1024, 65530).connections  # the client holds one
            # Every produce rolls ConsumeQueue segments (10 entries each) and syncs under SYNC.
            for round_number in range(20):
                answer = client.post(
                    "/v1/topics/flood/messages",
                    json={"messages": [{"body": f"m{round_number}-{i}"} for i in range(40)]},
                )
                assert answer.status_code == 200, answer.text
                assert {result["status"] for result in answer.json()["results"]} == {"SEND_OK"}
        log = broker.log()
        assert "Too many open files" not in log and "EMFILE" not in log, log[-3000:]
    finally:
        for sock in flood:
            sock.close()
        broker.stop()


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the broker closes ``sock`` within ``seconds`` (the client sending nothing)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(65536) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


@pytest.mark.slow
def test_a_kept_connection_is_closed_once_idle_for_the_keep_alive_timeout_only(tmp_path: Path) -> None:
    """Requests on one connection for longer than the keep-alive timeout (produces the lane answers
    on the connection, and other routes): never cut while they come; once they stop, the connection
    is closed the timeout after the last answer, not before."""
    timeout_s = 1.0
    broker = BrokerProcess(tmp_path / "store", keep_alive_timeout_s=timeout_s).start()
    try:
        assert httpx.post(f"{broker.url}/v1/topics", json={"name": "kept", "queues": 1}).status_code == 201
        produce = (
            b"POST /v1/topics/kept/messages HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/octet-stream\r\nContent-Length: 1\r\n\r\nx"
        )
        health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        sock = connect(broker.port)
        began = time.monotonic()
        turn = 0
        while time.monotonic() - began < timeout_s * 3:
            sock.sendall(produce if turn % 2 == 0 else health)
            assert read_response(sock).status == 200, turn
            turn += 1
            time.sleep(timeout_s * 0.3)
        assert not closed_within(sock, timeout_s * 0.6)  # idle for 0.9 of the timeout by now
        assert closed_within(sock, timeout_s * 1.5)
        sock.close()
    finally:
        broker.stop()
