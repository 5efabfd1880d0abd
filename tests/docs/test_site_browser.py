"""The built site in headless Chromium with every request to another host refused: pages render
offline and Mermaid draws the diagrams from the site's own copy."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser.conftest import CHROMIUM_FLAGS, chromium_path, unavailable


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    executable = chromium_path()
    if executable is None:
        unavailable("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def test_diagrams_render_offline(served: str, chromium: Any) -> None:
    context = chromium.new_context()
    page = context.new_page()
    page.set_default_timeout(30_000)
    refused: list[str] = []
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    def route(request_route: Any) -> None:
        if urlsplit(request_route.request.url).hostname == "127.0.0.1":
            request_route.continue_()
        else:
            refused.append(request_route.request.url)
            request_route.abort()

    page.route("**/*", route)
    try:
        page.goto(f"{served}/concepts/topics-and-queues/")
        # Material draws each diagram into a closed shadow root of a new div.mermaid that replaces the
        # pre.mermaid holding its source: drawn, no source is left and each div has the diagram's size.
        page.wait_for_function(
            "document.querySelectorAll('div.mermaid').length === 2"
            " && document.querySelectorAll('pre.mermaid').length === 0"
        )
        heights = [
            box["height"] for box in (div.bounding_box() for div in page.locator("div.mermaid").all()) if box
        ]
        assert len(heights) == 2 and min(heights) > 100, heights
        page.goto(f"{served}/reference/errors/")
        assert page.locator('[id="40904"]').count() == 1
    finally:
        context.close()
    assert not refused, f"the site asked other hosts for {refused}"
    assert not errors, errors
