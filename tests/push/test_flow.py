"""Flow control: at most max_in_flight requests, nothing read past them (a receiver that never
answers holds the subscription's memory to max_in_flight * batch messages), and an endpoint that
fails every request is sent to less and less often, up to the back-off's bound."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.push.receiver import Receiver, produce, push_broker, state, subscribe, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, httpx.Client]]:
    store = tmp_path_factory.mktemp("push-flow") / "store"
    with push_broker(store, push_backoff_min_ms=100, push_backoff_max_ms=800) as running:
        yield running


def test_a_receiver_that_never_answers_holds_max_in_flight_requests(
    broker: tuple[BrokerProcess, httpx.Client],
) -> None:
    _, http = broker
    assert http.post("/v1/topics", json={"name": "flood", "queues": 4}).status_code == 201
    with Receiver() as silent, Receiver() as witness:
        silent.hang.set()
        subscribe(http, "stuck", topic="flood", url=silent.url, max_in_flight=3, batch=2, timeout_ms=300_000)
        subscribe(http, "witness", topic="flood", url=witness.url)
        produced = produce(http, "flood", *({"body": "x" * 10_000} for _ in range(400)))
        # Once another subscription of the topic got all of it, the stuck one had every chance to
        # read more than it may.
        witness.wait_for(lambda received: len(received) >= len(produced))
        silent.wait_for(lambda received: len(received) >= 3)
        shown = state(http, "stuck")
        assert len(silent.received) == 3
        assert silent.most_open == 3
        assert shown["in_flight"] == 3
        assert shown["held_messages"] <= 3 * 2  # read from the queues: only what is in flight
        # What is in flight is all that was read: the rest waits in the queues.
        in_flight = sum(len(request.body) // 10_000 for request in silent.received)
        assert in_flight <= 3 * 2
        assert shown["lag"] == len(produced)  # nothing acknowledged, nothing committed
        assert http.delete("/v1/groups/stuck/push").status_code == 204


def test_an_endpoint_failing_every_request_is_backed_off(broker: tuple[BrokerProcess, httpx.Client]) -> None:
    _, http = broker
    assert http.post("/v1/topics", json={"name": "doomed", "queues": 1}).status_code == 201
    with Receiver(respond=lambda _: 500) as receiver:
        subscribe(
            http,
            "hopeless",
            topic="doomed",
            url=receiver.url,
            max_reconsume_times=0,
            max_in_flight=1,
            paused=True,
        )
        produce(http, "doomed", *({"body": f"d{i}"} for i in range(8)))
        subscribe(http, "hopeless", topic="doomed", url=receiver.url, max_reconsume_times=0, max_in_flight=1)
        got = receiver.wait_for(lambda received: len(received) >= 7)
        gaps = [later.at - earlier.at for earlier, later in zip(got, got[1:], strict=False)]
        # 100 ms after the first failure, doubling, bounded at 800 ms: never sooner.
        for gap, wait_s in zip(gaps, (0.1, 0.2, 0.4, 0.8, 0.8, 0.8), strict=False):
            assert gap >= wait_s
        assert wait_until(lambda: state(http, "hopeless")["dead_lettered"] >= 7, what="dead letters")
        assert state(http, "hopeless")["consecutive_failures"] >= 7
