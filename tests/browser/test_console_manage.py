"""Managing the broker from the console at a phone's and a desktop's size: create a topic, produce,
read every field of its messages, reset a group's offsets, delete the topic; the rate chart's time axis."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.browser.conftest import Pages, in_ci, save_screenshot
from tests.browser.layout import VIEWPORTS, assert_no_horizontal_overflow, assert_reachable

try:
    from playwright.sync_api import expect
except ImportError:
    if in_ci():
        raise
    pytest.skip("the playwright package is not installed (pip install -e '.[test]')", allow_module_level=True)

LONG_BODY = "start-" + "0123456789" * 60 + "-end"
RISEN = """selector => {
  const line = document.querySelector(selector);
  const baseline = Number(document.querySelector("#rate-chart .x-axis line").getAttribute("y1"));
  return line !== null && line.getAttribute("d").split(/[ML ]/).filter(Boolean)
    .some(point => Number(point.split(",")[1]) < baseline - 1);
}"""
ZONE = "Asia/Kolkata"  # 5 h 30 min from UTC: a label in UTC, or rounded in UTC, cannot pass for local time


def open_console(pages: Pages, broker: BrokerProcess, size: tuple[int, int], **options: Any) -> Any:
    page = pages.open(broker.url, width=size[0], height=size[1], **options)
    page.goto("/console/")
    expect(page.locator("#connection")).to_have_text("live")
    return page


@pytest.mark.parametrize("size", VIEWPORTS)
def test_a_topic_from_creation_to_deletion(
    pages: Pages, broker: BrokerProcess, client: httpx.Client, size: tuple[int, int]
) -> None:
    page = open_console(pages, broker, size)
    assert_no_horizontal_overflow(page)
    topic = f"console-manage-{size[0]}"

    # Create a topic.
    assert_reachable(page, page.locator("#create-topic"))
    page.fill("#create-topic-name", "no spaces")  # the browser checks a name before it is sent
    assert page.eval_on_selector("#create-topic-name", "input => input.validity.patternMismatch")
    page.fill("#create-topic-name", topic)
    page.fill("#create-topic-queues", "2")
    page.click("#create-topic")
    expect(page.locator("#create-topic-result")).to_have_text(f"created {topic} with 2 queues")
    assert client.get(f"/v1/topics/{topic}").json()["read_queues"] == 2
    row = page.locator(f'#topics-table tr[data-topic="{topic}"]')
    expect(row).to_contain_text("#1: 0..0")

    # Produce with a tag, keys, properties and a long body.
    assert_reachable(page, page.locator("#produce-send"))
    page.fill("#produce-topic", topic)
    page.fill("#produce-tags", "Urgent")
    page.fill("#produce-keys", "order-1 order-2")
    page.fill("#produce-properties", "color=blue\nsource = console")
    page.fill("#produce-body", LONG_BODY)
    page.click("#produce-send")
    expect(page.locator("#produce-result")).to_contain_text("SEND_OK")
    sent = json.loads(page.locator("#produce-result").text_content())
    stored = client.get(f"/v1/messages/{sent['msg_id']}").json()
    assert stored["properties"] == {"color": "blue", "source": "console"}

    # Every field of the message in the topic's message list; the long body cut, then expanded.
    assert_reachable(page, row.locator("button.browse"))
    row.locator("button.browse").click()
    message = page.locator(f'#browse-result tr[data-msg-id="{sent["msg_id"]}"]')
    expect(message.locator("td.tags")).to_have_text("Urgent")
    expect(message.locator("td.keys")).to_have_text("order-1 order-2")
    expect(message.locator("td.unique-id")).to_have_text(sent["unique_id"])
    expect(message.locator("td.msg-id")).to_have_text(sent["msg_id"])
    expect(message.locator("td.properties li")).to_have_text(["color=blue", "source=console"])
    body = message.locator(".body-text")
    expect(body).not_to_contain_text("-end")
    assert len(body.text_content()) < len(LONG_BODY)
    expand = message.locator("button.expand")
    assert_reachable(page, expand)
    expand.click()
    expect(body).to_have_text(LONG_BODY)
    expect(expand).to_have_attribute("aria-expanded", "true")
    # Readable where it is: not squeezed into a column a few characters wide.
    width = page.viewport_size["width"]
    assert message.locator("td.body-cell").bounding_box()["width"] >= min(width / 2, 160)
    assert_no_horizontal_overflow(page)

    # Reset a group's offsets to the first message.
    group = f"console-billing-{size[0]}"
    queues = client.get(f"/v1/topics/{topic}/queues").json()["queues"]
    at_end = [{"topic": topic, "queue_id": q["queue_id"], "offset": q["max_offset"]} for q in queues]
    assert client.put(f"/v1/groups/{group}/offsets", json={"offsets": at_end}).status_code == 200
    assert sum(q["max_offset"] for q in queues) == 1
    group_row = page.locator(f'#groups-table tr[data-group="{group}"]')
    expect(group_row.locator("td").nth(3)).to_have_text("0")
    assert_reachable(page, group_row.locator("button.reset-group"))
    group_row.locator("button.reset-group").click()
    expect(page.locator("#reset-group")).to_have_value(group)
    expect(page.locator("#reset-topic")).to_have_value(topic)
    page.select_option("#reset-to", "first")
    assert_reachable(page, page.locator("#reset-offsets"))
    page.click("#reset-offsets")
    expect(page.locator("#reset-result")).to_contain_text(f"{group} on {topic} now reads from #0: 0, #1: 0")
    committed = client.get(f"/v1/groups/{group}/offsets", params={"topic": topic}).json()["offsets"]
    assert [(entry["committed_offset"], entry["lag"]) for entry in committed] == [
        (0, q["max_offset"]) for q in queues
    ]
    expect(group_row.locator("td").nth(3)).to_have_text("1")
    assert_no_horizontal_overflow(page)
    save_screenshot(page, "manage")

    # Delete the topic once its name is typed again.
    delete = row.locator("button.delete-topic")
    assert_reachable(page, delete)
    delete.click()
    confirm = row.locator("button.confirm-delete")
    expect(row).to_contain_text(f"Delete {topic} and all its messages?")
    assert_reachable(page, confirm)
    confirm.click()  # nothing typed
    expect(row.locator(".confirm-why")).to_have_text(f"type {topic} exactly to delete it")
    row.locator("input.confirm-name").fill(topic[:-1])
    confirm.click()
    assert client.get(f"/v1/topics/{topic}").status_code == 200  # not before the confirmation
    row.locator("input.confirm-name").fill(topic)
    confirm.click()
    expect(page.locator("#create-topic-result")).to_have_text(f"deleted {topic}")
    expect(row).to_have_count(0)
    assert client.get(f"/v1/topics/{topic}").status_code == 404
    assert_no_horizontal_overflow(page)


def test_reset_to_a_time_takes_the_time_as_local(
    pages: Pages, broker: BrokerProcess, client: httpx.Client
) -> None:
    topic, group = "console-reset-time", "console-reset-time-group"
    assert client.post("/v1/topics", json={"name": topic, "queues": 1}).status_code == 201
    first = client.post(f"/v1/topics/{topic}/messages", json={"body": "before"}).json()["results"][0]
    stored_ms = client.get(f"/v1/messages/{first['msg_id']}").json()["store_timestamp"]
    # The form takes whole seconds: the second message must be stored in a later second than the first.
    time.sleep(max(0.0, stored_ms // 1000 + 1 - time.time()))
    for body in ("after", "later"):
        client.post(f"/v1/topics/{topic}/messages", json={"body": body})
    second = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 1, "max_messages": 1})
    assert second.json()["messages"][0]["store_timestamp"] // 1000 > stored_ms // 1000
    at = datetime.fromtimestamp(stored_ms // 1000 + 1, ZoneInfo(ZONE))

    page = open_console(pages, broker, (1280, 800), timezone_id=ZONE)
    page.fill("#reset-group", group)
    page.fill("#reset-topic", topic)
    page.select_option("#reset-to", "time")
    page.fill("#reset-time", at.strftime("%Y-%m-%dT%H:%M:%S"))
    page.click("#reset-offsets")
    expect(page.locator("#reset-result")).to_contain_text("now reads from #0: 1")
    offsets = client.get(f"/v1/groups/{group}/offsets", params={"topic": topic}).json()["offsets"]
    assert [entry["committed_offset"] for entry in offsets] == [1]


@pytest.mark.parametrize("size", VIEWPORTS)
def test_the_rate_chart_has_a_time_axis_in_local_time(
    pages: Pages, broker: BrokerProcess, client: httpx.Client, size: tuple[int, int]
) -> None:
    steady = f"console-steady-{size[0]}"
    assert client.post("/v1/topics", json={"name": steady, "queues": 1}).status_code == 201
    page = open_console(pages, broker, size, timezone_id=ZONE)
    steady_row = page.locator(f'#topics-table tr[data-topic="{steady}"]').element_handle()
    refreshes = int(page.locator("body").get_attribute("data-refreshes"))
    ticks = page.locator("#rate-chart .x-axis .tick")
    expect(ticks.first).to_be_attached()
    assert ticks.count() >= 2
    positions = []
    for index in range(ticks.count()):
        tick = ticks.nth(index)
        at_ms = int(tick.get_attribute("data-t"))
        local = datetime.fromtimestamp(at_ms / 1000, ZoneInfo(ZONE))
        assert tick.locator("text").text_content() == local.strftime("%H:%M:%S")
        assert local.second % 15 == 0 and local.microsecond == 0  # on round local times
        positions.append(float(tick.locator("line").get_attribute("x1")))
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # A produce shows as a rise of the produced line once two refreshes have counted it.
    client.post("/v1/topics/console-rate/messages", json={"messages": [{"body": "r"}] * 20})
    page.wait_for_function(RISEN, arg="#rate-chart path.line.produce")
    # The refreshes that drew it kept the row of a topic that did not change: no button of it was
    # taken away from under a pointer.
    assert int(page.locator("body").get_attribute("data-refreshes")) > refreshes
    assert steady_row.evaluate("row => row.isConnected")
    assert_no_horizontal_overflow(page)


def test_a_refresh_keeps_the_buttons_of_a_row_whose_figures_changed(
    pages: Pages, broker: BrokerProcess, client: httpx.Client
) -> None:
    topic = "console-refresh-keeps-buttons"
    assert client.post("/v1/topics", json={"name": topic, "queues": 1}).status_code == 201
    page = open_console(pages, broker, (1280, 800))
    row = page.locator(f'#topics-table tr[data-topic="{topic}"]')
    expect(row).to_contain_text("#0: 0..0")
    button = row.locator("button.browse").element_handle()

    assert client.post(f"/v1/topics/{topic}/messages", json={"body": "one"}).status_code == 200
    expect(row).to_contain_text("#0: 0..1")  # the next refresh drew the new figures

    assert button.evaluate("button => button.isConnected"), "the refresh replaced the row's buttons"
    button.click()
    expect(page.locator("#messages")).to_contain_text("one")
