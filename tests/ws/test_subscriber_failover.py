"""The WebSocket subscriber follows its broker name, end to end with real broker processes.

A SYNC_MASTER and two slaves under automatic failover share a PostgreSQL route registry; the master
is killed while messages flow and a slave is promoted: the subscriber, given only the dead master's
address, follows its broker name there and misses nothing the producers were told was stored. With
its master down (no failover) a subscriber reads from the slave and goes back to the master once it
is back. Without a group, a socket opened again goes on after the last message handed out."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from app.client import AsyncSubscriber
from app.client.consumed import ConsumedMessage
from tests.api.server import BrokerProcess
from tests.conftest import throwaway_database
from tests.ha.replicas import QUEUES, TOPIC, caught_up, ha, produce
from tests.small_disk import fill, mounted_tmpfs

FAILOVER_S = 2
# Once the load stopped, the subscriber holds all the new master holds within this.
CATCH_UP_S = 20.0
# From the master's death to then (the promotion takes FAILOVER_S and a fifth more, the load 200
# more SEND_OK): well within the registry's broker expiry (120 s), so the subscriber did not wait
# for the dead master to leave the route.
FOLLOW_S = 40.0

Held = set[tuple[int, int, str]]  # (queue id, queue offset, body)


@pytest.fixture
def registry() -> Iterator[str]:
    yield from throwaway_database("wharf_ws_failover")


def replica(
    tmp_path: Path, registry: str, name: str, broker_id: int, role: str, **settings: str
) -> BrokerProcess:
    return BrokerProcess(
        tmp_path / name,
        database_url=registry,
        broker_name="broker-ha",
        broker_id=broker_id,
        broker_role=role,
        ha_metadata_interval_ms=300,
        ha_failover_s=FAILOVER_S,
        **settings,
    )


def start_cluster(tmp_path: Path, registry: str) -> list[BrokerProcess]:
    """A SYNC_MASTER (id 0) and two slaves: whichever slave is promoted, the other keeps SEND_OK coming."""
    brokers = [
        replica(tmp_path, registry, name, broker_id, role, ha_auto_failover="true")
        for name, broker_id, role in (("a", 0, "SYNC_MASTER"), ("b", 1, "SLAVE"), ("c", 2, "SLAVE"))
    ]
    for process in brokers:
        process.start()
    master = brokers[0]
    response = httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES})
    assert response.status_code == 201, response.text
    wait(lambda: len(ha(master)["slaves"]) == 2, "both slaves to connect")
    wait(lambda: len(route_addresses(master)) == 3, "the route to list the three brokers")
    return brokers


def wait(condition: Callable[[], object], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s} s"
        time.sleep(0.05)


def route_addresses(process: BrokerProcess) -> dict[str, str]:
    response = httpx.get(f"{process.url}/v1/topics/{TOPIC}/route")
    assert response.status_code == 200, response.text
    (data,) = [data for data in response.json()["broker_datas"] if data["broker_name"] == "broker-ha"]
    return dict(data["addresses"])


def statuses(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {result["status"] for result in response.json()["results"]}


def promoted(slaves: list[BrokerProcess]) -> BrokerProcess | None:
    for process in slaves:
        try:
            if ha(process)["role"] != "SLAVE":
                return process
        except httpx.TransportError:
            continue
    return None


def held_messages(process: BrokerProcess) -> Held:
    """Every message the broker holds, read from each queue's start."""
    held = set()
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            response = httpx.get(
                f"{process.url}/v1/topics/{TOPIC}/queues/{queue_id}/messages",
                params={"offset": offset, "max_messages": 1000},
            )
            assert response.status_code == 200, response.text
            messages = response.json()["messages"]
            if not messages:
                break
            held |= {(queue_id, m["queue_offset"], m["body"]) for m in messages}
            offset = messages[-1]["queue_offset"] + 1
    return held


def committed(process: BrokerProcess, group: str) -> dict[int, int]:
    answer = httpx.get(f"{process.url}/v1/groups/{group}/offsets", params={"topic": TOPIC}).json()
    return {row["queue_id"]: row["committed_offset"] or 0 for row in answer["offsets"]}


