"""A group's committed offset across a failover that cut messages the group had consumed: the new
master stores other messages at those queue offsets, and the group must read them (the nemesis
run found acknowledged messages skipped this way: a former master's offsets, past what it alone
had, reached the new master)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.broker import ha_metadata
from app.broker.ha_slave import HaSlave
from app.outbound.http import HttpOutbound
from app.store import MessageStore, StoreConfig
from tests.api.server import BrokerProcess
from tests.ha.replicas import TOPIC, caught_up, ha
from tests.ha.test_failover import broker, registry, registry_proxy, start_pair  # noqa: F401 - a fixture
from tests.routing.proxy import TcpProxy
from tests.small_disk import fill, mounted_tmpfs
from tests.transactions.transacting import wait_until


def send(url: str, bodies: list[str]) -> None:
    messages = [{"body": body, "queue_id": 0} for body in bodies]
    response = httpx.post(f"{url}/v1/topics/{TOPIC}/messages", json={"messages": messages}, timeout=30)
    assert response.status_code == 200, response.text
    assert {result["status"] for result in response.json()["results"]} == {"SEND_OK"}


def committed(url: str, group: str) -> int | None:
    answer = httpx.get(f"{url}/v1/groups/{group}/offsets", params={"topic": TOPIC}).json()
    return {row["queue_id"]: row["committed_offset"] for row in answer["offsets"]}.get(0)


def read_from_committed(url: str, group: str) -> list[str]:
    response = httpx.get(
        f"{url}/v1/topics/{TOPIC}/queues/0/messages", params={"group": group, "max_messages": 100}
    )
    assert response.status_code == 200, response.text
    return [message["body"] for message in response.json()["messages"]]


def fail_over(proxy: TcpProxy, master: BrokerProcess, slave: BrokerProcess, new: list[str]) -> None:
    """The master, stopped (the restarted slave copies nothing more from it) and cut off from the
    registry (it can neither renew its lease nor learn of the promotion), is replaced by its slave,
    which stores ``new``; healed, it steps down, cuts what only it had and follows the new master."""
    assert master.process is not None
    os.kill(master.process.pid, signal.SIGSTOP)
    try:
        proxy.stop()
        slave.start()
        wait_until(lambda: not ha(slave)["master_alive"], what="the master's lease to end")
        promoted = httpx.post(f"{slave.url}/v1/admin/ha/promote", timeout=30)
        assert promoted.status_code == 200, promoted.text
    finally:
        os.kill(master.process.pid, signal.SIGCONT)
    send(slave.url, new)
    proxy.start()
    wait_until(lambda: ha(master)["role"] == "SLAVE", what="the old master to step down")
    wait_until(lambda: caught_up(slave, master), what="the old master to follow the new one")


def test_a_former_master_does_not_hand_the_new_master_offsets_past_what_they_share(
    tmp_path: Path,
    registry: str,  # noqa: F811
) -> None:
    master, slave = start_pair(tmp_path, registry)
    try:
        send(master.url, [f"shared-{n}" for n in range(4)])
        wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
        slave.kill()
        # The master alone stores three more; a group consumes them and commits past them.
        send(master.url, [f"alone-{n}" for n in range(3)])
        commit = {"offsets": [{"topic": TOPIC, "queue_id": 0, "offset": 7}]}
        assert httpx.put(f"{master.url}/v1/groups/billing/offsets", json=commit).status_code == 200
        master.stop()  # a graceful stop: the offset is on its disk

        slave.start()
        wait_until(lambda: not ha(slave)["master_alive"], what="the stopped master's lease to end")
        promoted = httpx.post(f"{slave.url}/v1/admin/ha/promote", timeout=30)
        assert promoted.status_code == 200, promoted.text
        send(slave.url, [f"new-{n}" for n in range(3)])  # queue offsets 4..6, as the lost ones had

        master.start()  # follows the new master, cuts its own tail, hands over its offsets
        wait_until(
            lambda: ha(master)["connected"] and caught_up(slave, master), what="the old master to follow"
        )
        wait_until(lambda: committed(slave.url, "billing") is not None, what="the offsets to be handed over")
        assert committed(slave.url, "billing") == 4
        assert committed(master.url, "billing") == 4
        assert read_from_committed(slave.url, "billing") == ["new-0", "new-1", "new-2"]
    finally:
        slave.kill()
        master.kill()


def test_a_slave_following_a_new_master_hands_over_no_offset_past_its_own_log(
    tmp_path: Path,
    registry: str,  # noqa: F811
) -> None:
    """A second slave whose disk is full may copy the master's offsets (metadata) but not the
    messages they pass (its log): once it follows the promoted slave, whose queue stores new
    messages at those offsets, it must not hand them over (the nemesis run found an ordered group
    skipping acknowledged messages this way, behind the slave whose tmpfs it fills)."""
    master, slave = start_pair(tmp_path, registry)
    try:
        with mounted_tmpfs(tmp_path / "disk", 192) as disk:
            # Disk allocated 64 KiB ahead of its writer: a full disk stops its copy of the log at once.
            second = broker(disk, registry, "c", 2, broker_role="SLAVE", commitlog_chunk_size=64 << 10)
            second.log_path = tmp_path / "second.log"  # not on the disk that fills
            second.start()
            filler: Path | None = None
            try:
                wait_until(lambda: ha(second)["connected"], what="the second slave to connect")
                send(master.url, [f"shared-{n}" for n in range(4)])
                wait_until(lambda: caught_up(master, slave) and caught_up(master, second), what="both slaves")
                filler = fill(disk, 64 << 10)
                slave.stop()
                # Stored by the master alone; a group consumes them and commits past them, and the
                # second slave copies that offset without the messages.
                send(master.url, [f"gone-{n}-" + "x" * (256 << 10) for n in range(4)])  # past the free 64 KiB
                commit = {"offsets": [{"topic": TOPIC, "queue_id": 0, "offset": 8}]}
                assert httpx.put(f"{master.url}/v1/groups/billing/offsets", json=commit).status_code == 200
                # It copies a master's offsets only while its log follows that master: between the
                # refused chunks here. Left alone long enough for a few metadata rounds (300 ms each).
                deadline = time.monotonic() + 5
                while committed(second.url, "billing") != 8 and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert ha(second)["commitlog_max_offset"] < ha(master)["commitlog_max_offset"]
                master.kill()

                slave.start()
                wait_until(lambda: not ha(slave)["master_alive"], what="the killed master's lease to end")
                promoted = httpx.post(f"{slave.url}/v1/admin/ha/promote", timeout=30)
                assert promoted.status_code == 200, promoted.text
                send(slave.url, [f"new-{n}" for n in range(6)])  # queue offsets 4..9: past 8

                filler.unlink()
                wait_until(
                    lambda: ha(second)["connected"] and caught_up(slave, second), what="the second slave"
                )
                # Two metadata rounds after it follows the new master: its offsets ahead went over.
                for offset in (1, 2):
                    commit = {"offsets": [{"topic": TOPIC, "queue_id": 0, "offset": offset}]}
                    assert httpx.put(f"{slave.url}/v1/groups/audit/offsets", json=commit).status_code == 200
                    wait_until(
                        lambda offset=offset: committed(second.url, "audit") == offset,
                        what="the second slave to follow",
                    )
                assert committed(slave.url, "billing") in (None, 4)
                assert committed(second.url, "billing") in (None, 4)
            finally:
                second.kill()
                if filler is not None:
                    filler.unlink(missing_ok=True)
    finally:
        slave.kill()
        master.kill()


def follow(store: MessageStore, replicate_from: str, metadata_from: str, rounds: int) -> list[str]:
    """Run a slave on ``store`` whose log follows ``replicate_from`` while its metadata comes from
    ``metadata_from`` (a former master that still answers, as in a failover's first seconds), for
    ``rounds`` metadata answers; the groups whose offsets it was handed."""

    async def scenario() -> list[str]:
        handed: list[str] = []

        async def apply(answer: dict[str, Any]) -> None:
            handed.extend(entry["group"] for entry in answer["offsets"])
            await asyncio.to_thread(ha_metadata.apply_offsets, store, answer["offsets"])
            applied.set()

        async def find_master() -> str:
            task = asyncio.current_task()
            return metadata_from if task is not None and task.get_name() == "ha-metadata" else replicate_from

        applied = asyncio.Event()
        slave = HaSlave(store, find_master, 7, "http://127.0.0.1:9", apply, 200, link=HttpOutbound())
        slave.start()
        try:
            async with asyncio.timeout(30):
                while slave.following != replicate_from:
                    await asyncio.sleep(0.05)
                for _ in range(rounds):  # answered after the log follows its master
                    applied.clear()
                    await applied.wait()
        finally:
            await slave.stop()
        return handed

    return asyncio.run(scenario())


def test_a_slave_takes_offsets_only_from_the_master_its_log_follows(
    tmp_path: Path,
    registry: str,  # noqa: F811
) -> None:
    """Offsets answered by another master than the one the log follows (a fenced former master,
    still answering) may cover messages only it stored: the slave must not take them."""
    first = broker(tmp_path, registry, "a", 0, broker_role="ASYNC_MASTER").start()
    other = broker(tmp_path, registry, "x", 0, broker_role="ASYNC_MASTER", broker_name="broker-other").start()
    store = MessageStore(
        StoreConfig(
            store_dir=tmp_path / "slave",
            commitlog_file_size=1024 * 1024,  # as the brokers' (tests.api.server.BrokerProcess)
            consumequeue_file_entries=1000,
            max_hash_slots=16384,
            max_index_count=65536,
        )
    ).open()
    store.replica = True
    try:
        for master, group in ((first, "audit"), (other, "billing")):
            response = httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": 1})
            assert response.status_code == 201, response.text
            send(master.url, [f"{group}-{n}" for n in range(4)])
            commit = {"offsets": [{"topic": TOPIC, "queue_id": 0, "offset": 3}]}
            assert httpx.put(f"{master.url}/v1/groups/{group}/offsets", json=commit).status_code == 200

        assert follow(store, first.url, other.url, rounds=3) == []
        assert store.consumer_offsets.committed("billing", TOPIC, 0) < 0
        assert store.max_offset(TOPIC, 0) == 4  # the log followed its master meanwhile
        # The same slave, its metadata from the master its log follows: offsets are taken.
        assert "audit" in follow(store, first.url, first.url, rounds=2)
        assert store.consumer_offsets.committed("audit", TOPIC, 0) == 3
    finally:
        store.close()
        other.kill()
        first.kill()


def test_a_stopped_slave_has_written_the_offsets_it_was_applying(
    tmp_path: Path,
    registry: str,  # noqa: F811
) -> None:
    """A promotion stops the slave, then lowers every offset past its log's end: offsets from a
    metadata answer still being written in a thread when the slave was stopped must be written
    before the stop returns, or they land after the lowering and skip what the new master then
    stores at those queue offsets."""
    master = broker(tmp_path, registry, "a", 0, broker_role="ASYNC_MASTER").start()
    store = MessageStore(StoreConfig(store_dir=tmp_path / "slave")).open()
    store.replica = True
    written = threading.Event()

    def write_offsets(entered: threading.Event) -> None:
        entered.set()
        time.sleep(0.5)  # a slow disk, or many groups
        written.set()

    async def scenario() -> bool:
        entered = threading.Event()

        async def apply(answer: dict[str, Any]) -> None:
            await asyncio.to_thread(write_offsets, entered)

        async def find_master() -> str:
            return master.url

        slave = HaSlave(store, find_master, 7, "http://127.0.0.1:9", apply, 200, link=HttpOutbound())
        slave.start()
        try:
            await asyncio.wait_for(asyncio.to_thread(entered.wait, 30), 31)
        finally:
            await slave.stop()
        return written.is_set()

    try:
        assert asyncio.run(scenario()), "the slave stopped while its metadata answer was still being written"
    finally:
        store.close()
        master.kill()


@pytest.mark.parametrize("consume_mode", ["concurrently", "orderly"])
def test_a_commit_for_messages_a_former_master_cut_is_refused_after_the_cut(
    tmp_path: Path,
    registry: str,  # noqa: F811
    consume_mode: str,
) -> None:
    """A member read messages only the master stored; the master was replaced, cut them and copied
    the new master's messages to the same queue offsets; the member's commit of what it read,
    arriving only now, must be refused (its generation read the cut log): taken, it would pass the
    new messages and reach the new master as an offset ahead of its own. An ordered member still
    holds its queue's lock (the new master has it too): the lock alone does not refuse it."""
    proxy, through_proxy = registry_proxy(registry)
    master = broker(tmp_path, through_proxy, "a", 0, broker_role="ASYNC_MASTER", database_timeout_s=1).start()
    slave = broker(tmp_path, registry, "b", 1, broker_role="SLAVE").start()
    try:
        response = httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": 1})
        assert response.status_code == 201, response.text
        wait_until(lambda: ha(slave)["connected"], what="the slave to connect")
        # Joined while the slave follows, so that it has the group's retry topic too: the group's
        # queues are the same on both, and nothing but the cut can move its generation.
        join = {
            "client_id": "m1",
            "subscriptions": {TOPIC: "*"},
            "consume_from": "first",
            "consume_mode": consume_mode,
        }
        assert httpx.post(f"{master.url}/v1/groups/billing/heartbeat", json=join).status_code == 200
        if consume_mode == "orderly":
            locked = {"client_id": "m1", "queues": [{"topic": TOPIC, "queue_id": 0}]}
            assert len(httpx.post(f"{master.url}/v1/groups/billing/locks", json=locked).json()["queues"]) == 1
        send(master.url, [f"shared-{n}" for n in range(4)])
        wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
        wait_until(lambda: committed(slave.url, "billing") == 0, what="the slave to take the group's offset")
        slave.kill()
        send(master.url, [f"alone-{n}" for n in range(3)])  # queue offsets 4..6, on the master alone

        pulled = httpx.get(
            f"{master.url}/v1/groups/billing/messages", params={"client_id": "m1", "max_messages": 100}
        ).json()
        assert len(pulled["messages"]) == 7
        [read] = pulled["offsets"]
        assert read["next_offset"] == 7

        fail_over(proxy, master, slave, [f"new-{n}" for n in range(6)])  # queue offsets 4..9

        commit = {
            "client_id": "m1",
            "generation": pulled["generation"],
            "offsets": [{"topic": TOPIC, "queue_id": 0, "offset": read["next_offset"]}],
        }
        late = httpx.put(f"{master.url}/v1/groups/billing/offsets", json=commit)
        assert late.status_code == 409, late.text
        assert "cut" in late.json()["message"]
        # Two metadata rounds: anything it took would have reached the new master.
        time.sleep(1.0)
        assert (committed(slave.url, "billing") or 0) <= 4
    finally:
        slave.kill()
        master.kill()
        proxy.close()
