"""Replication end to end: a master and a slave as real broker processes."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.acl_setup import ADMIN, acl_broker
from tests.api.server import BrokerProcess
from tests.ha.replicas import (
    QUEUES,
    TOPIC,
    caught_up,
    commitlog_bytes,
    ha,
    produce,
    pulled_bodies,
    topic_config,
)
from tests.transactions.transacting import wait_until

# How long a slave's metadata request waits for a change before it copies the offsets again.
METADATA_INTERVAL_MS = 300


def make_slave(
    tmp_path: Path, master: BrokerProcess, name: str = "slave", **settings: object
) -> BrokerProcess:
    return BrokerProcess(
        tmp_path / name,
        broker_role="SLAVE",
        broker_id=1,
        ha_master_url=master.url,
        ha_metadata_interval_ms=METADATA_INTERVAL_MS,
        **settings,
    )


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    master = BrokerProcess(tmp_path / "master").start()
    slave = make_slave(tmp_path, master).start()
    try:
        response = httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES})
        assert response.status_code == 201, response.text
        wait_until(lambda: topic_config(slave, TOPIC), what="the topic to reach the slave")
        yield master, slave
    finally:
        slave.kill()
        master.kill()


def test_the_slave_holds_the_masters_commitlog_byte_for_byte(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    master, slave = pair
    bodies = [f"message-{number}-".ljust(3000, "x") for number in range(600)]  # rolls 1 MB segments
    for start in range(0, len(bodies), 100):
        response = produce(master, bodies[start : start + 100])
        assert response.status_code == 200, response.text
    wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
    assert pulled_bodies(slave) == sorted(bodies)
    master_log, slave_log = commitlog_bytes(master.store_dir), commitlog_bytes(slave.store_dir)
    assert len(master_log) > 1
    assert slave_log == master_log

    state = wait_until(
        lambda: (s := ha(master))["slaves"] and s["slaves"][0]["lag_bytes"] == 0 and s, what="the ack"
    )
    assert state["role"] == "ASYNC_MASTER"
    assert state["slaves"] == [
        {
            "url": slave.url,
            "broker_id": 1,
            "acked_offset": state["commitlog_max_offset"],
            "lag_bytes": 0,
            "lag_ms": 0,
            "in_sync": True,
        }
    ]
    slave_state = ha(slave)
    assert slave_state["role"] == "SLAVE"
    assert slave_state["master_url"] == master.url
    assert slave_state["broker_id"] == 1


def test_a_stopped_slaves_lag_in_time_is_the_age_of_the_oldest_record_it_lacks(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    master, slave = pair
    wait_until(lambda: ha(master)["slaves"], what="the slave to connect")
    assert slave.process is not None
    os.kill(slave.process.pid, signal.SIGSTOP)  # it stops acknowledging
    try:
        first = produce(master, ["the first it lacks"]).json()["results"][0]
        stored_ms = httpx.get(f"{master.url}/v1/messages/{first['msg_id']}").json()["store_timestamp"]
        produce(master, ["a later one"])

        def lag() -> tuple[int, int, int]:
            before = int(time.time() * 1000)
            answer = ha(master)["slaves"][0]["lag_ms"]
            return before, answer, int(time.time() * 1000)

        # It grows with the time since the first message it lacks was stored, not since the last.
        before, lag_ms, after = wait_until(lambda: (found := lag())[1] >= 1000 and found, what="the lag")
        assert before - stored_ms <= lag_ms <= after - stored_ms
    finally:
        os.kill(slave.process.pid, signal.SIGCONT)
    wait_until(lambda: ha(master)["slaves"][0]["lag_ms"] == 0, what="the slave to catch up")


def test_a_slave_refuses_produce_naming_its_master(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    master, slave = pair
    wait_until(lambda: ha(slave)["connected"], what="the slave to connect")
    response = produce(slave, ["not here"])
    assert response.status_code == 421, response.text
    assert response.headers["location"] == master.url
    assert response.json()["brokers"] == [master.url]


def test_a_slave_appends_nothing_of_its_own(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    """Writes other than produce (a transaction's half message, a send-back to the retry topic)
    are refused too: the slave's CommitLog stays its master's."""
    master, slave = pair
    assert produce(master, ["one"]).status_code == 200
    wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
    before = ha(slave)["commitlog_max_offset"]

    begin = httpx.post(
        f"{slave.url}/v1/topics/{TOPIC}/messages",
        params={"transaction": "begin", "producer_group": "shop"},
        json={"body": "half"},
    )
    retry = httpx.post(
        f"{slave.url}/v1/groups/readers/retry", json={"topic": TOPIC, "queue_id": 0, "offset": 0}
    )

    assert (begin.status_code, begin.json()["error_code"]) == (421, 42101), begin.text
    assert (retry.status_code, retry.json()["error_code"]) == (421, 42101), retry.text
    assert ha(slave)["commitlog_max_offset"] == before
    assert produce(master, ["two"]).status_code == 200  # and replication goes on
    wait_until(lambda: caught_up(master, slave), what="the slave to catch up")


def test_a_killed_slave_catches_up_after_its_restart(
    tmp_path: Path, pair: tuple[BrokerProcess, BrokerProcess]
) -> None:
    master, slave = pair
    assert produce(master, [f"before-{number}" for number in range(50)]).status_code == 200
    wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
    slave.kill()
    after = [f"after-{number}".ljust(2000, "y") for number in range(800)]
    for start in range(0, len(after), 200):
        assert produce(master, after[start : start + 200]).status_code == 200
    slave.start()
    wait_until(lambda: caught_up(master, slave), what="the restarted slave to catch up")
    assert pulled_bodies(slave) == pulled_bodies(master)
    assert commitlog_bytes(slave.store_dir) == commitlog_bytes(master.store_dir)


def test_a_sync_master_answers_after_its_slave_holds_the_message(tmp_path: Path) -> None:
    master = BrokerProcess(tmp_path / "master", broker_role="SYNC_MASTER", ha_sync_timeout_ms=1000).start()
    slave = make_slave(tmp_path, master)
    try:
        httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES})
        answer = produce(master, ["alone"])
        assert [result["status"] for result in answer.json()["results"]] == ["SLAVE_NOT_AVAILABLE"]

        slave.start()
        wait_until(lambda: ha(master)["slaves"], what="the slave to connect")
        answer = produce(master, ["held", "by", "the slave"])
        assert {result["status"] for result in answer.json()["results"]} == {"SEND_OK"}
        assert ha(slave)["commitlog_max_offset"] >= ha(master)["commitlog_max_offset"]

        assert slave.process is not None
        os.kill(slave.process.pid, signal.SIGSTOP)
        try:
            answer = produce(master, ["while stopped"])
            assert [result["status"] for result in answer.json()["results"]] == ["FLUSH_SLAVE_TIMEOUT"]
        finally:
            os.kill(slave.process.pid, signal.SIGCONT)
        wait_until(lambda: caught_up(master, slave), what="the resumed slave to catch up")
        answer = produce(master, ["again"])
        assert [result["status"] for result in answer.json()["results"]] == ["SEND_OK"]
    finally:
        slave.kill()
        master.kill()


def test_topics_follow_the_master_and_a_slave_refuses_to_change_them(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    master, slave = pair
    created = httpx.post(f"{master.url}/v1/topics", json={"name": "later", "queues": 3, "order": True})
    assert created.status_code == 201, created.text
    copied = wait_until(lambda: topic_config(slave, "later"), what="the new topic to reach the slave")
    assert copied == topic_config(master, "later")

    changed = httpx.put(
        f"{master.url}/v1/topics/later", json={"read_queues": 5, "write_queues": 2, "perm": 4}
    )
    assert changed.status_code == 200, changed.text
    wait_until(
        lambda: topic_config(slave, "later") == changed.json(), what="the topic's change to reach the slave"
    )

    refused_create = httpx.post(f"{slave.url}/v1/topics", json={"name": "mine", "queues": 1})
    refused_delete = httpx.delete(f"{slave.url}/v1/topics/later")
    refused_change = httpx.put(f"{slave.url}/v1/topics/later", json={"queues": 1})
    for refused in (refused_create, refused_delete, refused_change):
        assert (refused.status_code, refused.json()["error_code"]) == (421, 42101), refused.text
        assert refused.headers["location"] == master.url
    assert topic_config(slave, "mine") is None and topic_config(slave, "later") is not None

    assert httpx.delete(f"{master.url}/v1/topics/later").status_code in (200, 204)
    wait_until(lambda: topic_config(slave, "later") is None, what="the deletion to reach the slave")


def committed(broker: BrokerProcess, group: str) -> dict[int, int | None]:
    answer = httpx.get(f"{broker.url}/v1/groups/{group}/offsets", params={"topic": TOPIC}).json()
    return {row["queue_id"]: row["committed_offset"] for row in answer["offsets"]}


def commit(broker: BrokerProcess, group: str, offset: int) -> None:
    body = {"offsets": [{"topic": TOPIC, "queue_id": 0, "offset": offset}]}
    response = httpx.put(f"{broker.url}/v1/groups/{group}/offsets", json=body)
    assert response.status_code == 200, response.text


def test_offsets_follow_the_master_and_the_greater_offset_wins(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    master, slave = pair
    assert produce(master, [f"m{number}" for number in range(12)]).status_code == 200
    wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
    commit(master, "billing", 3)
    wait_until(lambda: committed(slave, "billing").get(0) == 3, what="the offset to reach the slave")

    # Committed on the slave (a consumer that read there while the master was away): kept, not
    # moved back by the master's older offset.
    commit(slave, "billing", 5)
    commit(master, "billing", 4)
    commit(master, "other", 2)
    wait_until(lambda: committed(slave, "other").get(0) == 2, what="a later offset to reach the slave")
    assert committed(slave, "billing")[0] == 5
    commit(master, "billing", 6)
    wait_until(lambda: committed(slave, "billing").get(0) == 6, what="the greater offset to reach the slave")


def test_offsets_committed_on_a_slave_while_its_master_is_away_reach_the_master_when_it_is_back(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    master, slave = pair
    assert produce(master, [f"m{number}" for number in range(12)]).status_code == 200
    commit(master, "billing", 2)
    wait_until(lambda: committed(slave, "billing").get(0) == 2, what="the offset to reach the slave")
    master.stop()
    commit(slave, "billing", 5)  # a consumer read on the slave while the master was away
    commit(slave, "audit", 1)
    master.start()
    wait_until(
        lambda: committed(master, "billing").get(0) == 5, what="the slave's offset to reach the master"
    )
    assert committed(master, "audit")[0] == 1
    # The greater offset wins on the master too: a slave's older offset does not move it back.
    commit(master, "billing", 6)
    wait_until(lambda: committed(slave, "billing").get(0) == 6, what="the master's offset to reach the slave")
    assert committed(master, "billing")[0] == 6


def metadata_requests_held(master: BrokerProcess) -> int:
    """The master's ``wharf_ha_metadata_waiting``: slaves' metadata requests it holds now."""
    response = httpx.get(f"{master.url}/metrics")
    assert response.status_code == 200, response.text
    for family in text_string_to_metric_families(response.text):
        if family.name == "wharf_ha_metadata_waiting":
            return int(family.samples[0].value)
    raise AssertionError("no wharf_ha_metadata_waiting in /metrics")


def test_a_master_counts_the_metadata_requests_it_holds(tmp_path: Path) -> None:
    """``wharf_ha_metadata_waiting`` counts a request for the master's current version while it waits
    for a change; a request for another version is answered at once."""
    master = BrokerProcess(tmp_path / "master").start()
    try:
        version = httpx.get(f"{master.url}/v1/ha/metadata", params={"wait_ms": 30_000}).json()["version"]
        assert metadata_requests_held(master) == 0
        answers: list[httpx.Response] = []
        held = threading.Thread(
            target=lambda: answers.append(
                httpx.get(
                    f"{master.url}/v1/ha/metadata", params={"version": version, "wait_ms": 30_000}, timeout=40
                )
            )
        )
        held.start()
        wait_until(lambda: metadata_requests_held(master) == 1, what="the master to hold the request")
        assert httpx.post(f"{master.url}/v1/topics", json={"name": "woken", "queues": 1}).status_code == 201
        held.join(10)
        assert answers and answers[0].json()["version"] > version
        assert metadata_requests_held(master) == 0
    finally:
        master.kill()


def test_a_topic_change_reaches_the_slave_at_once_not_at_the_next_interval(tmp_path: Path) -> None:
    """The slave's metadata request is held until the master's topics change, then answered."""
    master = BrokerProcess(tmp_path / "master").start()
    slave = BrokerProcess(
        tmp_path / "slave",
        broker_role="SLAVE",
        broker_id=1,
        ha_master_url=master.url,
        ha_metadata_interval_ms=60_000,
    ).start()
    try:
        # Its first metadata request is answered at once; the change must wake the next, held one.
        wait_until(lambda: metadata_requests_held(master) == 1, what="the master to hold the slave's request")
        assert httpx.post(f"{master.url}/v1/topics", json={"name": "prompt", "queues": 1}).status_code == 201
        wait_until(lambda: topic_config(slave, "prompt"), timeout_s=10, what="the topic to reach the slave")
    finally:
        slave.kill()
        master.kill()


def test_a_slave_signs_in_to_a_master_with_an_acl(tmp_path: Path) -> None:
    """With an ACL on the master, replication and metadata need an admin account: the slave's
    WHARF_HA_ACCESS_KEY and WHARF_HA_SECRET_KEY; without them it is refused and copies nothing."""
    (tmp_path / "master").mkdir()
    master = acl_broker(tmp_path / "master").start()
    signed_in = make_slave(tmp_path, master, "signed-in")
    signed_in.env.update(WHARF_HA_ACCESS_KEY=ADMIN[0], WHARF_HA_SECRET_KEY=ADMIN[1])
    anonymous = make_slave(tmp_path, master, "anonymous")
    try:
        signed_in.start()
        anonymous.start()
        with httpx.Client(base_url=master.url, auth=ADMIN) as admin:
            assert admin.post("/v1/topics", json={"name": TOPIC, "queues": QUEUES}).status_code == 201
            messages = [{"body": f"m{number}", "queue_id": 0} for number in range(3)]
            assert admin.post(f"/v1/topics/{TOPIC}/messages", json={"messages": messages}).status_code == 200
            wait_until(lambda: topic_config(signed_in, TOPIC), what="the topic to reach the signed-in slave")
            wait_until(
                lambda: (
                    ha(signed_in)["commitlog_max_offset"]
                    == admin.get("/v1/admin/ha").json()["commitlog_max_offset"]
                ),
                what="the signed-in slave to catch up",
            )
            assert [slave["url"] for slave in admin.get("/v1/admin/ha").json()["slaves"]] == [signed_in.url]
        refused = ha(anonymous)
        assert refused["connected"] is False and refused["commitlog_max_offset"] == 0, (
            refused,
            anonymous.log()[-3000:],
        )
        assert topic_config(anonymous, TOPIC) is None
    finally:
        for broker in (anonymous, signed_in, master):
            broker.kill()


def in_memory_ratio(byte_count: int) -> float:
    """WHARF_ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO that makes ``byte_count`` bytes of this machine's memory."""
    return byte_count * 100 / (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def suggested(broker: BrokerProcess, offset: int, binary: bool = False) -> int:
    url = f"{broker.url}/v1/topics/{TOPIC}/queues/0/messages"
    params = {"offset": offset, "max_messages": 1}
    if binary:
        response = httpx.get(url, params=params, headers={"Accept": "application/vnd.wharf.records"})
        assert response.status_code == 200, response.text
        return int(response.headers["X-Wharf-Suggest-Broker-Id"])
    response = httpx.get(url, params=params)
    assert response.status_code == 200, response.text
    return int(response.json()["suggest_broker_id"])


def test_a_consumer_reading_behind_the_page_cache_is_sent_to_the_slave_and_back(tmp_path: Path) -> None:
    # The page cache is taken to hold the newest 8 KiB of CommitLog: 1 KiB messages further back
    # than 8 of them read the disk.
    ratio = in_memory_ratio(8 * 1024)
    master = BrokerProcess(tmp_path / "master", access_message_in_memory_max_ratio=ratio).start()
    slave = make_slave(tmp_path, master, access_message_in_memory_max_ratio=ratio)
    try:
        assert (
            httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES}).status_code == 201
        )
        assert produce(master, ["x" * 1024] * 40).status_code == 200
        assert suggested(master, 0) == 0  # no slave to send the consumer to
        slave.start()
        wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
        assert suggested(master, 0) == 1 and suggested(master, 0, binary=True) == 1
        # Queue 0 holds every other message: its offset 19 is the last but one message stored.
        assert suggested(master, 19) == 0 and suggested(master, 19, binary=True) == 0
        assert suggested(slave, 0) == 1  # still slow: stay on the slave
        assert suggested(slave, 19) == 0  # caught up: back to the master
    finally:
        slave.kill()
        master.kill()


