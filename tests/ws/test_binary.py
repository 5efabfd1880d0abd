"""Binary frames (``format=binary``): batches in on the produce socket, stored records out on the
subscribe socket, with the JSON control frames unchanged."""

from __future__ import annotations

import httpx
import orjson

from app.codec import IncomingMessage, encode_batch, split_records
from app.store.record import decode_record
from tests.ws.wsclient import Socket, WsBroker, produce


def results(socket: Socket, count: int) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    while len(found) < count:
        found.extend(socket.next("results")["results"])
    assert len(found) == count
    return found


def records(socket: Socket, count: int) -> list[tuple[int, int, bytes, int]]:
    """The next ``count`` delivered records as (queue id, queue offset, body, reconsume times);
    text frames met on the way go to ``skipped``."""
    found: list[tuple[int, int, bytes, int]] = []
    while len(found) < count:
        frame = socket.connection.recv(timeout=10)
        if isinstance(frame, str):
            socket.skipped.append(orjson.loads(frame))
            continue
        for record in split_records(frame):
            message = decode_record(record, check_crc=True)
            found.append((message.queue_id, message.queue_offset, message.body, message.reconsume_times))
    assert len(found) == count
    return found


def test_binary_batches_are_stored_and_answered_per_message_with_frame_and_index(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    with ws.connect("/v1/ws/produce", topic=topic, format="binary") as socket:
        for frame in range(3):  # pipelined: no waiting between frames
            batch = [IncomingMessage(f"f{frame}m{index}".encode(), queue_id=1) for index in range(4)]
            socket.connection.send(encode_batch(batch))
        socket.send(id="json", body="a text frame still works", queue_id=1)
        answered = results(socket, 13)
    tags = [(result.get("frame"), result.get("index"), result.get("id")) for result in answered]
    assert tags == [(frame, index, None) for frame in range(3) for index in range(4)] + [(None, None, "json")]
    assert [result["queue_offset"] for result in answered] == list(range(13))
    pulled = client.get(f"/v1/topics/{topic}/queues/1/messages", params={"offset": 0, "max_messages": 20})
    bodies = [message["body"] for message in pulled.json()["messages"]]
    assert bodies == [f"f{frame}m{index}" for frame in range(3) for index in range(4)] + [
        "a text frame still works"
    ]


def test_a_binary_frame_that_is_no_batch_is_one_error_and_the_socket_stays_open(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    with ws.connect("/v1/ws/produce", topic=topic, format="binary") as socket:
        socket.connection.send(b"WHB1\x00\x00\x00\x02truncated")
        socket.connection.send(encode_batch([IncomingMessage(b"after", queue_id=0)]))
        bad, good = results(socket, 2)
    assert (bad["frame"], bad["error_code"], "index" in bad) == (0, 40010, False)
    assert (good["frame"], good["index"], good["status"]) == (1, 0, "SEND_OK")
    pulled = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0}).json()["messages"]
    assert [message["body"] for message in pulled] == ["after"]


def test_plain_and_other_frames_keep_their_order_and_their_answers(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    """Frames of plain batches are stored together; a frame with a property, one with a message
    the broker refuses, a malformed one and a text frame between them take the general path, and
    everything lands and is answered in the order sent."""
    frames: list[bytes | None] = [
        encode_batch([IncomingMessage(b"p0", queue_id=0), IncomingMessage(b"p1", queue_id=0)]),
        encode_batch([IncomingMessage(b"p2", queue_id=0, properties={"region": "eu"})]),
        encode_batch([IncomingMessage(b"p3", queue_id=0)]),
        encode_batch([IncomingMessage(b"bad", queue_id=99), IncomingMessage(b"p4", queue_id=0)]),
        None,  # a text frame
        b"WHB1\x00\x00\x00\x01",
        encode_batch([IncomingMessage(b"p6", queue_id=0, unique_id="u-6")]),
        encode_batch([IncomingMessage(b"p6 again", queue_id=0, unique_id="u-6")]),
    ]
    with ws.connect("/v1/ws/produce", topic=topic, format="binary") as socket:
        for frame in frames:
            if frame is None:
                socket.send(id="text", body="p5", queue_id=0)
            else:
                socket.connection.send(frame)
        answered = results(socket, 10)
    tags = [(result.get("frame"), result.get("index"), result.get("id")) for result in answered]
    assert tags == [
        (0, 0, None),
        (0, 1, None),
        (1, 0, None),
        (2, 0, None),
        (3, 0, None),
        (3, 1, None),
        (None, None, "text"),
        (4, None, None),
        (5, 0, None),
        (6, 0, None),
    ]
    assert answered[4]["error_code"] == 40011 and answered[7]["error_code"] == 40010
    assert answered[9]["msg_id"] == answered[8]["msg_id"]  # a repeat of u-6, not stored again
    offsets = [result.get("queue_offset") for result in answered]
    assert offsets == [0, 1, 2, 3, None, 4, 5, None, 6, 6]
    pulled = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0, "max_messages": 20})
    assert [message["body"] for message in pulled.json()["messages"]] == [f"p{n}" for n in range(7)]


def test_without_format_binary_a_binary_frame_must_hold_json(ws: WsBroker, topic: str) -> None:
    with ws.connect("/v1/ws/produce", topic=topic) as socket:
        socket.connection.send(encode_batch([IncomingMessage(b"x", queue_id=0)]))
        code, reason = socket.closed()
    assert (code, reason.split()[0]) == (4400, "40002")


def test_an_unknown_format_closes_with_4400(ws: WsBroker, topic: str) -> None:
    for path in ("/v1/ws/produce", "/v1/ws/subscribe"):
        with ws.connect(path, topic=topic, format="xml") as socket:
            code, reason = socket.closed()
        assert (code, reason.split()[0]) == (4400, "40012"), path


def test_a_binary_subscriber_receives_the_stored_records_within_its_credit(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, *[f"r{number}" for number in range(5)], queue_id=2)
    params = {"topic": topic, "queues": "2", "from": "first", "credit": 3}
    with ws.connect("/v1/ws/subscribe", format="binary", **params) as socket:
        assert socket.next("assignment")["queues"][0]["queue_id"] == 2
        assert records(socket, 3) == [(2, offset, f"r{offset}".encode(), 0) for offset in range(3)]
        assert socket.status()["credit"] == 0  # control frames stay JSON text
        socket.send(type="permit", n=10)
        assert records(socket, 2) == [(2, offset, f"r{offset}".encode(), 0) for offset in (3, 4)]
        produce(client, topic, "pushed", queue_id=2)
        assert records(socket, 1) == [(2, 5, b"pushed", 0)]


def test_a_nacked_record_comes_again_with_its_reconsume_count(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, "retry me", "next", queue_id=3)
    params = {"topic": topic, "group": "binary-nack", "queues": "3", "from": "first", "credit": 2}
    with ws.connect("/v1/ws/subscribe", format="binary", **params) as socket:
        assert records(socket, 2) == [(3, 0, b"retry me", 0), (3, 1, b"next", 0)]
        socket.send(type="ack", queue_id=3, offset=1)
        socket.send(type="nack", queue_id=3, offset=0)
        socket.send(type="permit", n=1)
        assert records(socket, 1) == [(3, 0, b"retry me", 1)]
        socket.send(type="ack", queue_id=3, offset=0)
        assert socket.next("committed")["offset"] == 2
