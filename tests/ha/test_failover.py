"""Failover end to end: a master and a slave as real broker processes sharing a PostgreSQL route
registry, which records who is the master of the broker name in which epoch."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy.engine import make_url

from app.broker.ha_slave import HaSlave, cancel_tasks
from app.client import PullConsumer
from app.client.queues import QueueClient
from app.routing.registry import BrokerIdentity
from app.routing.service import RoutingService
from spark_jobs.options import ReadOptions
from spark_jobs.planning import discover, plan_ranges
from spark_jobs.reader import read_range
from spark_jobs.schema import SCHEMA
from tests.api.server import BrokerProcess
from tests.conftest import throwaway_database
from tests.ha.replicas import QUEUES, TOPIC, caught_up, commitlog_bytes, ha, produce, pulled_bodies
from tests.routing.proxy import TcpProxy
from tests.transactions.transacting import wait_until

FAILOVER_S = 2


@pytest.fixture
def registry() -> Iterator[str]:
    yield from throwaway_database("wharf_failover")


def broker(tmp_path: Path, registry: str, name: str, broker_id: int, **settings: object) -> BrokerProcess:
    return BrokerProcess(
        tmp_path / name,
        **{
            "database_url": registry,
            "broker_name": "broker-ha",
            "broker_id": broker_id,
            "ha_metadata_interval_ms": 300,
            "ha_failover_s": FAILOVER_S,
            **settings,
        },
    )


def start_pair(
    tmp_path: Path, registry: str, master_role: str = "ASYNC_MASTER", **settings: object
) -> tuple[BrokerProcess, BrokerProcess]:
    """A master (id 0) and its slave (id 1), which finds it through the registry."""
    master = broker(tmp_path, registry, "a", 0, broker_role=master_role, **settings).start()
    slave = broker(tmp_path, registry, "b", 1, broker_role="SLAVE", **settings).start()
    response = httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES})
    assert response.status_code == 201, response.text
    wait_until(lambda: ha(slave)["connected"], what="the slave to connect")
    return master, slave


def registry_proxy(registry: str) -> tuple[TcpProxy, str]:
    """A proxy to the registry's database that a test can cut, and the URL that goes through it."""
    url = make_url(registry)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432).start()
    return proxy, url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)