RETENTION = {
    "commitlog_file_size": 4096,
    "consumequeue_file_entries": 16,
    "file_reserved_time_h": 0,
    "delete_files_max_per_pass": 2,
    "destroy_forcibly_interval_ms": 0,
}


@pytest.mark.parametrize("slave_has_a_log", [False, True], ids=["new slave", "slave left behind"])
def test_a_slave_behind_the_masters_retention_starts_again_from_its_first_segment(
    tmp_path: Path, slave_has_a_log: bool
) -> None:
    master = BrokerProcess(tmp_path / "master", **RETENTION).start()
    slave = make_slave(tmp_path, master, **RETENTION)
    try:
        assert (
            httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES}).status_code == 201
        )
        if slave_has_a_log:
            slave.start()
            assert produce(master, ["old"]).status_code == 200
            wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
            slave.kill()
        assert produce(master, ["x" * 100 + str(n) for n in range(120)]).status_code == 200
        report = httpx.post(f"{master.url}/v1/admin/clean").json()
        assert report["commitlog_segments"] == 2, report
        first = min(
            int(path.name) for path in (master.store_dir / "commitlog").iterdir() if path.name.isdigit()
        )
        assert first > 0

        slave.start()
        wait_until(lambda: caught_up(master, slave), what="the slave to copy what the master still holds")
        assert ha(slave)["commitlog_max_offset"] == ha(master)["commitlog_max_offset"]
        held = pulled_bodies(master)
        assert 0 < len(held) < 120 and pulled_bodies(slave) == held
        assert commitlog_bytes(slave.store_dir) == commitlog_bytes(master.store_dir)
    finally:
        slave.kill()
        master.kill()


def test_the_delay_levels_progress_follows_the_master(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    master, slave = pair
    response = httpx.post(
        f"{master.url}/v1/topics/{TOPIC}/messages",
        json={"messages": [{"body": "later", "queue_id": 0, "delay_level": 1}]},
    )
    assert response.status_code == 200, response.text
    wait_until(lambda: "later" in pulled_bodies(master), what="the delivery on the master")
    progress = slave.store_dir / "config" / "delayOffset.json"

    def level_one() -> int:
        return int(json.loads(progress.read_text())["offsetTable"]["1"]) if progress.exists() else 0

    # The slave would deliver the message again after a promotion without the master's progress.
    wait_until(lambda: level_one() == 1, what="the delivery progress to reach the slave")
    assert "later" in pulled_bodies(slave)
