"""A group's committed offset across a failover that cut messages the group had consumed: the new
master stores other messages at those queue offsets, and the group must read them (the nemesis
run found acknowledged messages skipped this way: a former master's offsets, past what it alone
had, reached the new master)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.ha.replicas import TOPIC, caught_up, ha
from tests.ha.test_failover import registry, start_pair  # noqa: F401 - a fixture
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
