"""A pusher in process, on a real store and broker, whose endpoint or offset write fails in a way it
does not expect (a bug in a transport, an error while committing): the messages it had read are
delivered on a later try and the group's offset moves past them; the queue's loop goes on."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.broker import Broker
from app.codec import IncomingMessage
from app.longpoll.hold import PullHoldService
from app.outbound import HttpOutbound
from app.push.endpoint import EndpointGuard
from app.push.pusher import Backoff, Pusher
from app.push.request import PushAnswer
from app.push.subscription import parse_subscription
from app.routing.topic_config import TopicConfig, TopicConfigManager
from app.settings import Settings
from app.store import MessageStore
from tests.store.conftest import tiny_config

TOPIC = "orders"
GROUP = "billing"
BACKOFF = Backoff(min_ms=10, max_ms=50, retry_after_max_s=1.0, suspend_ms=10)


class Endpoint:
    """Takes every request; raises an unexpected error for the first ``failures`` of them."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.bodies: list[bytes] = []

    async def post(self, url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> PushAnswer:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("a transport that fails in a way nobody expected")
        self.bodies.append(body)
        return PushAnswer(200)

    async def aclose(self) -> None:
        pass


class FailingPersist:
    """Forces the offsets like the service does, after failing the first ``failures`` times."""

    def __init__(self, store: MessageStore, failures: int) -> None:
        self.store = store
        self.failures = failures

    async def __call__(self) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("the offsets file could not be written")
        await asyncio.to_thread(self.store.consumer_offsets.persist, True)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    store = MessageStore(tiny_config(tmp_path / "store", commitlog_file_size=1 << 20)).open()
    yield store
    store.close()


def make_broker(store: MessageStore, tmp_path: Path) -> Broker:
    topics = TopicConfigManager(tmp_path / "topics.json")
    topics.create_many([TopicConfig(TOPIC, 1, 1)])
    return Broker(Settings(), store, topics, PullHoldService(store.max_offset), outbound=HttpOutbound())


async def push_three(
    broker: Broker, endpoint: Endpoint, persist: FailingPersist, ordered: bool
) -> tuple[list[bytes], int, str | None]:
    """Produce three messages, push them, and wait (bounded) until the endpoint took all three and
    the group's offset is past them: what the endpoint got, the offset, the last error noted."""
    subscription, _ = parse_subscription(
        GROUP, {"topic": TOPIC, "url": "http://127.0.0.1:9/hook", "ordered": ordered}, None
    )
    pusher = Pusher(broker, subscription, endpoint, persist, BACKOFF, EndpointGuard(subscription.url, True))
    await broker.produce(TOPIC, [IncomingMessage(f"m{i}".encode(), queue_id=0) for i in range(3)])
    offsets = broker.store.consumer_offsets
    await pusher.start()
    try:
        for _ in range(500):
            if len(set(endpoint.bodies)) >= 3 and offsets.query(GROUP, TOPIC, 0) >= 3:
                break
            await asyncio.sleep(0.01)
    finally:
        await pusher.stop()
    return endpoint.bodies, offsets.query(GROUP, TOPIC, 0), pusher.state.last_error


@pytest.mark.parametrize("ordered", [False, True], ids=["concurrent", "ordered"])
def test_an_unexpected_send_error_is_tried_again(store: MessageStore, tmp_path: Path, ordered: bool) -> None:
    broker = make_broker(store, tmp_path)
    endpoint = Endpoint(failures=2)

    bodies, committed, error = asyncio.run(
        push_three(broker, endpoint, FailingPersist(store, failures=0), ordered)
    )

    assert sorted(bodies) == [b"m0", b"m1", b"m2"]  # each once: the failed sends reached nobody
    assert committed == 3
    assert error is not None and "nobody expected" in error


@pytest.mark.parametrize("ordered", [False, True], ids=["concurrent", "ordered"])
def test_an_unexpected_commit_error_leaves_nothing_behind(
    store: MessageStore, tmp_path: Path, ordered: bool
) -> None:
    broker = make_broker(store, tmp_path)
    endpoint = Endpoint(failures=0)

    bodies, committed, error = asyncio.run(
        push_three(broker, endpoint, FailingPersist(store, failures=1), ordered)
    )

    assert {b"m0", b"m1", b"m2"} <= set(bodies)  # at least once: one may come twice
    assert committed == 3
    assert error is not None and "offsets file" in error
