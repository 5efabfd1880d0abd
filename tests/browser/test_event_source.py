"""A browser follows a topic with EventSource - the README's page, docs/examples/follow-orders.html -
and survives a broker restart without losing or repeating an event (it resumes with Last-Event-ID)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.server import ROOT, BrokerProcess
from tests.browser.conftest import Pages, in_ci

try:
    from playwright.sync_api import expect
except ImportError:
    if in_ci():
        raise
    pytest.skip("the playwright package is not installed (pip install -e '.[test]')", allow_module_level=True)

PAGE = ROOT / "docs" / "examples" / "follow-orders.html"


def produce(broker: BrokerProcess, *bodies: str) -> None:
    messages = [{"body": body} for body in bodies]
    response = httpx.post(f"{broker.url}/v1/topics/orders/messages", json={"messages": messages})
    assert response.status_code == 200, response.text


@pytest.mark.slow
def test_the_readme_page_follows_a_topic_across_a_broker_restart(pages: Pages, tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store", hold_check_interval_ms=60_000, sse_retry_ms=200).start()
    try:
        response = httpx.post(f"{broker.url}/v1/topics", json={"name": "orders", "queues": 1})
        assert response.status_code == 201, response.text
        produce(broker, *(f"m{i}" for i in range(5)))
        page = pages.open(broker.url)
        # The page is served from the broker's origin, as it would be by any web server in front of it.
        page.route(
            f"{broker.url}/follow-orders.html",
            lambda route: route.fulfill(body=PAGE.read_text(), content_type="text/html"),
        )
        page.goto("/follow-orders.html")
        items = page.locator("#events li")
        expect(items).to_have_count(5)

        produce(broker, *(f"m{i}" for i in range(5, 10)))
        broker.stop()  # some of these may not have reached the page: they must come after the restart
        broker.start()  # the same port and store
        produce(broker, *(f"m{i}" for i in range(10, 15)))
        expect(items).to_have_count(15)
        assert items.all_text_contents() == [f"m{i}" for i in range(15)]
    finally:
        broker.stop()
