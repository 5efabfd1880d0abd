"""A broker runs WHARF_PUSH_MAX_SUBSCRIPTIONS push subscriptions (1,000 by default), each delivering,
and refuses one more with 409."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.push.receiver import Receiver, produce, push_broker

pytestmark = pytest.mark.slow

SUBSCRIPTIONS = 1000


def test_a_thousand_subscriptions_on_one_broker_all_deliver(tmp_path: Path) -> None:
    with Receiver() as receiver, push_broker(tmp_path / "store") as (_, http):
        assert http.post("/v1/topics", json={"name": "fanout", "queues": 1}).status_code == 201
        for number in range(SUBSCRIPTIONS):
            answer = http.put(f"/v1/groups/g{number}/push", json={"topic": "fanout", "url": receiver.url})
            assert answer.status_code == 201, answer.text
        extra = http.put("/v1/groups/one-more/push", json={"topic": "fanout", "url": receiver.url})
        assert extra.status_code == 409
        assert extra.json()["error_code"] == 40950
        # A change of one that exists is no new subscription.
        assert (
            http.put(
                "/v1/groups/g0/push", json={"topic": "fanout", "url": receiver.url, "batch": 2}
            ).status_code
            == 200
        )
        assert len(http.get("/v1/push").json()["subscriptions"]) == SUBSCRIPTIONS
        produce(http, "fanout", {"body": "to everyone"})
        got = receiver.wait_for(lambda received: len(received) >= SUBSCRIPTIONS, timeout_s=120)
        assert (
            len({request.headers["webhook-signature"] for request in got}) == SUBSCRIPTIONS
        )  # each its own secret
