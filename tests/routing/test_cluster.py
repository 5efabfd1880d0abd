"""A real cluster on one machine: three broker processes sharing one PostgreSQL registry."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from app.client import GroupConsumer, Producer
from tests.api.server import BrokerProcess

pytestmark = pytest.mark.slow

CLUSTER = "wharf-test"
TIMINGS = {"heartbeat_interval_s": 0.5, "broker_expiry_s": 3, "expiry_scan_interval_s": 0.5}


def wait_for(condition, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[list[BrokerProcess]]:
    root = tmp_path_factory.mktemp("cluster")
    brokers = [
        BrokerProcess(
            root / f"store-{index}",
            database_url=postgres_url,
            cluster_name=CLUSTER,
            broker_name=f"broker-{index}",
            **TIMINGS,
        )
        for index in range(3)
    ]
    for broker in brokers:
        broker.env["WHARF_ADVERTISED_URL"] = broker.url
        broker.start()
    yield brokers
    for broker in brokers:
        broker.stop()


def alive_brokers(url: str) -> set[str]:
    clusters = httpx.get(f"{url}/v1/clusters").json()["clusters"]
    return {b["broker_name"] for c in clusters if c["name"] == CLUSTER for b in c["brokers"] if b["alive"]}


def test_every_broker_sees_the_cluster(cluster: list[BrokerProcess]) -> None:
    everyone = {"broker-0", "broker-1", "broker-2"}
    # A broker registers before it serves, but one started earlier learns of the others on a read.
    for broker in cluster:
        assert wait_for(lambda broker=broker: alive_brokers(broker.url) == everyone), broker.url


def test_create_across_reports_each_broker_and_refuses_an_unknown_cluster(
    cluster: list[BrokerProcess],
) -> None:
    # broker-0 (the one asked) and broker-2 hold "mixed" with 4 queues; broker-1 does not have it.
    for broker in (cluster[0], cluster[2]):
        assert httpx.post(f"{broker.url}/v1/topics", json={"name": "mixed", "queues": 4}).status_code == 201
    created = httpx.post(
        f"{cluster[0].url}/v1/topics", json={"name": "mixed", "queues": 2, "cluster": CLUSTER}
    )
    placements = {p["broker_name"]: p for p in created.json()["brokers"]}
    assert {name: p["status"] for name, p in placements.items()} == {
        "broker-0": 409,
        "broker-1": 201,
        "broker-2": 409,
    }
    assert "another configuration" in placements["broker-0"]["error"]
    assert "another configuration" in placements["broker-2"]["error"]

    unknown = httpx.post(f"{cluster[0].url}/v1/topics", json={"name": "x", "cluster": "no-such-cluster"})
    assert (unknown.status_code, unknown.json()["error_code"]) == (404, 40406), unknown.text


def test_topic_created_across_the_cluster_routes_everywhere(cluster: list[BrokerProcess]) -> None:
    created = httpx.post(
        f"{cluster[0].url}/v1/topics", json={"name": "spread", "queues": 2, "cluster": CLUSTER}
    )
    assert created.status_code == 201, created.text
    assert sorted((p["broker_name"], p["status"]) for p in created.json()["brokers"]) == [
        ("broker-0", 201),
        ("broker-1", 201),
        ("broker-2", 201),
    ]

    def routed_everywhere() -> bool:
        for broker in cluster:
            route = httpx.get(f"{broker.url}/v1/topics/spread/route")
            if route.status_code != 200 or len(route.json()["queue_datas"]) != 3:
                return False
        return True

    assert wait_for(routed_everywhere)
    route = httpx.get(f"{cluster[2].url}/v1/topics/spread/route").json()
    assert {b["broker_name"]: b["addresses"]["0"] for b in route["broker_datas"]} == {
        f"broker-{i}": cluster[i].url for i in range(3)
    }


def test_producer_spreads_over_brokers_and_messages_are_where_it_says(cluster: list[BrokerProcess]) -> None:
    httpx.post(f"{cluster[0].url}/v1/topics", json={"name": "client-e2e", "queues": 2, "cluster": CLUSTER})
    assert wait_for(
        lambda: (
            len(httpx.get(f"{cluster[1].url}/v1/topics/client-e2e/route").json().get("queue_datas", [])) == 3
        )
    )
    with Producer(cluster[1].url) as producer:
        results = [producer.send("client-e2e", f"message {i}", tags="T") for i in range(30)]
    assert {r.broker_name for r in results} == {"broker-0", "broker-1", "broker-2"}
    assert all(r.status == "SEND_OK" for r in results)
    for i, result in enumerate(results):
        found = httpx.get(f"{result.address}/v1/messages/{result.msg_id}")
        assert found.status_code == 200
        assert found.json()["body"] == f"message {i}" and found.json()["unique_id"] == result.unique_id


def test_group_members_share_every_broker_s_queues_and_read_each_message_once(
    cluster: list[BrokerProcess],
) -> None:
    httpx.post(f"{cluster[0].url}/v1/topics", json={"name": "grouped", "queues": 2, "cluster": CLUSTER})
    assert wait_for(
        lambda: len(httpx.get(f"{cluster[2].url}/v1/topics/grouped/route").json().get("queue_datas", [])) == 3
    )
    members = [
        GroupConsumer(cluster[i].url, "spread", {"grouped": "*"}, client_id=f"m{i}", consume_from="first")
        for i in range(2)
    ]
    try:
        for member in members:
            member.heartbeat()  # both joined everywhere: the generations are final
        # Membership is per broker: each allocates its own 2 queues, one to each member.
        for member in members:
            assert sorted(member.assignments) == sorted(broker.url for broker in cluster)
            assert all(
                len([item for item in items if item["topic"] == "grouped"]) == 1
                for items in member.assignments.values()
            )
        with Producer(cluster[1].url) as producer:
            sent = {producer.send("grouped", f"g{i}").broker_name for i in range(30)}
        assert sent == {"broker-0", "broker-1", "broker-2"}
        read: list[str] = []
        deadline = time.monotonic() + 30
        while len(read) < 30 and time.monotonic() < deadline:
            for member in members:
                batch = member.poll(max_messages=16)
                read += [message["body"] for message in batch.messages]
                assert member.commit(batch)
        assert sorted(read) == sorted(f"g{i}" for i in range(30))
    finally:
        for member in members:
            member.close()


def test_a_topic_on_another_broker_is_misdirected_not_misplaced(cluster: list[BrokerProcess]) -> None:
    created = httpx.post(f"{cluster[0].url}/v1/topics", json={"name": "only-on-1", "brokers": ["broker-1"]})
    assert [p["broker_name"] for p in created.json()["brokers"]] == ["broker-1"]
    assert wait_for(lambda: httpx.get(f"{cluster[0].url}/v1/topics/only-on-1/route").status_code == 200)
    answer = httpx.post(f"{cluster[0].url}/v1/topics/only-on-1/messages", json={"body": "lost?"})
    assert answer.status_code == 421
    assert answer.json()["error_code"] == 42101
    assert answer.json()["brokers"] == [cluster[1].url]
    pull = httpx.get(f"{cluster[0].url}/v1/topics/only-on-1/queues/0/messages?offset=0")
    assert pull.status_code == 421
    assert (pull.json()["error_code"], pull.json()["brokers"]) == (42101, [cluster[1].url])
    with (
        ws_connect(f"{cluster[0].url.replace('http', 'ws')}/v1/ws/subscribe?topic=only-on-1") as socket,
        pytest.raises(ConnectionClosed) as closed,
    ):
        socket.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4421
    assert closed.value.rcvd.reason.startswith("42101") and cluster[1].url in closed.value.rcvd.reason
    assert httpx.get(f"{cluster[0].url}/v1/topics").json()["topics"] == [
        t for t in httpx.get(f"{cluster[0].url}/v1/topics").json()["topics"] if t["name"] != "only-on-1"
    ]


def test_the_producer_follows_a_421_to_the_broker_that_hosts_the_topic(cluster: list[BrokerProcess]) -> None:
    """A route that names the wrong broker (a topic moved) costs one 421: the producer refreshes the
    route and sends where the registry says."""
    httpx.post(f"{cluster[0].url}/v1/topics", json={"name": "moved", "brokers": ["broker-1"]})
    assert wait_for(lambda: httpx.get(f"{cluster[0].url}/v1/topics/moved/route").status_code == 200)
    with Producer(cluster[0].url) as producer:
        real = producer.route("moved")
        queue = real.write_queues[0]
        wrong = type(real)("moved", (type(queue)(queue.broker_name, 0, cluster[0].url),), real.read_queues)
        producer.routes._routes["moved"] = (time.monotonic() + 60, wrong)
        result = producer.send("moved", "found its broker")
    assert (result.broker_name, result.address) == ("broker-1", cluster[1].url)
    found = httpx.get(f"{cluster[1].url}/v1/messages/{result.msg_id}")
    assert found.json()["body"] == "found its broker"
    assert httpx.get(f"{cluster[0].url}/v1/topics/moved/queues/0/messages?offset=0").status_code == 421


def test_killing_a_broker_under_load(cluster: list[BrokerProcess], tmp_path: Path) -> None:
    httpx.post(f"{cluster[0].url}/v1/topics", json={"name": "survive", "queues": 2, "cluster": CLUSTER})
    assert wait_for(
        lambda: len(httpx.get(f"{cluster[0].url}/v1/topics/survive/route").json().get("queue_datas", [])) == 3
    )
    victim = cluster[2]
    acknowledged = []
    failures = []
    stop = threading.Event()

    def produce() -> None:
        with Producer([cluster[0].url, cluster[1].url], timeout_s=2.0) as producer:
            i = 0
            while not stop.is_set():
                try:
                    acknowledged.append((i, producer.send("survive", f"load {i}")))
                except Exception as exc:  # noqa: BLE001 - every failure is the finding
                    failures.append((i, repr(exc)))
                i += 1

    thread = threading.Thread(target=produce)
    thread.start()
    assert wait_for(lambda: any(r.broker_name == "broker-2" for _, r in acknowledged), 10)
    victim.kill()  # SIGKILL
    killed_at = len(acknowledged)
    assert wait_for(lambda: len(acknowledged) > killed_at + 50, 20)
    assert wait_for(lambda: "broker-2" not in alive_brokers(cluster[0].url), 15)
    assert wait_for(
        lambda: (
            "broker-2"
            not in {
                q["broker_name"]
                for q in httpx.get(f"{cluster[0].url}/v1/topics/survive/route").json()["queue_datas"]
            }
        )
    )
    stop.set()
    thread.join(30)
    assert failures == []

    victim.start()
    assert wait_for(lambda: "broker-2" in alive_brokers(cluster[0].url), 15)
    assert wait_for(
        lambda: (
            "broker-2"
            in {
                q["broker_name"]
                for q in httpx.get(f"{cluster[0].url}/v1/topics/survive/route").json()["queue_datas"]
            }
        )
    )
    on_victim = [(i, r) for i, r in acknowledged if r.broker_name == "broker-2"]
    assert on_victim
    for i, result in on_victim:
        found = httpx.get(f"{victim.url}/v1/messages/{result.msg_id}")
        assert found.status_code == 200, (i, result)
        assert found.json()["body"] == f"load {i}"