def statuses(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {result["status"] for result in response.json()["results"]}


def registry_row(registry: str, column: str) -> object:
    """A column of the broker name's row in the registry's ha_epochs table."""
    with psycopg.connect(registry.replace("postgresql+psycopg://", "postgresql://", 1)) as connection:
        row = connection.execute(
            f"SELECT {column} FROM ha_epochs WHERE broker_name = 'broker-ha'"  # noqa: S608 - a test's constant
        ).fetchone()
    assert row is not None
    return row[0]


def route_addresses(broker_process: BrokerProcess) -> dict[str, str]:
    response = httpx.get(f"{broker_process.url}/v1/topics/{TOPIC}/route")
    assert response.status_code == 200, response.text
    (data,) = [data for data in response.json()["broker_datas"] if data["broker_name"] == "broker-ha"]
    return dict(data["addresses"])


def test_a_slave_stopped_just_as_its_registry_call_answers_stops() -> None:
    """A promotion stops the slave's tasks while they ask the registry who the master is. A call
    whose answer came in just before the cancellation used to swallow it (asyncio.wait_for before
    Python 3.12): the task went on retrying the dead master and the promotion waited forever."""
    answered = threading.Event()
    release = threading.Event()

    def ha_record() -> str:
        release.wait(5)
        answered.set()
        return ""  # no master known: the slave asks again after its backoff

    async def scenario() -> None:
        routing = RoutingService(
            object(),  # type: ignore[arg-type] - only call() is used
            BrokerIdentity("c", "broker-ha", 1, "http://b"),
            list,
            3600,
            120,
            3600,
        )
        slave = HaSlave(None, lambda: routing.call(ha_record), 1, "http://b")  # type: ignore[arg-type]
        slave.start()
        await asyncio.sleep(0.1)  # the replication task waits for the registry's answer
        release.set()
        # The answer is in, but the event loop has not handed it over to the task yet.
        assert answered.wait(5)
        time.sleep(0.2)
        tasks = list(slave._tasks)
        stopping = asyncio.create_task(slave.stop())
        try:
            done, _ = await asyncio.wait([stopping], timeout=5)
            assert done, f"the slave's tasks did not end: {tasks}"
            assert all(task.done() for task in tasks)
        finally:
            routing._executor.shutdown(wait=False, cancel_futures=True)

    asyncio.run(scenario())


def test_cancel_tasks_keeps_the_callers_own_cancellation() -> None:
    """A promotion cancelled while it stops the slave ends cancelled; it does not go on."""

    async def slow_to_end() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.shield(asyncio.sleep(0.5))  # cleans up after its cancellation

    async def scenario() -> None:
        task = asyncio.create_task(slow_to_end())
        await asyncio.sleep(0)
        stopping = asyncio.create_task(cancel_tasks([task]))
        await asyncio.sleep(0.1)
        stopping.cancel()
        done, _ = await asyncio.wait([stopping], timeout=5)
        assert done and stopping.cancelled()
        await asyncio.wait([task])

    asyncio.run(scenario())


def test_a_manual_promotion_is_refused_while_the_master_holds_its_lease_unless_forced(
    tmp_path: Path, registry: str
) -> None:
    """The master is alive and renews its lease: a promotion of its slave is refused, naming the
    master and when its lease would end; forced, it goes through and the old master is fenced."""
    master, slave = start_pair(tmp_path, registry)
    try:
        wait_until(lambda: ha(slave)["master_lease_left_ms"] is not None, what="the slave to read the record")
        refused = httpx.post(f"{slave.url}/v1/admin/ha/promote", timeout=30)
        assert refused.status_code == 409, refused.text
        answer = refused.json()
        assert answer["error_code"] == 40941 and answer["master_url"] == master.url, answer
        assert 0 < answer["lease_ends_in_ms"] <= FAILOVER_S * 1000, answer
        assert f"the master {master.url} of broker-ha is alive" in answer["message"], answer
        # Nothing changed: the slave is still one, in epoch 0.
        assert ha(slave)["role"] == "SLAVE" and registry_row(registry, "epoch") == 0
        assert ha(slave)["master_alive"]

        forced = httpx.post(f"{slave.url}/v1/admin/ha/promote", params={"force": "true"}, timeout=30)
        assert forced.status_code == 200, forced.text
        assert (forced.json()["role"], forced.json()["epoch"]) == ("ASYNC_MASTER", 1)
        wait_until(lambda: ha(master)["role"] == "SLAVE", what="the old master to be fenced")
    finally:
        slave.kill()
        master.kill()


def test_a_promoted_slave_takes_writes_and_the_old_master_rejoins_cutting_what_it_alone_had(
    tmp_path: Path, registry: str
) -> None:
    master, slave = start_pair(tmp_path, registry)
    try:
        assert statuses(produce(master, [f"shared-{n}" for n in range(40)])) == {"SEND_OK"}
        wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
        # The slave is down; the master takes more that the slave never sees, then dies too.
        slave.kill()
        assert statuses(produce(master, [f"lost-{n}" for n in range(25)])) == {"SEND_OK"}
        master.kill()
        slave.start()

        # The restarted slave counts the master alive until it has seen its lease stand still.
        wait_until(lambda: not ha(slave)["master_alive"], what="the dead master's lease to end")
        promoted = httpx.post(f"{slave.url}/v1/admin/ha/promote", timeout=30)
        assert promoted.status_code == 200, promoted.text
        assert (promoted.json()["role"], promoted.json()["epoch"]) == ("ASYNC_MASTER", 1)
        assert (registry_row(registry, "epoch"), registry_row(registry, "master_url")) == (1, slave.url)
        assert statuses(produce(slave, [f"new-{n}" for n in range(30)])) == {"SEND_OK"}
        again = httpx.post(f"{slave.url}/v1/admin/ha/promote", timeout=30)
        assert again.status_code == 409 and again.json()["error_code"] == 40940, again.text

        # The old master comes back with its configuration unchanged: it follows the new one.
        master.start()
        assert ha(master)["role"] == "SLAVE"
        # Its log takes the new epoch once it has reached the new master (and cut what it alone had).
        wait_until(lambda: ha(master)["epoch"] == 1, what="the old master to follow the new one")
        refused = produce(master, ["to the old master"])
        assert refused.status_code == 421 and refused.json()["brokers"] == [slave.url], refused.text
        wait_until(lambda: caught_up(slave, master), what="the old master to converge")
        assert commitlog_bytes(master.store_dir) == commitlog_bytes(slave.store_dir)
        bodies = pulled_bodies(master)
        assert not [body for body in bodies if body.startswith("lost-")]
        assert len(bodies) == 70 and bodies == pulled_bodies(slave)
        wait_until(
            lambda: route_addresses(slave) == {"0": slave.url, "1": master.url},
            what="the route to list the new master as id 0 and the old one as id 1",
        )
    finally:
        slave.kill()
        master.kill()


def test_a_sync_master_killed_under_load_loses_no_send_ok_and_its_slave_takes_over(
    tmp_path: Path, registry: str
) -> None:
    master, slave = start_pair(tmp_path, registry, "SYNC_MASTER", ha_auto_failover="true")
    acknowledged: list[str] = []
    stop = threading.Event()

    def load() -> None:
        number = 0
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                bodies = [f"m-{number}-{i}" for i in range(10)]
                number += 1
                try:
                    response = client.post(
                        f"{master.url}/v1/topics/{TOPIC}/messages",
                        json={"messages": [{"body": body} for body in bodies]},
                    )
                except httpx.TransportError:
                    return
                if response.status_code == 200:
                    results = response.json()["results"]
                    acknowledged.extend(
                        b for b, r in zip(bodies, results, strict=True) if r["status"] == "SEND_OK"
                    )

    try:
        producer = threading.Thread(target=load)
        producer.start()
        wait_until(lambda: len(acknowledged) >= 200, what="SEND_OK answers under load")
        threading.Event().wait(random.uniform(0.0, 1.0))
        master.kill()
        stop.set()
        producer.join()
        wait_until(
            lambda: ha(slave)["role"] == "SYNC_MASTER", timeout_s=FAILOVER_S * 10, what="the promotion"
        )
        assert ha(slave)["epoch"] == 1
        held = set(pulled_bodies(slave))
        assert set(acknowledged) <= held, f"{len(set(acknowledged) - held)} SEND_OK messages lost"
        # The new master has no slave: it stores and says so.
        assert statuses(produce(slave, ["after the failover"])) == {"SLAVE_NOT_AVAILABLE"}
    finally:
        stop.set()
        slave.kill()
        master.kill()


def test_a_slave_that_is_not_in_sync_is_never_promoted(tmp_path: Path, registry: str) -> None:
    master, slave = start_pair(tmp_path, registry, ha_auto_failover="true")
    try:
        slave.kill()
        assert statuses(produce(master, ["the slave never holds this"])) == {"SEND_OK"}
        confirmed = ha(master)["confirmed_offset"]
        assert confirmed > 0
        # The master reports what it confirmed with its next lease renewal.
        wait_until(lambda: registry_row(registry, "confirmed_offset") == confirmed, what="the confirmation")
        master.kill()
        slave.start()
        wait_until(
            lambda: "is not in sync and is not promoted" in slave.log(),
            timeout_s=FAILOVER_S * 10,
            what="the slave to refuse promotion",
        )
        assert ha(slave)["role"] == "SLAVE"
        assert registry_row(registry, "epoch") == 0
        assert produce(slave, ["refused"]).status_code == 421
    finally:
        slave.kill()
        master.kill()


def test_a_master_cut_off_past_its_lease_takes_no_writes_then_steps_down(
    tmp_path: Path, registry: str
) -> None:
    """The master reaches the registry through a proxy: stopped (SIGSTOP) and cut off from the
    registry, it cannot know of the promotion, and its lapsed lease alone refuses the write."""
    proxy, through_proxy = registry_proxy(registry)
    master = broker(tmp_path, through_proxy, "a", 0, ha_auto_failover="true", database_timeout_s=1).start()
    slave = broker(tmp_path, registry, "b", 1, broker_role="SLAVE", ha_auto_failover="true").start()
    try:
        assert (
            httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES}).status_code == 201
        )
        assert statuses(produce(master, ["before"])) == {"SEND_OK"}
        wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
        assert master.process is not None
        os.kill(master.process.pid, signal.SIGSTOP)  # alive, but silent
        try:
            wait_until(
                lambda: ha(slave)["role"] == "ASYNC_MASTER", timeout_s=FAILOVER_S * 10, what="the promotion"
            )
            proxy.stop()
        finally:
            os.kill(master.process.pid, signal.SIGCONT)
        refused = produce(master, ["to the fenced master"])
        assert refused.status_code == 421, refused.text
        assert "lease" in refused.json()["message"]
        assert ha(master)["role"] == "ASYNC_MASTER"  # it cannot know yet that it was replaced

        proxy.start()
        wait_until(lambda: ha(master)["role"] == "SLAVE", what="the old master to step down")
        # Its epoch log takes the new master's once it connects and the two logs agree.
        wait_until(lambda: ha(master)["epoch"] == 1, what="the old master to take the new epoch")
        assert statuses(produce(slave, ["after"])) == {"SEND_OK"}
        wait_until(lambda: caught_up(slave, master), what="the old master to follow the new one")
        assert pulled_bodies(master) == ["after", "before"]
    finally:
        slave.kill()
        master.kill()
        proxy.close()


