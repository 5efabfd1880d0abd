"""A producer's retry of a message a SYNC_MASTER stored but could not replicate: the idempotency
window answers it from the first copy, and says SEND_OK only once a slave holds that copy (the
nemesis run found a retry answered SEND_OK while no slave held it; the failover that followed cut
it from the log)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.ha.replicas import TOPIC, caught_up
from tests.ha.test_failover import registry, start_pair  # noqa: F401 - a fixture
from tests.transactions.transacting import wait_until


def send(url: str, unique_id: str) -> dict[str, object]:
    response = httpx.post(
        f"{url}/v1/topics/{TOPIC}/messages",
        json={"messages": [{"body": unique_id, "unique_id": unique_id, "queue_id": 0}]},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    (result,) = response.json()["results"]
    return dict(result)


def test_a_repeat_is_send_ok_only_once_a_slave_holds_the_first_copy(tmp_path: Path, registry: str) -> None:  # noqa: F811
    master, slave = start_pair(tmp_path, registry, "SYNC_MASTER", ha_sync_timeout_ms=500)
    try:
        slave.kill()
        wait_until(lambda: not httpx.get(f"{master.url}/v1/admin/ha").json()["slaves"], what="the slave gone")
        first = send(master.url, "only-on-the-master")
        assert first["status"] == "SLAVE_NOT_AVAILABLE", first
        again = send(master.url, "only-on-the-master")
        assert (again["queue_offset"], again["status"]) == (first["queue_offset"], "SLAVE_NOT_AVAILABLE"), (
            again
        )

        slave.start()
        wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
        held = send(master.url, "only-on-the-master")
        assert (held["queue_offset"], held["status"]) == (first["queue_offset"], "SEND_OK"), held
    finally:
        slave.kill()
        master.kill()
