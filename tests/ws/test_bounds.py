"""Slow, silent and oversized clients: each is closed with its code and reason, and what a group's
subscriber had not acknowledged comes again to the group's next subscriber."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.api.server import BrokerProcess
from tests.ws.rawsocket import TEXT, RawWebSocket
from tests.ws.wsclient import WsBroker, new_topic, produce, wait_for

MAX_QUEUED_BYTES = 256 * 1024
SEND_TIMEOUT_S = 3
IDLE_TIMEOUT_S = 2
MAX_FRAME_BYTES = 4096
PRODUCE_MAX_FRAME_BYTES = 64 * 1024
BODY = "x" * 65536


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("broker") / "store",
        commitlog_file_size=64 * 1024 * 1024,
        hold_check_interval_ms=60_000,
        ws_max_queued_bytes=MAX_QUEUED_BYTES,
        ws_send_timeout_s=SEND_TIMEOUT_S,
        ws_idle_timeout_s=IDLE_TIMEOUT_S,
        ws_max_frame_bytes=MAX_FRAME_BYTES,
        ws_produce_max_frame_bytes=PRODUCE_MAX_FRAME_BYTES,
    ).start()
    yield process
    process.stop()


@pytest.fixture
def ws(broker: BrokerProcess) -> WsBroker:
    return WsBroker(broker)


def closed_by_broker(broker: BrokerProcess, raw: RawWebSocket, code: int) -> bool:
    """The broker logged that it closed this socket with ``code``."""
    port = raw.sock.getsockname()[1]
    return wait_for(lambda: f":{port} closed {code}:" in broker.log(), timeout_s=60)


def committed(client: httpx.Client, group: str, topic: str) -> int:
    offsets = client.get(f"/v1/groups/{group}/offsets", params={"topic": topic}).json()["offsets"]
    return int(next(entry["committed_offset"] for entry in offsets if entry["queue_id"] == 0))


@pytest.mark.slow
def test_a_subscriber_that_stops_reading_is_closed_and_its_unacked_messages_come_again(
    broker: BrokerProcess, client: httpx.Client, ws: WsBroker
) -> None:
    topic = new_topic(client, "stops-reading", queues=1)
    with RawWebSocket(
        broker.url, "/v1/ws/subscribe", recv_buffer_bytes=4096, topic=topic, group="slow", credit=1000
    ) as slow:
        assert orjson.loads(slow.read_frame()[1])["type"] == "assignment"
        # 10 MiB: more than the kernel's socket buffers take, so the broker's sends must wait.
        for _ in range(10):
            produce(client, topic, *[BODY] * 16)
        first = orjson.loads(slow.read_frame()[1])
        assert first["type"] == "messages" and first["messages"][0]["queue_offset"] == 0
        # Bytes bound the frame, not only credit: 1000 credit, 32 a batch, yet a few messages.
        assert len(first["messages"]) * len(BODY) <= MAX_QUEUED_BYTES
        slow.send_text(orjson.dumps({"type": "ack", "queue_id": 0, "offset": 0}).decode())
        assert closed_by_broker(broker, slow, 1013)
        code, reason, received = slow.read_until_close(max_bytes=9 * 1024 * 1024, timeout_s=30)
    assert code == 1013
    assert reason.startswith(f"40811 the client read nothing for {SEND_TIMEOUT_S} s")
    # Only the acknowledged message is committed: the rest were sent, or not, but never acked.
    assert committed(client, "slow", topic) == 1
    with ws.subscribe(topic=topic, group="slow", credit=3) as again:
        assert again.assignment["queues"] == [{"queue_id": 0, "offset": 1}]
        assert [message["queue_offset"] for message in again.messages(3)] == [1, 2, 3]


@pytest.mark.slow
def test_a_silent_subscriber_without_credit_is_closed_and_its_unacked_messages_come_again(
    client: httpx.Client, ws: WsBroker
) -> None:
    topic = new_topic(client, "silent", queues=1)
    produce(client, topic, "a", "b", queue_id=0)
    with ws.subscribe(topic=topic, group="silent", credit=1, **{"from": "first"}) as socket:
        assert [message["body"] for message in socket.messages(1)] == ["a"]
        code, reason = socket.closed(timeout_s=IDLE_TIMEOUT_S + 30)
    assert (code, reason) == (
        1008,
        f"40810 no frame from the client for {IDLE_TIMEOUT_S} s while the broker waits for a permit or an ack",
    )
    assert committed(client, "silent", topic) == 0
    with ws.subscribe(topic=topic, group="silent", credit=2) as again:
        assert [message["body"] for message in again.messages(2)] == ["a", "b"]


@pytest.mark.slow
def test_a_silent_subscriber_with_credit_is_waited_for_not_closed(client: httpx.Client, ws: WsBroker) -> None:
    topic = new_topic(client, "quiet", queues=1)
    with ws.subscribe(topic=topic, credit=5) as socket:
        # Silent for twice the idle timeout, but the broker waits for messages, not for it.
        with pytest.raises(TimeoutError):
            socket.frame(timeout_s=2 * IDLE_TIMEOUT_S)
        produce(client, topic, "late", queue_id=0)
        assert [message["body"] for message in socket.messages(1)] == ["late"]


def test_an_oversized_subscribe_frame_is_closed_with_1009(ws: WsBroker, client: httpx.Client) -> None:
    topic = new_topic(client, "big-frame")
    with ws.subscribe(topic=topic) as socket:
        socket.send(type="status", padding="p" * MAX_FRAME_BYTES)
        code, reason = socket.closed()
    size = len(orjson.dumps({"type": "status", "padding": "p" * MAX_FRAME_BYTES}))
    assert (code, reason) == (
        1009,
        f"41310 a frame of {size} bytes is over the limit of {MAX_FRAME_BYTES} bytes",
    )


def test_produce_frames_have_their_own_cap(ws: WsBroker, client: httpx.Client) -> None:
    topic = new_topic(client, "produce-cap")
    with ws.produce(topic) as socket:
        body = "b" * (PRODUCE_MAX_FRAME_BYTES // 2)  # over the subscribe cap, within produce's
        socket.send(id="fits", body=body)
        [result] = socket.next("results")["results"]
        assert result["id"] == "fits" and result["status"] == "SEND_OK"
        socket.send(id="too-big", body="b" * PRODUCE_MAX_FRAME_BYTES)
        code, reason = socket.closed()
    assert code == 1009 and reason.startswith("41310 a frame of ")


@pytest.mark.slow
def test_a_producer_that_never_reads_its_results_is_closed(
    broker: BrokerProcess, client: httpx.Client
) -> None:
    topic = new_topic(client, "deaf-producer")
    with RawWebSocket(broker.url, "/v1/ws/produce", recv_buffer_bytes=4096, topic=topic) as deaf:
        deaf.sock.settimeout(2)
        frame = orjson.dumps({"body": "m" * 64}).decode()
        sent = 0
        with pytest.raises(TimeoutError):  # the broker stops reading: its results are not taken
            while sent < 1_000_000:
                deaf.send_frame(TEXT, frame.encode())
                sent += 1
        assert closed_by_broker(broker, deaf, 1013)