def replicate_then_kill_the_master(master: BrokerProcess, slave: BrokerProcess, prefix: str) -> list[str]:
    """Store 30 messages, wait until the slave holds them and the route lists it, kill the master;
    the bodies sent."""
    sent = [f"{prefix}-{n}" for n in range(30)]
    assert statuses(produce(master, sent)) == {"SEND_OK"}
    wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
    wait_until(lambda: "1" in route_addresses(master), what="the slave in the route")
    master.kill()
    return sent


def test_with_its_master_down_a_consumer_reads_from_the_slave_and_its_commits_reach_the_master_later(
    tmp_path: Path, registry: str
) -> None:
    master, slave = start_pair(tmp_path, registry)
    try:
        sent = replicate_then_kill_the_master(master, slave, "m")

        received: list[str] = []
        with PullConsumer(
            [master.url, slave.url], TOPIC, "readers", start="first", max_wait_ms=200
        ) as consumer:
            deadline = time.monotonic() + 30
            while len(received) < len(sent) and time.monotonic() < deadline:
                consumed = consumer.poll(0.5)
                if consumed is not None:
                    received.append(consumed.body.decode())
            consumer.commit(strict=True)  # the master is down: the slave keeps the offsets
        assert sorted(received) == sorted(sent)
        assert sum(committed(slave, "readers").values()) == len(sent)

        master.start()
        wait_until(
            lambda: sum(committed(master, "readers").values()) == len(sent),
            what="the offsets to reach the master",
        )
    finally:
        slave.kill()
        master.kill()


