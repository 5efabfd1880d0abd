"""The console runs on @wharf/client: its built module, copied into the package by the client's
``npm run build`` (app/console/static/vendor/wharf-client/), is what the page loads, and every call the
page makes to the broker, HTTP or WebSocket, is made by the client's code."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from app.console import STATIC_DIR
from tests.browser.conftest import in_ci

try:
    from playwright.sync_api import expect
except ImportError:
    if in_ci():
        raise
    pytest.skip("the playwright package is not installed (pip install -e '.[test]')", allow_module_level=True)

VENDOR = STATIC_DIR / "vendor" / "wharf-client"
VENDOR_URL = "/console/vendor/wharf-client/"
_names = itertools.count()


def vendored_modules() -> list[Path]:
    return sorted(VENDOR.glob("*.js"))


def test_the_page_loads_every_module_of_the_vendored_client(page: Any) -> None:
    assert {path.name for path in vendored_modules()} >= {"index.js", "http.js", "subscribe.js", "socket.js"}
    loaded: dict[str, Any] = {}
    page.on("response", lambda response: loaded.setdefault(urlsplit(response.url).path, response))
    page.goto("/console/")
    expect(page.locator("#connection")).to_have_text("live")
    for module in vendored_modules():
        response = loaded.get(VENDOR_URL + module.name)
        assert response is not None, f"the console did not import {module.name} of the client"
        assert response.status == 200
        assert response.headers["content-type"].split(";")[0] in ("text/javascript", "application/javascript")
        assert response.body() == module.read_bytes()


class Initiators:
    """Who started each request of a page, from the DevTools protocol: the script at the top of the
    JavaScript stack that called fetch or opened the WebSocket."""

    def __init__(self, page: Any) -> None:
        self.calls: list[tuple[str, str, str]] = []  # (method, path, script) of every call to the broker
        session = page.context.new_cdp_session(page)
        session.on("Network.requestWillBeSent", self.on_request)
        session.on("Network.webSocketCreated", self.on_socket)
        session.send("Network.enable")

    @staticmethod
    def script(initiator: dict[str, Any]) -> str:
        frames = initiator.get("stack", {}).get("callFrames", [])
        return urlsplit(frames[0]["url"]).path if frames else f"({initiator.get('type')})"

    def on_request(self, event: dict[str, Any]) -> None:
        path = urlsplit(event["request"]["url"]).path
        if path.startswith(("/v1/", "/console/api/")):
            self.calls.append((event["request"]["method"], path, self.script(event["initiator"])))

    def on_socket(self, event: dict[str, Any]) -> None:
        self.calls.append(("WEBSOCKET", urlsplit(event["url"]).path, self.script(event.get("initiator", {}))))


def test_every_call_of_the_console_is_made_by_the_client(page: Any) -> None:
    initiators = Initiators(page)
    topic = f"through-the-client-{next(_names)}"
    page.goto("/console/")
    expect(page.locator("#connection")).to_have_text("live")
    page.fill("#create-topic-name", topic)
    page.click("#create-topic")
    expect(page.locator("#create-topic-result")).to_have_text(f"created {topic} with 4 queues")
    page.fill("#tail-topic", topic)
    page.click("#tail-start")
    expect(page.locator("#tail-state")).to_have_text(f"tailing {topic} (4 queues)")
    page.fill("#produce-topic", topic)
    page.fill("#produce-body", "made by the client")
    page.click("#produce-send")
    expect(page.locator("#tail-rows tr").first).to_contain_text("made by the client")
    page.fill("#browse-topic", topic)
    page.click("#browse-show")
    expect(page.locator("#browse-result")).to_contain_text("made by the client")

    made = {(method, path) for method, path, _ in initiators.calls}
    assert {
        ("GET", "/console/api/overview"),
        ("GET", "/v1/clusters"),
        ("POST", "/v1/topics"),
        ("POST", f"/v1/topics/{topic}/messages"),
        ("GET", f"/v1/topics/{topic}/queues"),
        ("WEBSOCKET", "/v1/ws/subscribe"),
    } <= made, made
    elsewhere = [
        (method, path, script)
        for method, path, script in initiators.calls
        if not script.startswith(VENDOR_URL)
    ]
    assert not elsewhere, f"calls not made by the client's modules: {elsewhere}"
