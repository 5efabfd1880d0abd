"""The console while its broker is down: a banner says so, and goes when the broker answers again."""

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
