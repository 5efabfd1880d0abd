"""The fast lane answers exactly what the whole app answers: the same requests sent to a broker
with it and to one without it (``WHARF_FAST_LANE=false``) get the same status, headers and body
(but for what differs by nature: dates, the store host in message ids, timestamps), and the lane
takes every request of the shapes it serves and none of the others."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.codec import BATCH_MEDIA_TYPE, RECORDS_MEDIA_TYPE, IncomingMessage, encode_batch
from tests.api import raw_http
from tests.api.acl_setup import ADMIN, CONSUMER, PRODUCER, acl_broker, client_for
from tests.api.server import BrokerProcess

# Method, path and query, headers, body (in parts: sent chunked).
Request = tuple[str, str, dict[str, str], bytes | list[bytes]]

JSON = {"content-type": "application/json"}
TOPIC = "lane"
OTHER = "lane-two-queues"


def batch(*bodies: str) -> bytes:
    return orjson.dumps(
        {"messages": [{"body": body, "tags": "TagA", "keys": ["k1"], "queue_id": 0} for body in bodies]}
    )


# Requests the lane serves, in order (each sees what the ones before it stored).
SERVED: list[Request] = [
    ("POST", f"/v1/topics/{TOPIC}/messages", JSON, batch("one", "two")),
    (
        "POST",
        f"/v1/topics/{TOPIC}/messages",
        {"content-type": "application/json; charset=UTF-8"},
        b'{"body": "three", "queue_id": 0, "tags": "TagB"}',
    ),
    (
        "POST",
        f"/v1/topics/{TOPIC}/messages",
        {"content-type": BATCH_MEDIA_TYPE},
        encode_batch([IncomingMessage(b"\x00\xff four", queue_id=0)]),
    ),
    (
        "POST",
        f"/v1/topics/{OTHER}/messages",
        JSON,
        b'{"body": "keyed", "sharding_key": "order-7", "unique_id": "u-1"}',
    ),
    (
        "POST",
        f"/v1/topics/{OTHER}/messages",
        JSON,
        b'{"body": "again", "sharding_key": "order-7", "unique_id": "u-1"}',
    ),
    # Refused by the broker, answered through the app's handlers.
    ("POST", f"/v1/topics/{TOPIC}/messages", JSON, b'{"body": "x", "queue_id": 9}'),
    ("POST", f"/v1/topics/{TOPIC}/messages", JSON, b'{"messages": []}'),
    ("POST", f"/v1/topics/{TOPIC}/messages", JSON, b'{"body": "x", "nonsense": 1}'),
    ("POST", f"/v1/topics/{TOPIC}/messages", JSON, b"{not json"),
    ("POST", f"/v1/topics/{TOPIC}/messages", JSON, b'{"body": "x", "properties": {"a": ""}}'),
    ("POST", "/v1/topics/bad%20name/messages", JSON, b'{"body": "x"}'),
    ("POST", f"/v1/topics/{'t' * 255}/messages", JSON, b'{"body": "x"}'),
    ("POST", f"/v1/topics/{TOPIC}/messages", {"content-type": BATCH_MEDIA_TYPE}, b"WHB1 broken"),
    # CloudEvents in structured and batched modes (app.cloudevents).
    (
        "POST",
        f"/v1/topics/{OTHER}/messages",
        {"content-type": "application/cloudevents+json"},
        b'{"specversion": "1.0", "id": "e-1", "source": "/lane", "type": "t.a", "subject": "s", "data": {"n": 1}}',
    ),
    (
        "POST",
        f"/v1/topics/{OTHER}/messages?tags=T",
        {"content-type": "application/cloudevents-batch+json"},
        b'[{"specversion": "1.0", "id": "e-2", "source": "/lane", "type": "t.b", "data_base64": "AAE="}]',
    ),
    (
        "POST",
        f"/v1/topics/{OTHER}/messages",
        {"content-type": "application/cloudevents+json"},
        b'{"specversion": "1.0", "id": "e-3", "type": "t.a"}',
    ),
    # Every body type produce takes, and the query parameters a raw body's fields come from.
    (
        "POST",
        f"/v1/topics/{TOPIC}/messages?tags=T&keys=a%20b&queue_id=0&property=src:curl",
        {"content-type": "application/octet-stream"},
        b"raw",
    ),
    (
        "POST",
        f"/v1/topics/{TOPIC}/messages?queue_id=0&delay_level=99",
        {"content-type": "application/octet-stream"},
        b"raw",
    ),
    (
        "POST",
        f"/v1/topics/{TOPIC}/messages",
        {"content-type": "application/x-ndjson"},
        b'{"body": "nd", "queue_id": 0}\n{"body": "nd2", "queue_id": 0}\n',
    ),
    (
        "POST",
        f"/v1/topics/{TOPIC}/messages?transaction=begin&producer_group=pg",
        JSON,
        b'{"body": "half", "queue_id": 0}',
    ),
    ("POST", f"/v1/topics/{TOPIC}/messages?transaction=later", JSON, b'{"body": "half", "queue_id": 0}'),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=0", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=1&max_messages=2", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&tags=TagB", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&tags=TagA%20%7C%7C%20TagB", {}, b""),
    (
        "GET",
        f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&max_messages=3",
        {"accept": RECORDS_MEDIA_TYPE},
        b"",
    ),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&group=billing", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?group=billing", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=99&max_wait_ms=30", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&max_messages=20000", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/7/messages?offset=0", {}, b""),
    ("GET", "/v1/topics/nowhere/queues/0/messages?offset=0", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&tags=%7C%7C", {}, b""),
]

# Requests the lane leaves to the app: a shape it does not take.
LEFT: list[Request] = [
    ("POST", f"/v1/topics/{TOPIC}/messages", JSON, [b'{"body": ', b'"chunked", "queue_id": 0}']),
    (
        "POST",
        f"/v1/topics/{TOPIC}/messages",
        {"content-type": "application/json; charset=latin-1"},
        b'{"body": "x"}',
    ),
    ("POST", f"/v1/topics/{TOPIC}/messages", {"content-type": "text/plain"}, b'{"body": "x"}'),
    ("POST", f"/v1/topics/{TOPIC}/messages", {}, b'{"body": "x"}'),
    # A CloudEvent in binary mode: its Content-Type is its data's (app.cloudevents).
    (
        "POST",
        f"/v1/topics/{TOPIC}/messages",
        {
            "content-type": "application/json",
            "ce-specversion": "1.0",
            "ce-id": "b-1",
            "ce-source": "/l",
            "ce-type": "t",
        },
        b'{"n": 2}',
    ),
    (
        "POST",
        f"/v1/topics/{TOPIC}/messages",
        {"content-type": "text/plain", "ce-specversion": "1.0", "ce-id": "b-2", "ce-type": "t"},
        b"no source",
    ),
    ("POST", f"/v1/topics/{'t' * 256}/messages", JSON, b'{"body": "x"}'),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=-1", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?max_messages=0", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=abc", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&offset=1", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&from=first", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&filter_type=sql92&filter=a%3D1", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/0/messages?group=", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/70000/messages", {}, b""),
    ("GET", f"/v1/topics/{TOPIC}/queues/x/messages", {}, b""),
    ("PUT", f"/v1/topics/{TOPIC}/messages", JSON, b"{}"),
    ("GET", f"/v1/topics/{TOPIC}", {}, b""),
]

# What differs between two brokers by nature: message and transaction ids hold the store host's port.
_VARYING = {"msg_id", "transaction_id", "born_timestamp", "store_timestamp", "suspended_until_ms"}


# A unique id the broker made holds its address and start time.
_MADE_ID = re.compile(r"[0-9A-F]{32}")


def normalized(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: "*"
            if key in _VARYING or (key == "unique_id" and _MADE_ID.fullmatch(item))
            else normalized(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [normalized(item) for item in value]
    return value


def _records_normalized(body: bytes) -> bytes:
    # A record's timestamps, hosts (the producer's port) and a unique id the broker made differ
    # between the brokers.
    out, position = bytearray(body), 0
    while position < len(out):
        size = int.from_bytes(out[position : position + 4], "big")
        out[position + 40 : position + 72] = bytes(32)
        position += size
    return re.sub(rb"UNIQ_KEY\x01[0-9A-F]{32}", b"UNIQ_KEY\x01" + b"*" * 32, bytes(out))


def answer_of(response: httpx.Response) -> tuple[int, list[tuple[str, str]], Any]:
    headers = [
        (name, value) for name, value in response.headers.multi_items() if name not in ("date", "server")
    ]
    if response.headers.get("content-type") == "application/json":
        body: Any = normalized(orjson.loads(response.content))
    elif response.headers.get("content-type") == RECORDS_MEDIA_TYPE:
        body = _records_normalized(response.content)
    else:
        body = response.content
    if isinstance(body, dict) and "message" in body:  # an error names a message id or port rarely
        body["message"] = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:*", body["message"])
    if isinstance(body, (dict, list)):
        headers = [(name, "*" if name == "content-length" else value) for name, value in headers]
    return response.status_code, headers, body


def sent(body: bytes | list[bytes]) -> bytes | Iterator[bytes]:
    return iter(body) if isinstance(body, list) else body


def lane_requests(client: httpx.Client, counter: str = "wharf_http_fast_lane_requests_total") -> int:
    text = client.get("/metrics").text
    (value,) = re.findall(rf"^{counter} (\S+)$", text, re.M)
    return int(float(value))


def connection_requests(client: httpx.Client) -> int:
    """The lane's requests served on the connection, below uvicorn's request cycle."""
    return lane_requests(client, "wharf_http_fast_lane_connection_requests_total")


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    root = tmp_path_factory.mktemp("lane")
    fast = BrokerProcess(root / "fast", hold_check_interval_ms=60000).start()
    whole = BrokerProcess(root / "whole", hold_check_interval_ms=60000, fast_lane="false").start()
    try:
        with (
            httpx.Client(base_url=fast.url, timeout=30) as a,
            httpx.Client(base_url=whole.url, timeout=30) as b,
        ):
            for client in (a, b):
                for name, queues in ((TOPIC, 1), (OTHER, 2)):
                    assert client.post("/v1/topics", json={"name": name, "queues": queues}).status_code == 201
            yield a, b
    finally:
        fast.stop()
        whole.stop()


def test_the_lane_answers_what_the_app_answers_and_serves_only_its_shapes(
    brokers: tuple[httpx.Client, httpx.Client],
) -> None:
    fast, whole = brokers
    # Twice: what the lane learns of a request's headers the first time (its Content-Type's media
    # type) must not change how it answers the next.
    for served, requests in ((True, SERVED), (False, LEFT)) * 2:
        for method, target, headers, body in requests:
            before, on_connection = lane_requests(fast), connection_requests(fast)
            mine = answer_of(fast.request(method, target, headers=headers, content=sent(body)))
            theirs = answer_of(whole.request(method, target, headers=headers, content=sent(body)))
            assert mine == theirs, (method, target)
            assert lane_requests(fast) - before == (1 if served else 0), (method, target)
            # Served on the connection, but for a path with escapes (uvicorn decodes those).
            expected = 1 if served and "%" not in target.split("?")[0] else 0
            assert connection_requests(fast) - on_connection == expected, (method, target)
    assert lane_requests(whole) == 0


def test_requests_the_lane_answers_are_timed_under_their_route(
    brokers: tuple[httpx.Client, httpx.Client],
) -> None:
    fast, _ = brokers
    fast.get(f"/v1/topics/{TOPIC}/queues/0/messages?offset=0")
    fast.post("/v1/topics/nowhere-else/messages", headers=JSON, content=b'{"body": "x", "queue_id": 3}')
    text = fast.get("/metrics").text
    pulls = r'wharf_http_request_duration_seconds_count\{method="GET",route="/v1/topics/\{topic\}/queues/\{queue_id\}/messages",status="200"\} (\S+)'
    assert float(re.findall(pulls, text)[0]) >= 1
    assert (
        'route="/v1/topics/{topic}/messages",status="400"' in text
        or 'route="/v1/topics/{topic}/messages",status="404"' in text
    )


@pytest.fixture(scope="module")
def acl_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    root = tmp_path_factory.mktemp("lane-acl")
    (root / "fast").mkdir()
    (root / "whole").mkdir()
    fast = acl_broker(root / "fast").start()
    whole = acl_broker(root / "whole", fast_lane="false").start()
    try:
        for broker in (fast, whole):
            with client_for(broker, ADMIN) as admin:
                assert admin.post("/v1/topics", json={"name": "orders", "queues": 1}).status_code == 201
                assert admin.post("/v1/topics", json={"name": "audit", "queues": 1}).status_code == 201
        yield fast, whole
    finally:
        fast.stop()
        whole.stop()


def test_behind_the_acl_the_lane_answers_and_refuses_as_the_app_does(
    acl_brokers: tuple[BrokerProcess, BrokerProcess],
) -> None:
    fast, whole = acl_brokers
    produce = ("POST", "/v1/topics/{}/messages", JSON, b'{"body": "x", "queue_id": 0}')
    pull = ("GET", "/v1/topics/{}/queues/0/messages?offset=0", {}, b"")
    cases = [
        (PRODUCER, produce, "orders"),  # allowed
        (PRODUCER, produce, "audit"),  # 403
        (CONSUMER, pull, "orders"),  # allowed
        (CONSUMER, pull, "audit"),  # 403
        (PRODUCER, pull, "orders"),  # 403: PUB only
        (None, produce, "orders"),  # 401
        (("producer-ak", "wrong-secret-000"), produce, "orders"),  # 401
        (ADMIN, pull, "orders"),
    ]
    with client_for(fast, ADMIN) as fast_admin:
        for account, (method, target, headers, body), topic in cases:
            before = lane_requests(fast_admin)
            with client_for(fast, account) as mine, client_for(whole, account) as theirs:
                answers = [
                    answer_of(client.request(method, target.format(topic), headers=headers, content=body))
                    for client in (mine, theirs)
                ]
            assert answers[0] == answers[1], (account, method, topic)
            assert lane_requests(fast_admin) - before == 1, (account, method, topic)
    statuses = [status for status, _, _ in answers]
    assert statuses == [200, 200]


def test_with_cors_configured_a_request_with_an_origin_goes_through_the_app(tmp_path: Path) -> None:
    origin = "https://console.example.com"
    fast = BrokerProcess(tmp_path / "fast", cors_origins=origin).start()
    whole = BrokerProcess(tmp_path / "whole", cors_origins=origin, fast_lane="false").start()
    try:
        with httpx.Client(base_url=fast.url) as mine, httpx.Client(base_url=whole.url) as theirs:
            for client in (mine, theirs):
                assert client.post("/v1/topics", json={"name": TOPIC, "queues": 1}).status_code == 201
            for headers, served in (
                ({"origin": origin}, 0),
                ({"origin": "https://elsewhere.example"}, 0),
                ({}, 1),
            ):
                before = lane_requests(mine)
                target = f"/v1/topics/{TOPIC}/queues/0/messages?offset=0"
                assert answer_of(mine.get(target, headers=headers)) == answer_of(
                    theirs.get(target, headers=headers)
                )
                assert lane_requests(mine) - before == served, headers
            (allowed,) = [mine.get(target, headers={"origin": origin})]
            assert allowed.headers["access-control-allow-origin"] == origin
    finally:
        fast.stop()
        whole.stop()


# -- on the connection: what uvicorn's request cycle did, the lane's cycle does ----------------------


def produce_request(body: bytes, extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    return (
        b"POST /v1/topics/%s/messages?queue_id=0 HTTP/%s\r\nhost: 127.0.0.1\r\n"
        b"content-type: application/octet-stream\r\ncontent-length: %d\r\n%s\r\n%s"
        % (TOPIC.encode(), version, len(body), extra, body)
    )


def read_responses(sock: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """``count`` responses, each read to its Content-Length, from answers that may arrive together."""
    data, answers = b"", []
    while len(answers) < count:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"closed after {len(answers)} answers"
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {
            name.strip().lower(): value.strip() for name, _, value in (x.partition(":") for x in lines)
        }
        length = int(headers["content-length"])
        while len(data) < length:
            chunk = sock.recv(65536)
            assert chunk, "closed in a body"
            data += chunk
        answers.append((int(status_line.split()[1]), headers, data[:length]))
        data = data[length:]
    return answers


def port_of(client: httpx.Client) -> int:
    port = client.base_url.port
    assert port is not None
    return port


def test_pipelined_requests_are_answered_in_order_whoever_serves_them(
    brokers: tuple[httpx.Client, httpx.Client],
) -> None:
    fast, _ = brokers
    on_connection = connection_requests(fast)
    first = fast.get(f"/v1/topics/{TOPIC}/queues/0/messages?offset=0&max_messages=1").json()
    # Two produces around a request the app serves, sent at once: the lane takes the first; the
    # others wait their turn behind it as behind any answer, and every answer comes in order.
    requests = [
        produce_request(b"pipelined-1"),
        f"GET /v1/topics/{TOPIC} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode(),
        produce_request(b"pipelined-2"),
    ]
    with raw_http.connect(port_of(fast)) as sock:
        sock.sendall(b"".join(requests))
        answers = read_responses(sock, 3)
        # The connection stays open for the next request, which the lane takes again.
        sock.sendall(produce_request(b"pipelined-3"))
        (last,) = read_responses(sock, 1)
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert orjson.loads(answers[1][2])["name"] == TOPIC
    offsets = [
        orjson.loads(body)["results"][0]["queue_offset"] for _, _, body in (answers[0], answers[2], last)
    ]
    assert offsets == sorted(offsets) and len(set(offsets)) == 3, offsets
    stored = fast.get(f"/v1/topics/{TOPIC}/queues/0/messages?offset={offsets[0]}&max_messages=3").json()
    assert [message["body"] for message in stored["messages"]] == [
        "pipelined-1",
        "pipelined-2",
        "pipelined-3",
    ]
    assert first["status"] == "FOUND"
    assert connection_requests(fast) - on_connection >= 3  # the first, the last, and the pulls


def test_http_1_0_forwarded_and_bodied_pulls_go_through_the_app_and_close_asks_are_kept(
    brokers: tuple[httpx.Client, httpx.Client],
) -> None:
    fast, _ = brokers
    port = port_of(fast)
    cases = [
        # (request, served on the connection, answer closes the connection)
        (produce_request(b"ten", version=b"1.0"), False, True),
        (produce_request(b"forwarded", extra=b"x-forwarded-for: 10.1.2.3\r\n"), False, False),
        (produce_request(b"closing", extra=b"connection: close\r\n"), True, True),
    ]
    for request, on_connection, closes in cases:
        before, lane_before = connection_requests(fast), lane_requests(fast)
        with raw_http.connect(port) as sock:
            sock.sendall(request)
            ((status, headers, body),) = read_responses(sock, 1)
            assert status == 200, body
            assert orjson.loads(body)["results"][0]["status"] == "SEND_OK"
            if closes:
                assert headers.get("connection") == "close", headers
                assert raw_http.read_until_closed(sock) == b""
            else:
                assert "connection" not in headers, headers
        assert connection_requests(fast) - before == (1 if on_connection else 0), request
        assert lane_requests(fast) - lane_before == 1, request
    # A pull with a body (kept whole on the connection, it could be any size): the app's way.
    pull = f"GET /v1/topics/{TOPIC}/queues/0/messages?offset=0 HTTP/1.1\r\nhost: x\r\n".encode()
    for body_headers in (
        b"content-length: 5\r\n\r\nhello",
        b"transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    ):
        before, lane_before = connection_requests(fast), lane_requests(fast)
        with raw_http.connect(port) as sock:
            sock.sendall(pull + body_headers)
            ((status, _, body),) = read_responses(sock, 1)
        assert status == 200 and orjson.loads(body)["status"] == "FOUND", body
        assert connection_requests(fast) - before == 0, body_headers
        assert lane_requests(fast) - lane_before == 1, body_headers


def test_a_held_pull_on_the_connection_is_released_when_its_client_goes_away(
    brokers: tuple[httpx.Client, httpx.Client],
) -> None:
    fast, _ = brokers
    port = port_of(fast)
    queue = f"/v1/topics/{OTHER}/queues/1/messages"
    end = fast.get(f"{queue}?offset=0&max_messages=1").json()["max_offset"]
    before = connection_requests(fast)
    with raw_http.connect(port) as sock:
        sock.sendall(f"GET {queue}?offset={end}&max_wait_ms=60000 HTTP/1.1\r\nhost: x\r\n\r\n".encode())
        wait_for(lambda: held(fast) == 1, "the pull is held")
    assert connection_requests(fast) - before == 1
    # Its client closed: the hold ends now, not after its 60 s.
    wait_for(lambda: held(fast) == 0, "the hold is released")


def held(client: httpx.Client) -> int:
    return lane_requests(client, "wharf_long_polls_held")


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.02)
