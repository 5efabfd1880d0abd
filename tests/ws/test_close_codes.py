"""Every refusal is a close frame with a documented code and a reason that starts with the error code."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.ws.conftest import MAX_CREDIT
from tests.ws.wsclient import WsBroker, new_topic


def closed(ws: WsBroker, path: str, **params: object) -> tuple[int, str]:
    with ws.connect(path, **params) as socket:
        return socket.closed()


@pytest.mark.parametrize(
    ("params", "code", "reason"),
    [
        ({"topic": "no-such-topic"}, 4404, "40402 topic 'no-such-topic' not found"),
        ({"tags": "TagA ||"}, 4400, "40004 empty tag in expression 'TagA ||'"),
        ({"from": "yesterday"}, 4400, "40012 from must be last, first or a timestamp in ms, not 'yesterday'"),
        ({"queues": "0,9"}, 4404, "40403 topic '{topic}' has read queues 0..3, not 9"),
        ({"queues": "one"}, 4400, "40012 queues must be a whole number"),
        ({"group": "bad group"}, 4400, "40012 group 'bad group' must be"),
        ({"credit": str(MAX_CREDIT + 1)}, 4400, f"40012 credit is {MAX_CREDIT + 1}, the limit is"),
    ],
)
def test_a_bad_subscription_is_closed_with_its_reason(
    ws: WsBroker, topic: str, params: dict[str, str], code: int, reason: str
) -> None:
    got_code, got_reason = closed(ws, "/v1/ws/subscribe", **{"topic": topic, **params})
    assert got_code == code
    assert got_reason.startswith(reason.format(topic=topic))


def test_a_subscription_needs_a_topic(ws: WsBroker) -> None:
    assert closed(ws, "/v1/ws/subscribe") == (4400, "40001 the topic parameter is required")


def test_a_topic_without_read_permission_cannot_be_subscribed(ws: WsBroker, client: httpx.Client) -> None:
    write_only = new_topic(client, "write-only", perm=2)
    code, reason = closed(ws, "/v1/ws/subscribe", topic=write_only)
    assert (code, reason) == (4409, f"40903 topic '{write_only}' does not allow reading")


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        ("not json", "40002 a frame is not valid JSON"),
        ("[1, 2]", "40002 a frame must be a JSON object"),
        ('{"type": "subscribe"}', "40001 unknown frame type 'subscribe'"),
        ('{"type": "permit", "n": 0}', "40001 'permit' frame needs 'n': an integer >= 1"),
        ('{"type": "permit", "n": "5"}', "40001 'permit' frame needs 'n'"),
        ('{"type": "ack", "queue_id": 0, "offset": 0}', "40001 ack needs a group"),
        ('{"type": "nack", "queue_id": 0, "offset": 0}', "40001 nack needs a group"),
    ],
)
def test_a_bad_frame_closes_the_subscription_with_its_reason(
    ws: WsBroker, topic: str, frame: str, reason: str
) -> None:
    with ws.subscribe(topic=topic) as socket:
        socket.connection.send(frame)
        code, got = socket.closed()
    assert (code, got[: len(reason)]) == (4400, reason)


def test_a_malformed_ack_of_a_group_closes_the_subscription(ws: WsBroker, topic: str) -> None:
    with ws.subscribe(topic=topic, group="acks") as socket:
        socket.send(type="ack", queue_id=0, offsets=[1, -2])
        assert socket.closed() == (4400, "40001 ack 'offsets' must be a list of integers >= 0")


def test_credit_over_the_limit_closes_the_subscription(ws: WsBroker, topic: str) -> None:
    with ws.subscribe(topic=topic, credit=MAX_CREDIT) as socket:
        socket.send(type="permit", n=1)
        assert socket.closed() == (4400, f"40012 credit would be {MAX_CREDIT + 1}, the limit is {MAX_CREDIT}")


def test_produce_refusals_close_with_their_reason(ws: WsBroker, client: httpx.Client) -> None:
    read_only = new_topic(client, "read-only", perm=4)
    assert closed(ws, "/v1/ws/produce", topic=read_only) == (
        4409,
        f"40902 topic '{read_only}' does not accept messages",
    )
    assert closed(ws, "/v1/ws/produce") == (4400, "40001 the topic parameter is required")
    code, reason = closed(ws, "/v1/ws/produce", topic="bad topic!")
    assert (code, reason[:6]) == (4400, "40005 ")


def test_a_long_reason_is_cut_to_fit_a_close_frame(ws: WsBroker) -> None:
    code, reason = closed(ws, "/v1/ws/subscribe", topic="t" * 200)
    assert code == 4404
    assert len(reason.encode()) <= 123 and reason.endswith("...")


def test_a_subscriber_is_told_when_the_broker_shuts_down(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "store").start()
    try:
        with httpx.Client(base_url=process.url) as client:
            topic = new_topic(client, "shutdown")
        with WsBroker(process).subscribe(topic=topic, credit=1) as socket:
            process.process.terminate()  # type: ignore[union-attr]
            code, _ = socket.closed()
        assert code in (1001, 1012)  # ours, or uvicorn's own "service restart"
    finally:
        process.stop()