def max_offsets(process: BrokerProcess) -> dict[int, int]:
    answer = httpx.get(f"{process.url}/v1/topics/{TOPIC}/queues").json()
    return {row["queue_id"]: row["max_offset"] for row in answer["queues"]}


@dataclass
class Load:
    """Produces numbered messages to whichever broker takes them (the master, then the promoted
    slave), and remembers which were answered SEND_OK, and by which broker. A batch whose request
    failed without an answer is sent again to the next broker, as a producer does: it may have been
    stored the first time too (at least once), so its bodies are remembered as ``resent``."""

    brokers: list[BrokerProcess]
    acknowledged: dict[str, str] = field(default_factory=dict)  # body -> the url that said SEND_OK
    resent: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="load")
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()

    def acknowledged_by(self, url: str) -> int:
        return sum(1 for by in list(self.acknowledged.values()) if by == url)

    def _run(self) -> None:
        number = 0
        target = 0
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                bodies = [f"m{number}-{i}" for i in range(4)]
                number += 1
                for attempt in range(len(self.brokers)):
                    url = self.brokers[(target + attempt) % len(self.brokers)].url
                    try:
                        response = client.post(
                            f"{url}/v1/topics/{TOPIC}/messages",
                            json={
                                "messages": [
                                    {"body": b, "queue_id": i % QUEUES} for i, b in enumerate(bodies)
                                ]
                            },
                        )
                    except httpx.TransportError:
                        self.resent.update(bodies)
                        continue
                    if response.status_code != 200:  # 421: a slave, or a master without its lease
                        continue
                    target = (target + attempt) % len(self.brokers)
                    for body, result in zip(bodies, response.json()["results"], strict=True):
                        if result["status"] == "SEND_OK":
                            self.acknowledged[body] = url
                    break
                else:
                    time.sleep(0.05)  # no broker takes writes now: the promotion is under way
                time.sleep(0.005)


async def until(condition: Callable[[], object], what: str, timeout_s: float = 30.0) -> None:
    """``condition`` (which may block on HTTP) in a thread, until it is true."""
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s} s"
        await asyncio.sleep(0.05)


@dataclass
class Outcome:
    received: list[ConsumedMessage]
    new_master: BrokerProcess
    held: Held  # what the new master holds once the load stopped
    caught_up_s: float  # from the master's death until the subscriber held all of ``held``
    addresses: set[str]  # the brokers the subscriber's queues are read from at the end
    committed_before: dict[int, int]  # the group's offsets at the old master just before its death
    committed_after: dict[int, int]  # and at the new master once the subscriber committed at the end
    ends: dict[int, int]  # the new master's max offsets at the end


def key(consumed: ConsumedMessage) -> tuple[int, int, str]:
    message = consumed.message
    return message.queue_id, message.queue_offset, message.body.decode()


async def read_through_failover(brokers: list[BrokerProcess], load: Load, group: str | None) -> Outcome:
    master, *slaves = brokers
    received: list[ConsumedMessage] = []

    async def read() -> None:
        while True:
            consumed = await subscriber.poll(1.0)
            if consumed is not None:
                received.append(consumed)

    async with AsyncSubscriber(master.url, TOPIC, group, start="first", master_check_s=0.5) as subscriber:
        reader = asyncio.create_task(read())
        try:
            load.start()
            await until(lambda: load.acknowledged_by(master.url) >= 200 and len(received) >= 100, "load")
            committed_before = await asyncio.to_thread(committed, master, group) if group else {}
            await asyncio.to_thread(master.kill)
            killed_at = time.monotonic()
            await until(lambda: promoted(slaves), "a slave's promotion")
            new_master = promoted(slaves)
            assert new_master is not None
            await until(lambda: load.acknowledged_by(new_master.url) >= 200, "SEND_OK from the new master")
            await asyncio.to_thread(load.finish)
            held = await asyncio.to_thread(held_messages, new_master)
            try:
                await until(lambda: held <= {key(m) for m in received}, "catching up", CATCH_UP_S)
            except AssertionError:
                missing = len(held - {key(m) for m in received})
                where = {queue.address for queue in subscriber.assignment}
                raise AssertionError(
                    f"{missing} of the {len(held)} messages the new master {new_master.url} holds did not "
                    f"come within {CATCH_UP_S} s; the subscriber reads from {where or 'nowhere'}"
                ) from None
            caught_up_s = time.monotonic() - killed_at
            assert not reader.done(), reader
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        if group is not None:
            await subscriber.commit()  # the message in hand too
        addresses = {queue.address for queue in subscriber.assignment}
    committed_after = await asyncio.to_thread(committed, new_master, group) if group else {}
    ends = await asyncio.to_thread(max_offsets, new_master)
    return Outcome(
        received, new_master, held, caught_up_s, addresses, committed_before, committed_after, ends
    )


