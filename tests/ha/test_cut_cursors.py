"""The broker's own cursors across a cut of its log: a WebSocket subscriber, an event stream and a
push subscription on a master read messages only it stored; the master is replaced, steps down
and cuts them, and the new master stores other messages at those queue offsets. None of the three
may commit what it read before the cut (the group's offset would pass the new messages, on this
broker and, handed over, on the new master), nor read on from where it was."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from httpx_sse import ServerSentEvent, connect_sse
from websockets.exceptions import ConnectionClosed

from tests.api.server import BrokerProcess
from tests.ha.replicas import TOPIC, caught_up, ha
from tests.ha.test_failover import broker, registry, registry_proxy  # noqa: F401 - a fixture
from tests.ha.test_offsets_failover import committed, fail_over, read_from_committed, send
from tests.push.receiver import Received, Receiver
from tests.routing.proxy import TcpProxy
from tests.transactions.transacting import wait_until
from tests.ws.wsclient import WsBroker

pytestmark = pytest.mark.slow

SHARED = [f"shared-{n}" for n in range(4)]  # queue offsets 0..3, on both brokers
ALONE = [f"alone-{n}" for n in range(3)]  # 4..6, on the master alone: cut
NEW = [f"new-{n}" for n in range(6)]  # 4..9, on the new master: copied by the old one after its cut
METADATA_ROUNDS_S = 1.0  # a few of the brokers' 300 ms metadata rounds


@contextlib.contextmanager
def pair(
    tmp_path: Path, database: str, **settings: object
) -> Iterator[tuple[TcpProxy, BrokerProcess, BrokerProcess]]:
    """A master that reaches the registry's ``database`` through a proxy the test can cut, and its
    slave, sharing a topic of one queue."""
    proxy, through_proxy = registry_proxy(database)
    master = broker(
        tmp_path, through_proxy, "a", 0, broker_role="ASYNC_MASTER", database_timeout_s=1, **settings
    )
    slave = broker(tmp_path, database, "b", 1, broker_role="SLAVE", **settings)
    try:
        master.start()
        slave.start()
        response = httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": 1})
        assert response.status_code == 201, response.text
        wait_until(lambda: ha(slave)["connected"], what="the slave to connect")
        yield proxy, master, slave
    finally:
        slave.kill()
        master.kill()
        proxy.close()


def store_alone(master: BrokerProcess, slave: BrokerProcess, group: str) -> None:
    """Once the shared messages reached the slave with the group's offset past them (the test's
    consumer committed it), the slave is killed and the master alone stores more."""
    wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
    wait_until(lambda: committed(slave.url, group) == 4, what="the slave to take the group's offset")
    slave.kill()
    send(master.url, ALONE)


def assert_no_offset_passes_the_new_messages(master: BrokerProcess, slave: BrokerProcess, group: str) -> None:
    """After a few metadata rounds (anything the old master committed would have been handed over),
    neither broker has the group past the new messages, and the group reads them all."""
    time.sleep(METADATA_ROUNDS_S)
    assert (committed(slave.url, group) or 0) <= 4
    assert (committed(master.url, group) or 0) <= 4
    assert read_from_committed(slave.url, group) == NEW


def test_a_websocket_subscriber_is_closed_with_1012_and_commits_nothing_it_read_before_the_cut(
    tmp_path: Path,
    registry: str,  # noqa: F811
) -> None:
    with pair(tmp_path, registry) as (proxy, master, slave):
        with WsBroker(master).subscribe(
            topic=TOPIC, group="billing", credit=100, **{"from": "first"}
        ) as socket:
            send(master.url, SHARED)
            shared = socket.messages(4)
            socket.send(type="ack", queue_id=0, offsets=[m["queue_offset"] for m in shared])
            assert socket.next("committed")["offset"] == 4
            store_alone(master, slave, "billing")
            alone = socket.messages(3)
            assert [m["body"] for m in alone] == ALONE

            fail_over(proxy, master, slave, NEW)
            # The ack of what it read before the cut comes too late: the socket is closed, or
            # closing, and commits nothing.
            with contextlib.suppress(ConnectionClosed):
                socket.send(type="ack", queue_id=0, offsets=[m["queue_offset"] for m in alone])
            code, reason = socket.closed()
        assert code == 1012
        assert "log was cut" in reason
        assert_no_offset_passes_the_new_messages(master, slave, "billing")


class EventReader(threading.Thread):
    """Reads an event stream until it ends; its message events and how it ended."""

    def __init__(self, url: str, **params: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.params = params
        self.headers: dict[str, str] = {}
        self.events: list[ServerSentEvent] = []
        self.ended = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(30, read=120)) as client,
                connect_sse(
                    client,
                    "GET",
                    f"{self.url}/v1/topics/{TOPIC}/events",
                    params=self.params,
                    headers=self.headers,
                ) as source,
            ):
                for event in source.iter_sse():
                    if event.data:
                        self.events.append(event)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error
        finally:
            self.ended.set()

    def bodies(self) -> list[str]:
        return [orjson.loads(event.data)["body"] for event in self.events]


def test_an_event_stream_ends_at_the_cut_and_commits_nothing_it_read_before(
    tmp_path: Path,
    registry: str,  # noqa: F811
) -> None:
    with pair(tmp_path, registry) as (proxy, master, slave):
        reader = EventReader(master.url, group="audit", commit="true", **{"from": "first"})
        reader.start()
        send(master.url, SHARED)
        store_alone(master, slave, "audit")  # the stream committed what it wrote
        wait_until(lambda: len(reader.events) == 7 or reader.ended.is_set(), what="the master's own events")
        assert reader.bodies() == SHARED + ALONE

        fail_over(proxy, master, slave, NEW)
        assert reader.ended.wait(10), "the stream went on past the cut"
        assert reader.error is None, reader.error
        assert reader.bodies() == SHARED + ALONE
        assert_no_offset_passes_the_new_messages(master, slave, "audit")

        # The stream reconnects, as an EventSource does, with its last id: an id read before the
        # cut (queue offset 7). It resumes at the group's committed offset, below it since the cut.
        again = EventReader(master.url, group="audit", commit="true")
        again.headers["Last-Event-ID"] = reader.events[-1].id
        again.start()
        wait_until(lambda: again.events or again.ended.is_set(), what="the first event after the cut")
        assert again.bodies()[0] == NEW[0]


def test_a_push_subscription_cancels_what_it_had_in_flight_at_the_cut_and_forgets_its_cursors(
    tmp_path: Path,
    registry: str,  # noqa: F811
) -> None:
    answer_alone = threading.Event()  # the master's deliveries of what it alone stored
    test_over = threading.Event()  # the new master's deliveries: held to the end, never committed

    def respond(request: Received) -> int:
        if request.body.startswith(b"alone-"):
            answer_alone.wait(60)
        elif request.body.startswith(b"new-"):
            test_over.wait(60)
        return 200

    try:
        with (
            pair(tmp_path, registry, push_allow_private="true") as (proxy, master, slave),
            Receiver(respond) as receiver,
        ):
            hook = {"topic": TOPIC, "url": receiver.url, "timeout_ms": 120_000}
            created = httpx.put(f"{master.url}/v1/groups/hooks/push", json=hook)
            assert created.status_code == 201, created.text
            wait_until(
                lambda: httpx.get(f"{slave.url}/v1/groups/hooks/push").status_code == 200,
                what="the subscription on the slave",
            )
            send(master.url, SHARED)
            store_alone(master, slave, "hooks")
            receiver.wait_for(lambda got: sum(r.body.startswith(b"alone-") for r in got) == 3)

            fail_over(proxy, master, slave, NEW)
            state = httpx.get(f"{master.url}/v1/groups/hooks/push").json()["state"]
            assert state["held_messages"] == 0, "the old master's pusher kept what it read before the cut"
            # Answered now, the deliveries cut would commit 7 on the old master, handed over to
            # the new one: they were cancelled at the cut.
            answer_alone.set()
            time.sleep(METADATA_ROUNDS_S)
            assert (committed(slave.url, "hooks") or 0) <= 4
            assert (committed(master.url, "hooks") or 0) <= 4
    finally:
        answer_alone.set()
        test_over.set()
