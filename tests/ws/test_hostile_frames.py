"""Garbage from a client - bad UTF-8, bad JSON, unknown frames, huge numbers, broken WebSocket
framing, truncated frames - ends that client with a close code and leaves the broker serving others."""

from __future__ import annotations

import struct

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.ws.rawsocket import BINARY, PING, TEXT, RawWebSocket, encode_frame
from tests.ws.wsclient import WsBroker, produce

SUBSCRIBE = "/v1/ws/subscribe"
PRODUCE = "/v1/ws/produce"


def answer(raw: RawWebSocket) -> tuple[int | None, str]:
    """The broker's close code and reason, skipping the frames it sent before."""
    code, reason, _ = raw.read_until_close(max_bytes=1024 * 1024, timeout_s=10)
    return code, reason


@pytest.mark.parametrize(
    ("path", "opcode", "payload", "code", "reason"),
    [
        (SUBSCRIBE, TEXT, b"\xff\xfe{}", 1007, ""),  # not UTF-8: the WebSocket layer refuses it
        (SUBSCRIBE, BINARY, b"\x00\x01garbage", 4400, "40002 a frame is not valid JSON"),
        (SUBSCRIBE, TEXT, b'{"type":"permit"', 4400, "40002 a frame is not valid JSON"),
        (SUBSCRIBE, TEXT, b"\x00", 4400, "40002 a frame is not valid JSON"),
        (SUBSCRIBE, TEXT, b'"a string"', 4400, "40002 a frame must be a JSON object"),
        (SUBSCRIBE, TEXT, b'{"type":"hello"}', 4400, "40001 unknown frame type 'hello'"),
        (SUBSCRIBE, TEXT, b'{"type":null}', 4400, "40001 unknown frame type None"),
        (SUBSCRIBE, TEXT, b'{"type":"permit","n":1e400}', 4400, "40002 a frame is not valid JSON"),
        (SUBSCRIBE, TEXT, b'{"type":"permit","n":1.5}', 4400, "40001 'permit' frame needs 'n'"),
        (SUBSCRIBE, TEXT, b'{"type":"permit","n":123456789012345678901234567890}', 4400, "40001 'permit'"),
        (SUBSCRIBE, TEXT, b'{"type":"permit","n":9223372036854775807}', 4400, "40012 credit would be"),
        (
            SUBSCRIBE,
            TEXT,
            b'{"type":"ack","queue_id":99999999999999999999,"offset":1}',
            4400,
            "40001 ack needs",
        ),
        (PRODUCE, BINARY, b"WHB1\x00\x00\x00\x02\x00\x00", 4400, "40002 a frame is not valid JSON"),
        (PRODUCE, TEXT, b'{"body":"x","queue_id":1e400}', 4400, "40002 a frame is not valid JSON"),
        (PRODUCE, TEXT, b'{"body":"\\ud800"}', 4400, "40002 a frame is not valid JSON"),
        (PRODUCE, TEXT, b"\xc3\x28", 1007, ""),
    ],
)
def test_a_garbage_frame_is_closed_with_its_reason(
    broker: BrokerProcess, topic: str, path: str, opcode: int, payload: bytes, code: int, reason: str
) -> None:
    with RawWebSocket(broker.url, path, topic=topic) as raw:
        raw.send_frame(opcode, payload)
        got_code, got_reason = answer(raw)
    assert (got_code, got_reason[: len(reason)]) == (code, reason)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b'{"body":"x","queue_id":123456789012345678901234567890}', "queue_id: "),
        (b'{"body": 5}', "body: Expected `str`, got `int`"),
        (
            b'{"body":"x","born_timestamp":99999999999999999999}',
            "Object contains unknown field `born_timestamp`",
        ),
    ],
)
def test_a_bad_message_on_produce_gets_an_error_result_and_the_socket_stays(
    ws: WsBroker, topic: str, payload: bytes, reason: str
) -> None:
    with ws.produce(topic) as socket:
        socket.connection.send(payload.decode())
        socket.send(id="after", body="fine")
        results = []
        while len(results) < 2:
            results.extend(socket.next("results")["results"])
    assert results[0]["error_code"] == 42201 and results[0]["message"].startswith(reason)
    assert results[1]["id"] == "after" and results[1]["status"] == "SEND_OK"


@pytest.mark.parametrize(
    ("data", "code", "reason"),
    [
        (bytes([0x81, 0xFF]) + struct.pack(">Q", 2**63 - 1) + b"\0\0\0\0", 1009, "frame with "),
        (bytes([0x81, 0x02]) + b"{}", 1002, "incorrect masking"),
        (bytes([0xC1, 0x82]) + b"\0\0\0\0{}", 1002, "reserved bits must be 0"),
        (encode_frame(3, b"x"), 1002, "invalid opcode"),
        (encode_frame(PING, b"x" * 200), 1002, "control frame too long"),
        (encode_frame(0, b"x"), 1002, "unexpected continuation frame"),
    ],
)
def test_broken_framing_is_closed_by_the_websocket_layer(
    broker: BrokerProcess, topic: str, data: bytes, code: int, reason: str
) -> None:
    with RawWebSocket(broker.url, SUBSCRIBE, topic=topic) as raw:
        raw.send_raw(data)
        got_code, got_reason = answer(raw)
    assert (got_code, got_reason[: len(reason)]) == (code, reason)
    # A client's protocol error is no fault of the broker (uvicorn itself logs bad UTF-8, not Wharf).
    assert "unexpected fault on a WebSocket" not in broker.log()


def test_a_truncated_frame_then_a_dropped_connection_leaves_the_broker_serving(
    broker: BrokerProcess, client: httpx.Client, ws: WsBroker, topic: str
) -> None:
    for path in (SUBSCRIBE, PRODUCE):
        with RawWebSocket(broker.url, path, topic=topic) as raw:
            raw.send_raw(encode_frame(TEXT, b'{"body":"cut', length=1000))
    with ws.subscribe(topic=topic, queues="0", credit=1) as socket:
        produce(client, topic, "still serving", queue_id=0)
        assert [message["body"] for message in socket.messages(1)] == ["still serving"]
    assert client.get("/healthz").status_code == 200