def run_failover(tmp_path: Path, registry: str, group: str | None) -> tuple[Outcome, Load]:
    brokers = start_cluster(tmp_path, registry)
    load = Load(brokers)
    try:
        outcome = asyncio.run(asyncio.wait_for(read_through_failover(brokers, load, group), 120))
    finally:
        load.finish()
        for process in brokers:
            process.kill()
    return outcome, load


@pytest.mark.crash
@pytest.mark.slow
def test_a_subscriber_without_a_group_follows_its_broker_name_to_the_promoted_slave_and_skips_nothing(
    tmp_path: Path, registry: str
) -> None:
    outcome, load = run_failover(tmp_path, registry, None)

    received = [key(consumed) for consumed in outcome.received]
    bodies = [body for _, _, body in received]
    assert set(load.acknowledged) <= set(bodies), "a message answered SEND_OK was not delivered"
    # Every message the new master holds came once, before the failover or after it; nothing came
    # twice (the subscriber went on after the last message it handed out, not from ``first``). A
    # body stored twice is the producer's doing: only one sent again after a request with no answer.
    assert outcome.held <= set(received)
    assert len(received) == len(set(received)), "a message came twice"
    stored_twice = {body for body, times in Counter(bodies).items() if times > 1}
    assert stored_twice <= load.resent, f"stored twice but sent once: {stored_twice - load.resent}"
    # All that came besides is the old master's last messages, stored but never confirmed.
    assert not {body for _, _, body in set(received) - outcome.held} & set(load.acknowledged)
    # Each queue's offsets, as the new master holds them, came in order without a gap.
    for queue_id in range(QUEUES):
        offsets = [m[1] for m in received if m[0] == queue_id and m in outcome.held]
        assert offsets == list(range(len(offsets))), f"queue {queue_id}: {offsets}"
    assert outcome.addresses == {outcome.new_master.url}
    assert outcome.received[-1].queue.address == outcome.new_master.url
    assert outcome.caught_up_s < FOLLOW_S


@pytest.mark.crash
@pytest.mark.slow
def test_a_group_subscriber_follows_the_promoted_slave_and_its_commits_go_on_there(
    tmp_path: Path, registry: str
) -> None:
    outcome, load = run_failover(tmp_path, registry, "ws-failover")

    bodies = {consumed.body.decode() for consumed in outcome.received}
    assert set(load.acknowledged) <= bodies, "a message answered SEND_OK was not delivered"
    assert outcome.held <= {key(consumed) for consumed in outcome.received}
    assert outcome.addresses == {outcome.new_master.url}
    # The group's offsets went on at the new master from where they were, to every queue's end.
    after = outcome.committed_after
    assert after == outcome.ends
    assert all(after[queue_id] >= offset for queue_id, offset in outcome.committed_before.items())
    assert sum(outcome.committed_before.values()) > 0
    assert outcome.caught_up_s < FOLLOW_S


async def take(subscriber: AsyncSubscriber, count: int) -> list[ConsumedMessage]:
    """``count`` messages, failing after 20 s without one."""
    taken: list[ConsumedMessage] = []
    while len(taken) < count:
        consumed = await subscriber.poll(20.0)
        assert consumed is not None, f"only {len(taken)} of {count} messages came"
        taken.append(consumed)
    return taken


