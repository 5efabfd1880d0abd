"""``GET /metrics`` on a real server: the values move with produce, commits, pulls and WebSocket
deliveries; the HTTP histogram is labelled by route template; the store's gauges read its state; the
ACL lets only an admin scrape."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.acl_setup import ADMIN, PRODUCER, acl_broker, assert_refused, client_for
from tests.api.server import BrokerProcess
from tests.small_disk import fill, mounted_tmpfs
from tests.store.conftest import wait_until
from tests.ws.wsclient import WsBroker, produce

PRODUCE_ROUTE = "/v1/topics/{topic}/messages"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One SYNC_FLUSH broker for the module (a produce is answered after its flush); tests keep
    apart by their own topics and groups."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("broker") / "store", flush_mode="SYNC", hold_check_interval_ms=60000
    ).start()
    yield process
    process.stop()


def scrape(client: httpx.Client) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def label_values(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(labels)[label] for sample, labels in samples if sample == name}


def test_100_produced_and_40_committed_show_a_lag_of_60(client: httpx.Client, topic: str) -> None:
    produce(client, topic, *[f"m{i:03d}" for i in range(100)], queue_id=0)
    commit = client.put(
        "/v1/groups/lagging/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 40}]}
    )
    assert commit.status_code == 200, commit.text

    samples = scrape(client)
    assert value(samples, "wharf_messages_produced_total", topic=topic) == 100
    assert value(samples, "wharf_bytes_produced_total", topic=topic) == 400  # 4-byte bodies
    assert value(samples, "wharf_consumer_lag", group="lagging", topic=topic, queue="0") == 60


def test_http_pulls_count_what_they_hand_out_per_group(client: httpx.Client, topic: str) -> None:
    produce(client, topic, *[f"m{i}" for i in range(10)], queue_id=1)
    pull = f"/v1/topics/{topic}/queues/1/messages"
    assert (
        len(client.get(pull, params={"offset": 0, "max_messages": 4, "group": "readers"}).json()["messages"])
        == 4
    )
    assert len(client.get(pull, params={"offset": 0, "max_messages": 3}).json()["messages"]) == 3
    client.get(pull, params={"offset": 10, "group": "readers"})  # nothing new: nothing counted

    samples = scrape(client)
    assert value(samples, "wharf_messages_consumed_total", topic=topic, group="readers") == 4
    assert value(samples, "wharf_messages_consumed_total", topic=topic, group="") == 3


def test_websocket_deliveries_count_as_consumed_and_the_subscriber_is_seen(
    broker: BrokerProcess, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, *[f"w{i}" for i in range(5)], queue_id=2)
    ws = WsBroker(broker)
    with ws.subscribe(topic=topic, group="pushed", queues="2", **{"from": "first"}, credit=5) as socket:
        assert len(socket.messages(5)) == 5
        samples = scrape(client)
        assert value(samples, "wharf_messages_consumed_total", topic=topic, group="pushed") == 5
        assert value(samples, "wharf_websocket_subscribers") == 1
    wait_until(lambda: value(scrape(client), "wharf_websocket_subscribers") == 0, what="subscriber gone")


def test_a_long_poll_is_counted_while_it_is_held(client: httpx.Client, topic: str) -> None:
    answers: list[httpx.Response] = []
    pull = threading.Thread(
        target=lambda: answers.append(
            client.get(f"/v1/topics/{topic}/queues/3/messages", params={"offset": 0, "max_wait_ms": 20000})
        )
    )
    pull.start()
    wait_until(lambda: value(scrape(client), "wharf_long_polls_held") == 1, what="the pull held")
    produce(client, topic, "wake up", queue_id=3)
    pull.join(20)
    assert answers[0].json()["status"] == "FOUND"
    assert value(scrape(client), "wharf_long_polls_held") == 0


def test_the_route_label_is_the_template_never_the_path(client: httpx.Client) -> None:
    count = "wharf_http_request_duration_seconds_count"
    labels = {"method": "POST", "route": PRODUCE_ROUTE, "status": "200"}
    before = value(scrape(client), count, **labels) or 0
    for name in ("route-label-a", "route-label-b"):
        client.post(f"/v1/topics/{name}/messages", json={"body": "x"})
    assert client.get("/no/such/path").status_code == 404

    samples = scrape(client)
    assert value(samples, count, **labels) == before + 2
    routes = label_values(samples, count, "route")
    assert "<unmatched>" in routes
    assert not [route for route in routes if "route-label" in route or "such" in route]
    assert value(samples, "wharf_http_request_duration_seconds_bucket", **labels, le="+Inf") == before + 2


def test_a_sync_produce_is_flushed_and_timed_and_recovery_was_timed(client: httpx.Client, topic: str) -> None:
    before = scrape(client)
    flushes = value(before, "wharf_flush_duration_seconds_count") or 0
    produce(client, topic, "flushed")

    samples = scrape(client)
    assert (value(samples, "wharf_flush_duration_seconds_count") or 0) > flushes
    assert (value(samples, "wharf_flush_duration_seconds_sum") or 0) > 0
    assert (value(samples, "wharf_recovery_duration_seconds") or 0) > 0


def test_the_store_gauges_read_the_store(client: httpx.Client, topic: str) -> None:
    held = value(scrape(client), "wharf_store_commitlog_bytes") or 0
    produce(client, topic, "x" * 10_000)

    samples = scrape(client)
    assert (value(samples, "wharf_store_commitlog_bytes") or 0) > held + 10_000
    assert 0 < (value(samples, "wharf_store_disk_used_ratio") or 0) <= 1
    assert value(samples, "wharf_store_writes_refused") == 0


def test_a_deleted_topic_takes_its_series_with_it(client: httpx.Client, topic: str) -> None:
    produce(client, topic, "gone soon", queue_id=0)
    client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0, "group": "leaving"})
    assert value(scrape(client), "wharf_messages_produced_total", topic=topic) == 1
    assert client.delete(f"/v1/topics/{topic}").status_code == 204

    samples = scrape(client)
    assert value(samples, "wharf_messages_produced_total", topic=topic) is None
    assert value(samples, "wharf_bytes_produced_total", topic=topic) is None
    assert value(samples, "wharf_messages_consumed_total", topic=topic, group="leaving") is None


@pytest.mark.slow
def test_a_full_disk_shows_in_the_store_gauges(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "disk", 48) as disk:
        filler = fill(disk, leave_bytes=30 << 20)  # 37.5 % used by someone else
        broker = BrokerProcess(
            disk,
            commitlog_file_size=1 << 20,
            disk_refuse_writes_ratio=60,
            disk_accept_writes_ratio=50,
            disk_check_interval_ms=100,
        ).start()
        try:
            with httpx.Client(base_url=broker.url, timeout=30.0) as client:
                client.post("/v1/topics", json={"name": "filling", "queues": 1}).raise_for_status()
                assert value(scrape(client), "wharf_store_writes_refused") == 0
                batch = {"messages": [{"body": "x" * 60_000}] * 8}
                wait_until(
                    lambda: client.post("/v1/topics/filling/messages", json=batch).status_code == 507,
                    timeout_s=60,
                    what="writes refused",
                )
                samples = scrape(client)
                assert value(samples, "wharf_store_writes_refused") == 1
                assert (value(samples, "wharf_store_disk_used_ratio") or 0) > 0.6

                filler.unlink()  # space returns: the next write is accepted, and the gauge says so
                wait_until(
                    lambda: client.post("/v1/topics/filling/messages", json={"body": "x"}).status_code == 200,
                    what="writes accepted again",
                )
                assert value(scrape(client), "wharf_store_writes_refused") == 0
        finally:
            broker.stop()


@pytest.mark.slow
def test_with_the_acl_only_an_admin_scrapes(tmp_path: Path) -> None:
    broker = acl_broker(tmp_path).start()
    try:
        with client_for(broker, None) as anonymous:
            assert_refused(anonymous.get("/metrics"), 401)
        with client_for(broker, PRODUCER) as producer:
            assert_refused(producer.get("/metrics"), 403)
        with client_for(broker, ADMIN) as admin:
            samples = scrape(admin)
        assert value(samples, "wharf_websocket_subscribers") == 0
        # Refused before routing, and still counted under the route's template.
        count = "wharf_http_request_duration_seconds_count"
        assert value(samples, count, method="GET", route="/metrics", status="401") == 1
        assert value(samples, count, method="GET", route="/metrics", status="403") == 1
    finally:
        broker.stop()