def committed(broker_process: BrokerProcess, group: str) -> dict[int, int]:
    answer = httpx.get(f"{broker_process.url}/v1/groups/{group}/offsets", params={"topic": TOPIC}).json()
    return {row["queue_id"]: row["committed_offset"] or 0 for row in answer["offsets"]}


def test_with_its_master_down_the_spark_source_plans_and_reads_from_the_slave(
    tmp_path: Path, registry: str
) -> None:
    master, slave = start_pair(tmp_path, registry)
    try:
        sent = replicate_then_kill_the_master(master, slave, "row")

        options = ReadOptions.parse({"url": f"{master.url},{slave.url}", "topic": TOPIC})
        with QueueClient(backoff_s=0.01) as client:
            states = discover(client, options)
        assert {state.ref.address for state in states} == {master.url}  # the route's reader
        ranges = plan_ranges(
            TOPIC,
            {state.ref: state.min_offset for state in states},
            {state.ref: state.max_offset for state in states},
        )
        bodies = [
            body.decode()
            for piece in ranges
            for batch in read_range(piece, options, SCHEMA, None)
            for body in batch.column("body").to_pylist()
        ]
        assert sorted(bodies) == sorted(sent)
    finally:
        slave.kill()
        master.kill()


def test_of_two_slaves_the_one_that_holds_every_send_ok_is_promoted(tmp_path: Path, registry: str) -> None:
    """The master's last SEND_OK answers never reach the registry (its connection to it is cut),
    and only slave 1 holds them; slave 2, restarted after they were given, acts first, but defers
    to slave 1, whose report is further ahead."""
    proxy, through_proxy = registry_proxy(registry)
    master = broker(tmp_path, through_proxy, "a", 0, broker_role="SYNC_MASTER").start()
    # Slave 1 waits 30 s before acting, slave 2 FAILOVER_S once it is back: slave 2, restarted after
    # the master's death, acts first however slowly a loaded machine restarts it.
    ahead = broker(tmp_path, registry, "b", 1, broker_role="SLAVE", ha_auto_failover="true", ha_failover_s=30)
    behind = broker(tmp_path, registry, "c", 2, broker_role="SLAVE", ha_auto_failover="true")
    ahead.start()
    behind.start()
    try:
        assert (
            httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES}).status_code == 201
        )
        wait_until(lambda: len(ha(master)["slaves"]) == 2, what="both slaves to connect")
        assert statuses(produce(master, ["both hold this"])) == {"SEND_OK"}
        wait_until(lambda: caught_up(master, behind), what="slave 2 to catch up")
        behind.kill()
        proxy.stop()  # what the master confirms from now on never reaches the registry
        last = [f"only slave 1 holds this {n}" for n in range(5)]
        assert statuses(produce(master, last)) == {"SEND_OK"}
        master.kill()
        behind.start()

        wait_until(lambda: ha(ahead)["role"] == "SYNC_MASTER", timeout_s=120, what="slave 1's promotion")
        assert ha(behind)["role"] == "SLAVE"
        assert "slave 1 is further ahead" in behind.log()
        assert set(last) <= set(pulled_bodies(ahead))
        wait_until(lambda: caught_up(ahead, behind), what="slave 2 to follow the new master")
        assert set(last) <= set(pulled_bodies(behind))
    finally:
        for process in (behind, ahead, master):
            process.kill()
        proxy.close()