async def addresses_become(subscriber: AsyncSubscriber, addresses: set[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while {queue.address for queue in subscriber.assignment} != addresses:
        assert time.monotonic() < deadline, f"the subscriber did not move to {addresses} within {timeout_s} s"
        await asyncio.sleep(0.05)


@pytest.mark.crash
@pytest.mark.slow
def test_with_its_master_down_a_group_subscriber_reads_the_slave_then_goes_back_to_the_master_without_repeats(
    tmp_path: Path, registry: str
) -> None:
    """No automatic failover: the subscriber starts with the master down and reads the slave, where
    its group commits. The master comes back; once the slave has handed it the group's offsets the
    subscriber moves there, and gets only what is new."""
    master = replica(tmp_path, registry, "a", 0, "ASYNC_MASTER").start()
    slave = replica(tmp_path, registry, "b", 1, "SLAVE").start()
    try:
        response = httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES})
        assert response.status_code == 201, response.text
        wait(lambda: ha(slave)["connected"], "the slave to connect")
        wait(lambda: len(route_addresses(master)) == 2, "the route to list the slave")
        first = [f"first-{n}" for n in range(30)]
        assert statuses(produce(master, first)) == {"SEND_OK"}
        wait(lambda: caught_up(master, slave), "the slave to catch up")
        master.kill()
        later = [f"later-{n}" for n in range(10)]

        async def scenario() -> tuple[list[ConsumedMessage], list[ConsumedMessage]]:
            bootstrap = [master.url, slave.url]
            async with AsyncSubscriber(
                bootstrap, TOPIC, "returning", start="first", master_check_s=0.3
            ) as sub:
                during = await take(sub, len(first))
                await sub.commit()
                await asyncio.to_thread(master.start)
                await addresses_become(sub, {master.url})
                assert statuses(await asyncio.to_thread(produce, master, later)) == {"SEND_OK"}
                after = await take(sub, len(later))
                assert await sub.poll(0.5) is None, "a message came again"
            return during, after

        during, after = asyncio.run(asyncio.wait_for(scenario(), 120))
        assert sorted(consumed.body.decode() for consumed in during) == sorted(first)
        assert {consumed.queue.address for consumed in during} == {slave.url}
        assert sorted(consumed.body.decode() for consumed in after) == sorted(later)
        assert {consumed.queue.address for consumed in after} == {master.url}
        ends = max_offsets(master)
        wait(lambda: committed(master, "returning") == ends, "the group's offsets to reach the master's ends")
    finally:
        slave.kill()
        master.kill()


