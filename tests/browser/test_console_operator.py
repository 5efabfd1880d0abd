"""The operator's views against a real broker's state: a group's members, lag and rebalance, a reset
by time past the running-member warning, a dead letter resent and consumed, a pending transaction
committed, a delayed message counted then delivered, a slave's lag and a refused promotion; each
view photographed at a desktop's and a phone's width."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.server import BrokerProcess, free_port
from tests.browser.conftest import ARTIFACTS_DIR, Pages, in_ci
from tests.browser.layout import DESKTOP, PHONE, VIEWPORTS, assert_no_horizontal_overflow, assert_reachable
from tests.transactions.transacting import wait_until

try:
    from playwright.sync_api import expect
except ImportError:
    if in_ci():
        raise
    pytest.skip("the playwright package is not installed (pip install -e '.[test]')", allow_module_level=True)

# Where the pictures of every view go, for a person to look at before a merge.
SHOTS_DIR = Path(os.environ.get("WHARF_CONSOLE_SHOTS", ARTIFACTS_DIR / "views"))
VIEWS = [
    "overview",
    "topics",
    "messages",
    "groups",
    "dead-letters",
    "transactions",
    "delays",
    "push",
    "clusters",
    "lookup",
    "tail",
    "produce",
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The module's broker; push subscriptions may name this machine (the test's endpoint)."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("operator") / "store", hold_check_interval_ms=60000, push_allow_private=True
    ).start()
    yield process
    process.stop()


def open_console(pages: Pages, broker: BrokerProcess, size: tuple[int, int] = DESKTOP, **options: Any) -> Any:
    page = pages.open(broker.url, width=size[0], height=size[1], **options)
    page.goto("/console/")
    expect(page.locator("#connection")).to_have_text("live")
    return page


def make_topic(client: httpx.Client, name: str, queues: int) -> None:
    response = client.post("/v1/topics", json={"name": name, "queues": queues})
    assert response.status_code in (200, 201), response.text


def produce(client: httpx.Client, topic: str, *messages: dict[str, Any]) -> list[dict[str, Any]]:
    response = client.post(f"/v1/topics/{topic}/messages", json={"messages": list(messages)})
    assert response.status_code == 200, response.text
    return list(response.json()["results"])


def join(client: httpx.Client, group: str, client_id: str, topic: str) -> dict[str, Any]:
    response = client.post(
        f"/v1/groups/{group}/heartbeat", json={"client_id": client_id, "subscriptions": {topic: "*"}}
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def bodies(client: httpx.Client, topic: str, queue_id: int = 0, offset: int = 0) -> list[str]:
    answer = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": offset})
    assert answer.status_code == 200, answer.text
    return [message["body"] for message in answer.json()["messages"]]


def test_a_group_with_three_members_and_lag_then_a_rebalance(
    pages: Pages, broker: BrokerProcess, client: httpx.Client
) -> None:
    topic, group = "ops-members", "ops-members-group"
    make_topic(client, topic, 6)
    produce(client, topic, *[{"body": f"m{n}", "queue_id": n % 6} for n in range(12)])
    for client_id in ("worker-1", "worker-2", "worker-3"):
        join(client, group, client_id, topic)
    committed = client.put(
        f"/v1/groups/{group}/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 1}]}
    )
    assert committed.status_code == 200, committed.text

    page = open_console(pages, broker)
    row = page.locator(f'#groups-table tr[data-group="{group}"][data-topic="{topic}"]')
    assert_reachable(page, row.locator("button.group-details"))
    row.locator("button.group-details").click()
    detail = page.locator("#group-detail")
    expect(detail).to_be_visible()
    expect(page.locator("#group-detail-name")).to_have_text(group)
    members = page.locator("#group-members tbody tr")
    expect(members).to_have_count(3)
    expect(members.locator("td:first-child")).to_have_text(["worker-1", "worker-2", "worker-3"])
    expect(page.locator("#group-lag")).to_have_text("11")  # 12 stored, 1 committed
    queues = page.locator(f'#group-queues tr[data-topic="{topic}"]')
    expect(queues).to_have_count(6)
    owners = queues.locator("td:nth-child(3)").all_text_contents()
    assert sorted(set(owners)) == ["worker-1", "worker-2", "worker-3"], owners
    assert queues.locator("td:nth-child(6)").all_text_contents() == ["1", "2", "2", "2", "2", "2"]
    generation = page.locator("#group-generation").text_content()

    # worker-3 leaves: the next refresh shows its queues with the two left, in a new generation.
    assert client.delete(f"/v1/groups/{group}/members/worker-3").status_code in (200, 204)
    expect(members).to_have_count(2)
    expect(page.locator("#group-generation")).not_to_have_text(generation)
    expect(queues.locator("td:nth-child(3)")).to_have_text([re.compile(r"^worker-[12]$")] * 6)
    owners = queues.locator("td:nth-child(3)").all_text_contents()
    assert sorted(set(owners)) == ["worker-1", "worker-2"] and len(owners) == 6, owners


def test_a_reset_by_time_warns_of_running_members_and_the_next_pull_starts_there(
    pages: Pages, broker: BrokerProcess, client: httpx.Client
) -> None:
    topic, group = "ops-reset", "ops-reset-group"
    make_topic(client, topic, 1)
    (first,) = produce(client, topic, {"body": "before"})
    stored_ms = client.get(f"/v1/messages/{first['msg_id']}").json()["store_timestamp"]
    # The form takes whole seconds: the next messages are stored in a later second.
    wait_until(lambda: time.time() >= stored_ms // 1000 + 1, what="the next second")
    produce(client, topic, {"body": "after"}, {"body": "later"})
    join(client, group, "runner", topic)
    at_end = client.put(
        f"/v1/groups/{group}/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 3}]}
    )
    assert at_end.status_code == 200, at_end.text

    page = open_console(pages, broker, timezone_id="UTC")
    page.fill("#reset-group", group)
    page.fill("#reset-topic", topic)
    page.select_option("#reset-to", "time")
    page.fill("#reset-time", datetime.fromtimestamp(stored_ms // 1000 + 1, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    page.click("#reset-offsets")
    warning = page.locator("#reset-warning")
    expect(warning).to_contain_text(f"1 member is running in {group} (runner)")
    expect(page.locator("#reset-offsets")).to_have_text("Reset anyway")
    offsets = client.get(f"/v1/groups/{group}/offsets", params={"topic": topic}).json()["offsets"]
    assert offsets[0]["committed_offset"] == 3, "the reset went ahead before it was confirmed"

    page.click("#reset-offsets")
    expect(page.locator("#reset-result")).to_have_text(f"{group} on {topic} now reads from #0: 1")
    expect(warning).to_be_hidden()
    pulled = client.get(f"/v1/groups/{group}/messages", params={"client_id": "runner"})
    assert pulled.status_code == 200, pulled.text
    assert [message["body"] for message in pulled.json()["messages"]] == ["after", "later"]


def test_a_dead_letter_is_resent_and_consumed(
    pages: Pages, broker: BrokerProcess, client: httpx.Client
) -> None:
    topic, group = "ops-dlq", "ops-dlq-group"
    make_topic(client, topic, 1)
    (poison,) = produce(client, topic, {"body": "poison", "tags": "Bad", "keys": ["order-9"]})
    assert client.put(f"/v1/groups/{group}/config", json={"max_reconsume_times": 0}).status_code == 200
    sent_back = client.post(f"/v1/groups/{group}/retry", json={"topic": topic, "queue_id": 0, "offset": 0})
    assert sent_back.json()["status"] == "DEAD_LETTER", sent_back.text
    consumed = client.put(
        f"/v1/groups/{group}/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 1}]}
    )
    assert consumed.status_code == 200

    page = open_console(pages, broker)
    row = page.locator(f'#groups-table tr[data-group="{group}"][data-topic="{topic}"]')
    assert_reachable(page, row.locator("button.group-dlq"))
    row.locator("button.group-dlq").click()
    letter = page.locator("#dlq-table tbody tr").first
    expect(letter.locator("td").nth(1)).to_have_text(topic)
    expect(letter.locator("td").nth(2)).to_have_text("0")  # dead-lettered on its first return
    expect(letter).to_contain_text("poison")
    expect(letter).to_contain_text("order-9")
    expect(page.locator("#dlq-cap")).to_contain_text("at most 1,000")

    assert_reachable(page, letter.locator("button.resend"))
    letter.locator("button.resend").click()
    expect(page.locator("#dlq-state")).to_have_text(f"resent 1 to {topic}")
    # Back in its topic, read by the group from where it had got to.
    pulled = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"group": group})
    messages = pulled.json()["messages"]
    assert [(m["body"], m["queue_offset"]) for m in messages] == [("poison", 1)], pulled.text
    assert messages[0]["msg_id"] != poison["msg_id"]


@pytest.mark.parametrize("size", VIEWPORTS)
def test_dead_letters_are_skipped_through_one_then_all_after_a_confirmation(
    pages: Pages, broker: BrokerProcess, client: httpx.Client, size: tuple[int, int]
) -> None:
    topic, group = f"ops-skip-{size[0]}", f"ops-skip-group-{size[0]}"
    make_topic(client, topic, 1)
    produce(client, topic, *[{"body": f"poison-{n}"} for n in range(4)])
    assert client.put(f"/v1/groups/{group}/config", json={"max_reconsume_times": 0}).status_code == 200
    for offset in range(4):
        place = {"topic": topic, "queue_id": 0, "offset": offset}
        assert client.post(f"/v1/groups/{group}/retry", json=place).json()["status"] == "DEAD_LETTER"

    def mark() -> int:
        return int(client.get(f"/v1/groups/{group}/dlq").json()["resent_until"])

    page = open_console(pages, broker, size)
    page.fill("#dlq-group", group)
    page.click("#dlq-show")
    second = page.locator("#dlq-table tbody tr").nth(1)
    expect(second).to_contain_text("poison-1")
    skip = second.locator("button.skip")
    assert_reachable(page, skip)
    skip.click()
    expect(skip).to_have_text("Yes, skip offsets ..1")
    skip.press("Escape")
    expect(skip).to_have_text("Skip through here")
    assert mark() == 0  # one press skips nothing
    skip.click()
    skip.click()
    expect(page.locator("#dlq-state")).to_have_text("skipped 2: dead letters below offset 2 are passed over")
    assert mark() == 2
    expect(page.locator("#dlq-table tbody tr.passed")).to_have_count(2)
    expect(second.locator(".passed")).to_have_text("passed (resent or skipped)")

    everything = page.locator("#dlq-skip-all")
    assert_reachable(page, everything)
    everything.click()
    expect(everything).to_have_text("Yes, skip every dead letter")
    everything.click()
    expect(page.locator("#dlq-state")).to_have_text("skipped 2: dead letters below offset 4 are passed over")
    assert mark() == 4
    expect(page.locator("#dlq-table tbody tr.passed")).to_have_count(4)
    # A resend of all has nothing left to send.
    assert client.post(f"/v1/groups/{group}/dlq/resend", json={"all": True}).json()["resent"] == []
    assert_no_horizontal_overflow(page)
    shoot(page, "dead-letters-skipped", "dead-letters")


@pytest.mark.parametrize("size", VIEWPORTS)
def test_pop_in_flight_produce_rates_the_registry_and_the_store_files(
    pages: Pages, broker: BrokerProcess, client: httpx.Client, size: tuple[int, int]
) -> None:
    topic, group = f"ops-pop-{size[0]}", f"ops-pop-group-{size[0]}"
    make_topic(client, topic, 2)
    produce(client, topic, *[{"body": f"job-{n}", "queue_id": 0} for n in range(3)])
    popped = client.post(
        f"/v1/groups/{group}/topics/{topic}/pop",
        json={"max_messages": 2, "invisible_ms": 600_000, "consume_from": "first"},
    )
    assert len(popped.json()["messages"]) == 2, popped.text
    # An offset on the other queue puts the group in the list of groups.
    commit = {"offsets": [{"topic": topic, "queue_id": 1, "offset": 0}]}
    assert client.put(f"/v1/groups/{group}/offsets", json=commit).status_code == 200

    page = open_console(pages, broker, size)
    # Each queue's produce rate, once the page has looked twice (every 2 s).
    row = page.locator(f'#topics-table tr[data-topic="{topic}"]')
    expect(row.locator(".queue").first).to_have_text(re.compile(r"^#0: 0\.\.3, [0-9.]+/s$"), timeout=15_000)

    group_row = page.locator(f'#groups-table tr[data-group="{group}"]').first
    assert_reachable(page, group_row.locator("button.group-details"))
    group_row.locator("button.group-details").click()
    expect(page.locator("#group-pop-total")).to_have_text("2")
    pop_row = page.locator(f'#group-pop tr[data-topic="{topic}"][data-queue="0"]')
    expect(pop_row.locator("td").nth(2)).to_have_text("2")  # in flight
    expect(pop_row.locator("td").nth(3)).to_have_text("2")  # still invisible
    expect(pop_row.locator("td").nth(5)).to_contain_text("in 10 min")
    shoot(page, "groups-pop-in-flight", "groups")

    expect(page.locator("#registry-state")).to_have_text("sqlite, reachable")
    expect(page.locator("#registry-heartbeat")).to_have_text(re.compile(r" ago$"))
    files = client.get("/v1/admin/store", params={"segments": 10}).json()["commitlog"]
    expect(page.locator("#store-summary")).to_contain_text(f"CommitLog: {files['segments']} segment")
    newest = files["files"][-1]["name"]
    expect(page.locator(f'#store-table tr[data-segment="{newest}"] td').first).to_have_text(newest)
    assert_reachable(page, page.locator("#store-table"))
    assert_no_horizontal_overflow(page)
    shoot(page, "clusters-registry-and-store", "clusters")


def test_a_pending_transaction_is_committed_from_the_console(
    pages: Pages, broker: BrokerProcess, client: httpx.Client
) -> None:
    topic = "ops-tx"
    make_topic(client, topic, 1)
    begun = client.post(
        f"/v1/topics/{topic}/messages",
        params={"transaction": "begin", "producer_group": "ops-tx-producers"},
        json={"messages": [{"body": "held until committed"}]},
    )
    assert begun.status_code == 200, begun.text
    transaction_id = begun.json()["results"][0]["transaction_id"]
    assert bodies(client, topic) == []

    page = open_console(pages, broker)
    row = page.locator(f'#tx-table tr[data-transaction="{transaction_id}"]')
    expect(row).to_contain_text("ops-tx-producers")
    expect(row).to_contain_text("none registered")
    assert_reachable(page, row.locator("button.tx-commit"))
    row.locator("button.tx-commit").click()
    expect(row).to_have_count(0)
    assert bodies(client, topic) == ["held until committed"]


def test_a_delayed_message_is_counted_then_delivered(
    pages: Pages, broker: BrokerProcess, client: httpx.Client
) -> None:
    topic = "ops-delay"
    make_topic(client, topic, 1)
    page = open_console(pages, broker)
    level = page.locator('#delays-table tr[data-level="3"]')
    expect(level.locator("td").nth(1)).to_have_text("10s")
    expect(level.locator("td").nth(2)).to_have_text("0")
    produce(client, topic, {"body": "in ten seconds", "delay_level": 3})
    expect(level.locator("td").nth(2)).to_have_text("1")
    expect(level.locator("td").nth(3)).to_contain_text("(in ")
    assert bodies(client, topic) == []
    expect(level.locator("td").nth(2)).to_have_text("0", timeout=30_000)
    assert bodies(client, topic) == ["in ten seconds"]

    # A message for an arbitrary time, counted as due within the hour.
    soon = int(page.locator("#timer-next-hour").text_content())
    produce(client, topic, {"body": "in twenty minutes", "delay_ms": 1_200_000})
    expect(page.locator("#timer-next-hour")).to_have_text(str(soon + 1))
    expect(page.locator("#timer-next")).to_contain_text("(in ")


def test_a_push_subscription_shows_its_errors_and_is_paused_and_resumed(
    pages: Pages, broker: BrokerProcess, client: httpx.Client
) -> None:
    topic, group = "ops-push", "ops-push-group"
    make_topic(client, topic, 1)
    endpoint = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    made = client.put(f"/v1/groups/{group}/push", json={"topic": topic, "url": endpoint, "timeout_ms": 1000})
    assert made.status_code == 201, made.text
    produce(client, topic, {"body": "undeliverable"})

    page = open_console(pages, broker)
    row = page.locator(f'#push-table tr[data-group="{group}"]')
    expect(row.locator("td").nth(3)).to_have_text("running")
    expect(row.locator("td").nth(9)).not_to_have_text("-", timeout=20_000)  # the failed delivery's error
    assert_reachable(page, row.locator("button.push-pause"))
    row.locator("button.push-pause").click()
    expect(row.locator("td").nth(3)).to_have_text("paused")
    view = client.get(f"/v1/groups/{group}/push").json()
    assert view["paused"] is True and (view["topic"], view["url"], view["timeout_ms"]) == (
        topic,
        endpoint,
        1000,
    )
    row.locator("button.push-resume").click()
    expect(row.locator("td").nth(3)).to_have_text("running")
    assert client.get(f"/v1/groups/{group}/push").json()["paused"] is False
    client.delete(f"/v1/groups/{group}/push")


@pytest.mark.parametrize("size", VIEWPORTS)
def test_a_topics_queues_and_permission_are_changed_from_its_row(
    pages: Pages, broker: BrokerProcess, client: httpx.Client, size: tuple[int, int]
) -> None:
    topic = f"ops-change-{size[0]}"
    make_topic(client, topic, 4)
    produce(client, topic, {"body": "in queue 3", "queue_id": 3})
    page = open_console(pages, broker, size)
    row = page.locator(f'#topics-table tr[data-topic="{topic}"]')
    assert_reachable(page, row.locator("button.change-topic"))
    row.locator("button.change-topic").click()
    expect(page.locator("#change-topic-name")).to_have_value(topic)
    expect(page.locator("#change-topic-write")).to_have_value("4")
    assert_reachable(page, page.locator("#change-topic"))

    # The broker's refusal, in its words: read queues may not go under the write queues.
    page.fill("#change-topic-read", "2")
    page.click("#change-topic")
    result = page.locator("#change-topic-result")
    expect(result).to_contain_text("refused: 40012: read queues (2) may not be fewer than write queues (4)")
    assert client.get(f"/v1/topics/{topic}").json()["read_queues"] == 4

    page.fill("#change-topic-read", "4")
    page.fill("#change-topic-write", "2")
    page.select_option("#change-topic-perm", "4")
    page.click("#change-topic")
    expect(result).to_have_text(f"changed {topic}: 4 read / 2 write queues, perm 4")
    assert client.get(f"/v1/topics/{topic}").json() == {
        "name": topic,
        "read_queues": 4,
        "write_queues": 2,
        "perm": 4,
        "order": False,
    }
    expect(row.locator("td").nth(1)).to_have_text("4 / 2")
    expect(row.locator("td").nth(2)).to_have_text("4")
    refused = client.post(f"/v1/topics/{topic}/messages", json={"body": "to a read-only topic"})
    assert refused.status_code == 409, refused.text
    assert bodies(client, topic, 3) == ["in queue 3"]  # the dropped write queue is still read
    assert_no_horizontal_overflow(page)
    shoot(page, "topics-changed", "topics")


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    master = BrokerProcess(tmp_path / "master").start()
    slave = BrokerProcess(
        tmp_path / "slave",
        broker_role="SLAVE",
        broker_id=1,
        ha_master_url=master.url,
        ha_metadata_interval_ms=300,
    ).start()
    try:
        yield master, slave
    finally:
        slave.kill()
        master.kill()


def test_the_cluster_page_shows_a_slaves_lag_and_a_refused_promotion(
    pages: Pages, replicated: tuple[BrokerProcess, BrokerProcess]
) -> None:
    master, slave = replicated
    with httpx.Client(base_url=master.url, timeout=30) as client:
        make_topic(client, "ops-replicated", 1)
        wait_until(lambda: client.get("/v1/admin/ha").json()["slaves"], what="the slave to connect")
        assert slave.process is not None
        os.kill(slave.process.pid, signal.SIGSTOP)  # it stops acknowledging
        try:
            produce(client, "ops-replicated", *[{"body": "x" * 1000}] * 20)
            lag = client.get("/v1/admin/ha").json()["slaves"][0]["lag_bytes"]
            assert lag > 20_000
            # The console draws replication every 10 s: it opens once the lag in time passed 1 s.
            wait_until(
                lambda: client.get("/v1/admin/ha").json()["slaves"][0]["lag_ms"] >= 1000,
                what="the stopped slave's lag to pass a second",
            )

            page = open_console(pages, master)
            row = page.locator('#slaves-table tr[data-slave="1"]')
            expect(row.locator("td").nth(3)).to_have_text(f"{lag:,}")
            # The lag in time: the age of the oldest message the stopped slave lacks, in seconds.
            expect(row.locator("td").nth(4)).to_have_text(re.compile(r"^[1-9][0-9]*\.[0-9] s$"))
            expect(page.locator("#ha-role")).to_have_text("ASYNC_MASTER")
            expect(page.locator("#disk-writable")).to_have_text("accepted")

            # Promote asks to be pressed twice; the broker refuses, and the page says why in its words.
            assert_reachable(page, page.locator("#promote"))
            page.click("#promote")
            expect(page.locator("#promote")).to_have_text("Yes, promote: make this broker the master")
            page.click("#promote")
            expect(page.locator("#promote-result")).to_contain_text("refused: ")
            expect(page.locator("#promote-result")).to_contain_text("this broker is the master of")
            assert client.get("/v1/admin/ha").json()["role"] == "ASYNC_MASTER"
            shoot(page, "clusters-master-with-lagging-slave")
        finally:
            os.kill(slave.process.pid, signal.SIGCONT)
        wait_until(
            lambda: client.get("/v1/admin/ha").json()["slaves"][0]["lag_bytes"] == 0,
            what="the slave to catch up",
        )
        expect(row.locator("td").nth(3)).to_have_text("0", timeout=20_000)
        expect(row.locator("td").nth(4)).to_have_text("0.0 s")

    on_slave = open_console(pages, slave)
    expect(on_slave.locator("#ha-role")).to_have_text("SLAVE")
    expect(on_slave.locator("#ha-master")).to_contain_text(f"slave of {master.url} (connected)")
    expect(on_slave.locator("#ha-master")).to_contain_text("its master is alive (connected)")

    # The slave's master is alive: the broker refuses the promotion, and the page offers to force it.
    expect(on_slave.locator("#promote-force")).to_be_hidden()
    on_slave.click("#promote")
    on_slave.click("#promote")
    result = on_slave.locator("#promote-result")
    expect(result).to_contain_text(f"refused: 40941: the master {master.url} of ")
    expect(result).to_contain_text("is alive: this slave is connected to it")
    assert httpx.get(f"{slave.url}/v1/admin/ha").json()["role"] == "SLAVE"
    shoot(on_slave, "clusters-slave-promotion-refused", "clusters")
    force = on_slave.locator("#promote-force")
    assert_reachable(on_slave, force)
    force.click()
    expect(force).to_have_text("Yes, force it: the live master is fenced and steps down")
    force.press("Escape")
    expect(result).to_have_text("promotion cancelled")
    assert httpx.get(f"{slave.url}/v1/admin/ha").json()["role"] == "SLAVE"
    force.click()
    force.click()
    expect(result).to_contain_text("promoted: ASYNC_MASTER in epoch ")
    promoted = httpx.get(f"{slave.url}/v1/admin/ha").json()
    assert promoted["role"] == "ASYNC_MASTER"
    expect(result).to_have_text(f"promoted: ASYNC_MASTER in epoch {promoted['epoch']}")
    expect(on_slave.locator("#ha-role")).to_have_text("ASYNC_MASTER")
    expect(force).to_be_hidden()


def shoot(page: Any, name: str, view: str | None = None) -> Path:
    """A picture of the window's width of ``name``, or of one view (``#name``, or ``#view``) when it
    is one."""
    width = page.viewport_size["width"]
    SHOTS_DIR.mkdir(parents=True, exist_ok=True)
    path = SHOTS_DIR / f"{name}-{width}.png"
    view = view or (name if name in VIEWS else None)
    if view is not None:
        page.locator(f"#{view}").screenshot(path=str(path))
    else:
        page.screenshot(path=str(path), full_page=True)
    return path


@pytest.mark.parametrize("size", VIEWPORTS)
def test_every_view_with_state_at_a_desktops_and_a_phones_width(
    pages: Pages, broker: BrokerProcess, client: httpx.Client, size: tuple[int, int]
) -> None:
    topic, group = f"ops-views-{size[0]}", f"ops-views-group-{size[0]}"
    make_topic(client, topic, 4)
    produce(
        client,
        topic,
        *[
            {
                "body": f'{{"order": {n}, "state": "paid"}}',
                "queue_id": n % 4,
                "tags": "Paid",
                "keys": [f"o-{n}"],
            }
            for n in range(8)
        ],
    )
    for client_id in ("worker-a", "worker-b"):
        join(client, group, client_id, topic)
    client.put(
        f"/v1/groups/{group}/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 1}]}
    )
    client.put(f"/v1/groups/{group}/config", json={"max_reconsume_times": 0})
    client.post(f"/v1/groups/{group}/retry", json={"topic": topic, "queue_id": 1, "offset": 0})
    client.post(
        f"/v1/topics/{topic}/messages",
        params={"transaction": "begin", "producer_group": f"views-producers-{size[0]}"},
        json={"messages": [{"body": "a held order"}]},
    )
    produce(client, topic, {"body": "in two hours", "delay_level": 18})
    hook = f"http://127.0.0.1:{free_port()}/orders-hook"
    pushed = client.put(
        f"/v1/groups/{group}-push/push", json={"topic": topic, "url": hook, "timeout_ms": 1000}
    )
    assert pushed.status_code in (200, 201), pushed.text
    produce(client, topic, {"body": "for the hook", "queue_id": 0})  # a push starts from the end

    page = open_console(pages, broker, size)
    group_row = page.locator(f'#groups-table tr[data-group="{group}"]').first
    group_row.locator("button.group-details").click()
    expect(page.locator("#group-members tbody tr")).to_have_count(2)
    page.fill("#dlq-group", group)
    page.click("#dlq-show")
    expect(page.locator("#dlq-table tbody tr").first).to_contain_text(topic)
    page.fill("#browse-topic", topic)
    page.select_option("#body-format", "json")
    page.click("#browse-show")
    plain = page.locator("#browse-result tr", has_text="for the hook")
    expect(plain.locator(".encoding")).to_have_text("not JSON: as text ")
    parsed = page.locator("#browse-result tr", has_text='"order": 3')
    expect(parsed.locator(".encoding")).to_have_text("JSON ")
    expect(parsed.locator(".body-text")).to_have_text('{\n  "order": 3,\n  "state": "paid"\n}')
    expect(page.locator("#delays-table tr[data-level='18'] td").nth(2)).not_to_have_text("0")
    expect(page.locator("#tx-table tbody tr").first).to_contain_text("views-producers")
    page.select_option("#lookup-mode", "key")
    page.fill("#lookup-topic", topic)
    page.fill("#lookup-key", "o-3")
    page.click("#lookup-form button[type=submit]")
    expect(page.locator("#lookup-result tr[data-msg-id]")).to_have_count(1)
    expect(page.locator("#slaves-table tbody")).to_contain_text("no slave connected")
    expect(page.locator(f'#push-table tr[data-group="{group}-push"] td').nth(9)).not_to_have_text(
        "-", timeout=20_000
    )

    assert_no_horizontal_overflow(page)
    for view in VIEWS:
        assert_reachable(page, page.locator(f"#{view} h2"))
        shoot(page, view)
    shoot(page, "whole-page")


def test_bodies_as_hex_and_the_views_by_keyboard(
    pages: Pages, broker: BrokerProcess, client: httpx.Client
) -> None:
    topic = "ops-hex"
    make_topic(client, topic, 1)
    produce(client, topic, {"body": "AZ"})
    page = open_console(pages, broker, PHONE)
    # The menu by keyboard: Tab reaches the Dead letters link, Enter goes there.
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.getAttribute('href')") == "#dead-letters":
            break
    else:
        pytest.fail("Tab never reached the Dead letters link")
    page.keyboard.press("Enter")
    page.wait_for_function("() => location.hash === '#dead-letters'")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.id") == "dlq-group"

    page.fill("#browse-topic", topic)
    page.select_option("#body-format", "hex")
    page.click("#browse-show")
    expect(page.locator("#browse-result .body").first).to_have_text("hex, 2 bytes 41 5a")
    assert_no_horizontal_overflow(page)
