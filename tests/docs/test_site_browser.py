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


def test_diagrams_render_offline(site: Path, served: str, chromium: Any) -> None:
    """Every page with a diagram draws each of them, with nothing asked of another host."""
    with_diagrams = {
        html.parent.relative_to(site).as_posix(): html.read_text().count('<pre class="mermaid">')
        for html in site.rglob("index.html")
        if '<pre class="mermaid">' in html.read_text()
    }
    assert with_diagrams.get("concepts/topics-and-queues") == 2, with_diagrams
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
        for path, count in with_diagrams.items():
            page.goto(f"{served}/{path}/")
            # Material draws each diagram into a closed shadow root of a new div.mermaid that replaces
            # the pre.mermaid holding its source: drawn, no source is left and each div has a size.
            page.wait_for_function(
                f"document.querySelectorAll('div.mermaid').length === {count}"
                " && document.querySelectorAll('pre.mermaid').length === 0"
            )
            boxes = [div.bounding_box() for div in page.locator("div.mermaid").all()]
            heights = [box["height"] for box in boxes if box]
            assert len(heights) == count and min(heights) > 100, (path, heights)
        page.goto(f"{served}/reference/errors/")
        assert page.locator('[id="40904"]').count() == 1
    finally:
        context.close()
    assert not refused, f"the site asked other hosts for {refused}"
    assert not errors, errors
