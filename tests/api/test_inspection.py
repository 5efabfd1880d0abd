"""The operator's reads of the broker's machinery: the route registry's health (reachable, then cut
off), the store's files, and a group's pop messages in flight."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.api.server import BrokerProcess
from tests.conftest import throwaway_database
from tests.pop.popping import handles, make_topic, pop, produce, settle
from tests.routing.proxy import TcpProxy
from tests.transactions.transacting import wait_until


def test_the_registry_is_healthy_and_names_its_kind_only(client: httpx.Client) -> None:
    before = int(time.time() * 1000)
    health = client.get("/v1/admin/registry").json()
    assert (health["configured"], health["kind"], health["reachable"]) == (True, "sqlite", True)
    assert health["last_error"] is None and health["published"] is True
    assert 0 < health["last_heartbeat_ms"] <= before
    assert set(health) == {
        "configured",
        "kind",
        "reachable",
        "last_error",
        "last_heartbeat_ms",
        "heartbeat_interval_s",
        "published",
    }


@pytest.fixture
def registry() -> Iterator[str]:
    yield from throwaway_database("wharf_inspection")


def test_a_registry_cut_off_is_unreachable_with_its_error_then_back(tmp_path: Path, registry: str) -> None:
    url = make_url(registry)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432).start()
    through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    broker = BrokerProcess(tmp_path / "store", database_url=through, database_timeout_s=1).start()
    try:
        health = httpx.get(f"{broker.url}/v1/admin/registry").json()
        assert (health["kind"], health["reachable"]) == ("postgresql", True)
        assert "postgres" not in str(health["last_error"]) and through not in str(health)
        proxy.stop()
        cut = wait_until(
            lambda: (
                (answer := httpx.get(f"{broker.url}/v1/admin/registry").json())["reachable"] is False
                and answer
            ),
            what="the registry to be seen unreachable",
        )
        assert cut["last_error"], cut
        proxy.start()
        back = wait_until(
            lambda: (answer := httpx.get(f"{broker.url}/v1/admin/registry").json())["reachable"] and answer,
            what="the registry to answer again",
        )
        assert back["last_error"] is None and back["last_heartbeat_ms"] >= health["last_heartbeat_ms"]
    finally:
        broker.kill()
        proxy.close()


def test_the_store_files_list_the_latest_segments_and_totals(client: httpx.Client) -> None:
    topic = make_topic(client, queues=3)
    produce(client, topic, *[f"m{n}" for n in range(9)], keys=["inspected-key"])
    files = client.get("/v1/admin/store", params={"segments": 1}).json()
    commitlog = files["commitlog"]
    assert commitlog["segments"] >= 1 and len(commitlog["files"]) == 1
    last = commitlog["files"][-1]
    assert last["name"] == f"{last['from_offset']:020d}"
    assert last["from_offset"] + last["written_bytes"] == commitlog["max_offset"]
    assert commitlog["bytes"] >= last["size_bytes"] > 0
    assert files["consume_queues"]["queues"] >= 3 and files["consume_queues"]["bytes"] > 0
    # The index thread writes its first file a moment after the keys are stored.
    wait_until(lambda: client.get("/v1/admin/store").json()["index"]["files"] >= 1, what="an index file")
    assert client.get("/v1/admin/store", params={"segments": 0}).json()["commitlog"]["files"] == []
    for bad in ("-1", "1001", "many"):
        assert client.get("/v1/admin/store", params={"segments": bad}).status_code == 422


def test_a_groups_pop_messages_in_flight_per_queue(client: httpx.Client) -> None:
    topic = make_topic(client, queues=2)
    produce(client, topic, "a", "b", "c", queue_id=0)
    produce(client, topic, "d", queue_id=1)
    popped = pop(client, "inspected", topic, max_messages=4)
    assert len(popped) == 4
    settle(client, "ack", "inspected", topic, handles(popped[:1]))
    held = Counter(message["queue_id"] for message in popped[1:])

    view = client.get("/v1/admin/groups/inspected/pop").json()
    assert view["group"] == "inspected" and view["in_flight"] == 3
    assert {queue["queue_id"]: queue["in_flight"] for queue in view["queues"]} == dict(held)
    assert all(queue["invisible"] == queue["in_flight"] for queue in view["queues"])
    assert all(queue["next_deadline_ms"] > view["now_ms"] for queue in view["queues"])

    # Another group's messages whose invisible time passes without an ack are visible again.
    again = pop(client, "inspected-short", topic, max_messages=4, invisible_ms=10)
    seen = wait_until(
        lambda: (
            (answer := client.get("/v1/admin/groups/inspected-short/pop").json())["queues"]
            and all(queue["visible_again"] == queue["in_flight"] for queue in answer["queues"])
            and answer
        ),
        what="the invisible time to pass",
    )
    assert seen["in_flight"] == len(again)
    assert client.get("/v1/admin/groups/nobody-pops/pop").json()["queues"] == []


def test_each_queues_produce_rate_covers_the_time_since_an_earlier_look(client: httpx.Client) -> None:
    topic = make_topic(client, queues=2)
    first = client.get(f"/v1/topics/{topic}/queues").json()
    assert first["rate_window_s"] == 0
    assert [queue["produce_rate_per_s"] for queue in first["queues"]] == [None, None]
    produce(client, topic, *[f"m{n}" for n in range(10)], queue_id=0)

    later = wait_until(
        lambda: (
            (answer := client.get(f"/v1/topics/{topic}/queues").json())["rate_window_s"] >= 0.5 and answer
        ),
        what="a rate over half a second",
    )
    rates = [queue["produce_rate_per_s"] for queue in later["queues"]]
    assert abs(rates[0] * later["rate_window_s"] - 10) < 0.05 and rates[1] == 0, later
    # The console's page of topics samples the same way and answers the same rates.
    page = client.get("/v1/admin/topics", params={"q": topic}).json()["topics"][0]
    assert page["rate_window_s"] >= later["rate_window_s"]
    assert abs(page["queues"][0]["produce_rate_per_s"] * page["rate_window_s"] - 10) < 0.05
