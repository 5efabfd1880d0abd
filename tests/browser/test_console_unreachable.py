"""The console while its broker is down: a banner says so, and goes when the broker answers again; the
live tail reconnects and resumes where it was."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.browser.conftest import Pages, in_ci, save_screenshot
from tests.browser.layout import PHONE, assert_no_horizontal_overflow

try:
    from playwright.sync_api import expect
except ImportError:
    if in_ci():
        raise
    pytest.skip("the playwright package is not installed (pip install -e '.[test]')", allow_module_level=True)


@pytest.mark.slow
def test_a_stopped_broker_shows_a_banner_until_it_is_back(pages: Pages, tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store").start()
    try:
        assert httpx.post(f"{broker.url}/v1/topics", json={"name": "kept", "queues": 1}).status_code == 201
        page = pages.open(broker.url, width=PHONE[0], height=PHONE[1])
        page.goto("/console/")
        expect(page.locator("#connection")).to_have_text("live")
        banner = page.locator("#unreachable")
        expect(banner).to_be_hidden()

        broker.stop()
        expect(banner).to_be_visible()
        expect(banner).to_contain_text("Broker unreachable since")
        page.locator("#produce").scroll_into_view_if_needed()
        expect(banner).to_be_in_viewport()  # it stays on screen wherever the page is scrolled to
        expect(page.locator("#connection")).to_have_text("unreachable")
        # What the page last saw stays on it.
        expect(page.locator('#topics-table tr[data-topic="kept"]')).to_have_count(1)
        assert_no_horizontal_overflow(page)
        save_screenshot(page, "unreachable")

        broker.start()  # the same port and store
        expect(banner).to_be_hidden()
        expect(page.locator("#connection")).to_have_text("live")
        expect(page.locator('#topics-table tr[data-topic="kept"]')).to_have_count(1)
    finally:
        broker.stop()


@pytest.mark.slow
def test_the_live_tail_resumes_without_loss_or_repeats_when_the_broker_is_back(
    pages: Pages, tmp_path: Path
) -> None:
    broker = BrokerProcess(tmp_path / "store").start()

    def produce(body: str, queue_id: int) -> None:
        message = {"body": body, "queue_id": queue_id}
        assert httpx.post(f"{broker.url}/v1/topics/tailed/messages", json=message).status_code == 200

    try:
        assert httpx.post(f"{broker.url}/v1/topics", json={"name": "tailed", "queues": 2}).status_code == 201
        page = pages.open(broker.url)
        page.goto("/console/")
        expect(page.locator("#connection")).to_have_text("live")
        page.fill("#tail-topic", "tailed")
        page.click("#tail-start")
        state, rows = page.locator("#tail-state"), page.locator("#tail-rows tr")
        expect(state).to_have_text("tailing tailed (2 queues)")
        produce("before the restart", 0)
        expect(rows).to_have_count(1)

        broker.stop()
        expect(state).to_contain_text("reconnecting")
        broker.start()  # the same port and store
        # Stored while the tail is (most likely) still away: its new socket starts at the end, and
        # what came meanwhile is pulled over HTTP first.
        produce("while away 0", 0)
        produce("while away 1", 1)
        expect(state).to_have_text("tailing tailed (2 queues)")
        produce("after the restart", 1)
        expect(rows).to_have_count(4)
        expect(rows.first).to_contain_text("after the restart")
        bodies = sorted(rows.nth(index).locator(".body-text").inner_text() for index in range(4))
        assert bodies == ["after the restart", "before the restart", "while away 0", "while away 1"]
        expect(page.locator("#tail-stop")).to_be_enabled()
    finally:
        broker.stop()