@pytest.mark.slow
def test_a_subscriber_without_a_group_goes_on_after_a_restart_from_the_last_message_it_handed_out(
    tmp_path: Path,
) -> None:
    """What waited in the subscriber when the socket closed, and what was stored while it was
    closed, come after the restart, once; nothing from ``start`` again."""
    process = BrokerProcess(tmp_path / "store")
    process.env["WHARF_ADVERTISED_URL"] = process.url
    process.start()
    try:
        response = httpx.post(f"{process.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES})
        assert response.status_code == 201, response.text
        before = [f"before-{n}" for n in range(10)]
        during = [f"during-{n}" for n in range(3)]

        async def scenario() -> list[ConsumedMessage]:
            async with AsyncSubscriber(process.url, TOPIC, start="first", credit=4) as subscriber:
                assert statuses(await asyncio.to_thread(produce, process, before)) == {"SEND_OK"}
                taken = await take(subscriber, 6)
                await asyncio.to_thread(process.stop)  # closes the socket with 1001
                await asyncio.to_thread(process.start)
                assert statuses(await asyncio.to_thread(produce, process, during)) == {"SEND_OK"}
                taken += await take(subscriber, 4 + len(during))
                assert await subscriber.poll(0.5) is None, "a message came again"
            return taken

        taken = asyncio.run(asyncio.wait_for(scenario(), 120))
        assert sorted(consumed.body.decode() for consumed in taken) == sorted(before + during)
        for queue_id in range(QUEUES):
            offsets = [c.message.queue_offset for c in taken if c.message.queue_id == queue_id]
            assert offsets == list(range(len(offsets)))
    finally:
        process.stop()


@pytest.mark.crash
@pytest.mark.slow
def test_a_subscriber_without_a_group_reading_a_lagging_slave_skips_what_it_had_when_the_slave_catches_up(
    tmp_path: Path, registry: str
) -> None:
    """The master dies; the subscriber's socket opens on the first slave, whose full disk left it
    without the master's last messages, so it reads that queue from the slave's end. The other
    slave, which had them, is promoted: at those offsets come the same records again (through the
    promoted slave, or the lagging one once it copies them), which must not be handed out twice."""
    with mounted_tmpfs(tmp_path / "disk", 192) as disk:
        # Asynchronous: the promoted slave takes writes while the other one's disk is still full.
        master = replica(tmp_path, registry, "a", 0, "ASYNC_MASTER")
        # Disk allocated 64 KiB ahead of its writer: a full disk stops its copy of the log at once.
        lagging = replica(disk, registry, "b", 1, "SLAVE", commitlog_chunk_size=str(64 << 10))
        lagging.log_path = tmp_path / "lagging.log"  # not on the disk that fills
        other = replica(tmp_path, registry, "c", 2, "SLAVE")
        brokers = [master, lagging, other]
        filler: Path | None = None
        try:
            for process in brokers:
                process.start()
            created = httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES})
            assert created.status_code == 201, created.text
            wait(lambda: len(ha(master)["slaves"]) == 2, "both slaves to connect")

            def send(url: str, bodies: list[str]) -> None:
                messages = [{"body": body, "queue_id": 0} for body in bodies]
                response = httpx.post(
                    f"{url}/v1/topics/{TOPIC}/messages", json={"messages": messages}, timeout=30
                )
                assert statuses(response) == {"SEND_OK"}

            async def scenario() -> list[ConsumedMessage]:
                nonlocal filler
                async with AsyncSubscriber(
                    master.url, TOPIC, queue_ids=[0], start="first", master_check_s=0.5
                ) as subscriber:
                    send(master.url, [f"shared-{n}" for n in range(4)])
                    received = await take(subscriber, 4)
                    await until(
                        lambda: caught_up(master, lagging) and caught_up(master, other), "both slaves"
                    )
                    filler = fill(disk, 64 << 10)
                    send(master.url, [f"tail-{n}-" + "x" * (256 << 10) for n in range(4)])  # past 64 KiB
                    received += await take(subscriber, 4)
                    await until(lambda: caught_up(master, other), "the other slave")
                    assert ha(lagging)["commitlog_max_offset"] < ha(master)["commitlog_max_offset"]
                    await asyncio.to_thread(master.kill)
                    await addresses_become(subscriber, {lagging.url})  # read from its end, offset 4

                    await until(lambda: not ha(other)["master_alive"], "the killed master's lease to end")
                    promoted = httpx.post(f"{other.url}/v1/admin/ha/promote", timeout=30)
                    assert promoted.status_code == 200, promoted.text
                    filler.unlink()  # the lagging slave copies the tail from the promoted one
                    send(other.url, ["after-0", "after-1"])
                    received += await take(subscriber, 2)
                    # Anything more now would be a repeat: the tail again, from either broker.
                    more = await subscriber.poll(2.0)
                    if more is not None:
                        received.append(more)
                    return received

            received = [key(consumed) for consumed in asyncio.run(asyncio.wait_for(scenario(), 120))]
            bodies = [body.split("-x")[0] if body.startswith("tail") else body for _, _, body in received]
            assert bodies == [
                *(f"shared-{n}" for n in range(4)),
                *(f"tail-{n}" for n in range(4)),
                "after-0",
                "after-1",
            ]
            assert [offset for _, offset, _ in received] == list(range(10))
        finally:
            for process in brokers:
                process.kill()
            if filler is not None:
                filler.unlink(missing_ok=True)
