"""The web console in a real browser: topics, produce from the page, the live tail, lookups, groups."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import orjson
import pytest
from websockets.sync.client import connect

from tests.api.server import BrokerProcess
from tests.browser.conftest import in_ci

try:
    from playwright.sync_api import expect
except ImportError:
    if in_ci():
        raise
    pytest.skip("the playwright package is not installed (pip install -e '.[test]')", allow_module_level=True)

_names = itertools.count()


def new_topic(client: httpx.Client, queues: int = 2) -> str:
    name = f"console-{next(_names)}"
    response = client.post("/v1/topics", json={"name": name, "queues": queues})
    assert response.status_code == 201, response.text
    return name


def open_console(page: Any) -> None:
    page.goto("/console/")
    expect(page.locator("#connection")).to_have_text("live")


def test_the_console_lists_topics_with_their_queues(page: Any, client: httpx.Client) -> None:
    topic = new_topic(client, queues=3)
    client.post(f"/v1/topics/{topic}/messages", json={"body": "one", "queue_id": 2})
    open_console(page)
    row = page.locator(f'#topics-table tr[data-topic="{topic}"]')
    expect(row).to_contain_text("3 / 3")
    expect(row).to_contain_text("#2: 0..1")
    expect(page.locator("#broker-identity")).to_contain_text("DefaultCluster / broker-a")


def test_a_message_produced_from_the_page_arrives_in_the_live_tail(page: Any, client: httpx.Client) -> None:
    topic = new_topic(client)
    open_console(page)
    page.fill("#tail-topic", topic)
    page.click("#tail-start")
    expect(page.locator("#tail-state")).to_have_text(f"tailing {topic} (2 queues)")
    page.fill("#produce-topic", topic)
    page.fill("#produce-tags", "FromThePage")
    page.fill("#produce-keys", "order-7")
    page.fill("#produce-body", "hello from the browser")
    page.click("#produce-send")
    expect(page.locator("#produce-result")).to_contain_text("SEND_OK")
    row = page.locator("#tail-rows tr").first
    expect(row).to_contain_text("hello from the browser")
    expect(row).to_contain_text("FromThePage")
    expect(row).to_contain_text("order-7")
    page.click("#tail-stop")
    expect(page.locator("#tail-state")).to_have_text("stopped")


def test_the_live_tail_keeps_granting_credit(page: Any, client: httpx.Client) -> None:
    topic = new_topic(client, queues=1)
    open_console(page)
    page.fill("#tail-topic", topic)
    page.click("#tail-start")
    expect(page.locator("#tail-state")).to_contain_text("tailing")
    # More than the page's initial credit of 100: it must grant more as messages arrive.
    for batch in range(3):
        messages = [{"body": f"tail {batch * 60 + n}"} for n in range(60)]
        assert client.post(f"/v1/topics/{topic}/messages", json={"messages": messages}).status_code == 200
    expect(page.locator("#tail-rows tr").first).to_contain_text("tail 179")
    expect(page.locator("#tail-rows tr")).to_have_count(180)


def test_the_live_tail_shows_why_the_broker_closed_it(page: Any) -> None:
    open_console(page)
    page.fill("#tail-topic", "no-such-topic")
    page.click("#tail-start")
    expect(page.locator("#tail-state")).to_have_text("closed (4404): 40402 topic 'no-such-topic' not found")


def test_lookup_by_id_by_key_and_by_queue_and_offset(page: Any, client: httpx.Client) -> None:
    topic = new_topic(client)
    answer = client.post(
        f"/v1/topics/{topic}/messages", json={"body": "find me", "keys": ["invoice-9"], "queue_id": 1}
    ).json()["results"][0]
    open_console(page)
    result = page.locator("#lookup-result")

    page.select_option("#lookup-mode", "id")
    page.fill("#lookup-id", answer["msg_id"])
    page.click("#lookup-form button[type=submit]")
    expect(result).to_contain_text("find me")

    page.select_option("#lookup-mode", "key")
    page.fill("#lookup-topic", topic)
    page.fill("#lookup-key", "invoice-9")
    page.click("#lookup-form button[type=submit]")
    expect(result).to_contain_text(answer["msg_id"])

    page.select_option("#lookup-mode", "offset")
    page.fill("#lookup-queue", "1")
    page.fill("#lookup-offset", "0")
    page.click("#lookup-form button[type=submit]")
    expect(result).to_contain_text("invoice-9")

    page.select_option("#lookup-mode", "id")
    page.fill("#lookup-id", "0" * 31 + "1")
    page.click("#lookup-form button[type=submit]")
    expect(result).to_contain_text("40404")


def test_a_consumer_group_shows_its_lag_per_queue(
    page: Any, client: httpx.Client, broker: BrokerProcess
) -> None:
    topic = new_topic(client)
    for queue_id, count in ((0, 3), (1, 2)):
        messages = [{"body": f"m{n}", "queue_id": queue_id} for n in range(count)]
        client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    url = broker.url.replace("http://", "ws://") + f"/v1/ws/subscribe?topic={topic}&group=billing&from=first"
    with connect(url, open_timeout=10) as socket:
        socket.send(orjson.dumps({"type": "permit", "n": 1}).decode())
        frames = [orjson.loads(socket.recv(timeout=10)) for _ in range(2)]
        (message,) = next(frame for frame in frames if frame["type"] == "messages")["messages"]
        socket.send(orjson.dumps({"type": "ack", "queue_id": message["queue_id"], "offset": 0}).decode())
        assert orjson.loads(socket.recv(timeout=10))["type"] == "committed"
        open_console(page)
        row = page.locator('#groups-table tr[data-group="billing"]')
        expect(row.locator("td").nth(1)).to_have_text(topic)
        expect(row.locator("td").nth(3)).to_have_text("4")  # 5 stored, 1 committed
        expect(row).to_contain_text(f"#{message['queue_id']}: lag")


def test_the_broker_appears_in_its_cluster(page: Any) -> None:
    open_console(page)
    expect(page.locator("#clusters-table")).to_contain_text("broker-a")


def test_many_topics_and_groups_are_shown_a_page_at_a_time(page: Any, client: httpx.Client) -> None:
    names = [f"zz-paged-{index:03d}" for index in range(150)]  # after every other topic by name
    assert (
        client.post("/v1/topics", json={"topics": [{"name": n, "queues": 1} for n in names]}).json()[
            "created"
        ]
        == 150
    )
    for index in range(3):
        offsets = {"offsets": [{"topic": names[index], "queue_id": 0, "offset": 0}]}
        assert client.put(f"/v1/groups/zz-group-{index}/offsets", json=offsets).status_code == 200
    total = client.get("/v1/stats").json()["topics"]
    pages = -(-total // 100)
    open_console(page)
    expect(page.locator("#topics-page")).to_have_text(f"1–100 of {total:,}")
    expect(page.locator("#topics-prev")).to_be_disabled()
    for number in range(2, pages + 1):
        page.click("#topics-next")
        expect(page.locator("#topics-page")).to_have_text(
            f"{(number - 1) * 100 + 1:,}–{min(number * 100, total):,} of {total:,}"
        )
    expect(page.locator("#topics-next")).to_be_disabled()
    expect(page.locator('#topics-table tr[data-topic="zz-paged-149"]')).to_have_count(1)
    assert page.locator("#topics-table tbody tr").count() == total - (pages - 1) * 100
    page.click("#topics-prev")
    expect(page.locator('#topics-table tr[data-topic="zz-paged-149"]')).to_have_count(0)
    expect(page.locator("#stat-topics")).to_have_text(f"{total:,}")
    expect(page.locator('#groups-table tr[data-group="zz-group-2"]')).to_have_count(1)