def test_two_slaves_promoted_at_once_one_wins_and_the_other_is_refused_in_time(
    tmp_path: Path, registry: str
) -> None:
    """The master is killed and both slaves are asked to promote at the same instant: the registry's
    compare-and-set lets one win; the other's request is answered 409 within the registry's timeout
    (a promotion must not wait on its own replication task), and it follows the winner."""
    master = broker(tmp_path, registry, "a", 0, broker_role="SYNC_MASTER").start()
    first = broker(tmp_path, registry, "b", 1, broker_role="SLAVE").start()
    second = broker(tmp_path, registry, "c", 2, broker_role="SLAVE").start()
    try:
        assert (
            httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES}).status_code == 201
        )
        wait_until(lambda: len(ha(master)["slaves"]) == 2, what="both slaves to connect")
        assert statuses(produce(master, ["before the race"])) == {"SEND_OK"}
        wait_until(lambda: caught_up(master, first) and caught_up(master, second), what="both to catch up")
        master.kill()
        answers: dict[int, httpx.Response | BaseException] = {}
        start = threading.Barrier(2)

        def promote(number: int, slave: BrokerProcess) -> None:
            start.wait()
            try:
                # Forced: the race is the subject, not the lease, which is still current.
                answers[number] = httpx.post(
                    f"{slave.url}/v1/admin/ha/promote", params={"force": "true"}, timeout=20
                )
            except httpx.HTTPError as error:
                answers[number] = error

        threads = [threading.Thread(target=promote, args=pair) for pair in ((1, first), (2, second))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        codes = sorted(  # a request that failed shows its error (as text, to sort with the codes)
            str(answer.status_code) if isinstance(answer, httpx.Response) else repr(answer)
            for answer in answers.values()
        )
        assert codes == ["200", "409"], (codes, first.log()[-2000:], second.log()[-2000:])
        # The loser went through the compare-and-set with the epoch it knew, not the "already master"
        # branch: the registry refused it.
        (refused,) = [a for a in answers.values() if isinstance(a, httpx.Response) and a.status_code == 409]
        assert "promoted after epoch 0" in refused.text, refused.text
        winner, loser = (first, second) if ha(first)["role"] != "SLAVE" else (second, first)
        assert ha(loser)["role"] == "SLAVE"
        assert registry_row(registry, "epoch") == 1
        wait_until(lambda: caught_up(winner, loser), what="the other slave to follow the winner")
    finally:
        for process in (second, first, master):
            process.kill()
