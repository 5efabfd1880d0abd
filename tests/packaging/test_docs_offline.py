"""/docs and /redoc in headless Chromium with every host but the broker's unreachable: Swagger UI
and ReDoc render from the package's own files, and nothing is fetched from elsewhere."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from app.api.docs import ASSETS_DIR
from tests.api.server import BrokerProcess
from tests.browser.conftest import in_ci

try:
    from playwright.sync_api import expect
except ImportError:
    if in_ci():
        raise
    pytest.skip("the playwright package is not installed (pip install -e '.[test]')", allow_module_level=True)


# ReDoc's "API docs by Redocly" credit shows this logo, and hides it when it cannot be loaded.
DECORATIONS = {"https://cdn.redoc.ly/redoc/logo-mini.svg"}


@pytest.fixture
def offline_page(browser: Any, broker: BrokerProcess) -> Iterator[tuple[Any, list[str]]]:
    """A page that reaches the broker and nothing else; the second item lists what it tried."""
    context = browser.new_context(base_url=broker.url)
    blocked: list[str] = []
    broker_host = urlsplit(broker.url).netloc

    def only_the_broker(route: Any) -> None:
        url = route.request.url
        if urlsplit(url).netloc == broker_host or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            blocked.append(url)
            route.abort("internetdisconnected")

    context.route("**/*", only_the_broker)
    page = context.new_page()
    page.set_default_timeout(20_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page, blocked
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def test_swagger_ui_lists_the_operations_offline(offline_page: tuple[Any, list[str]]) -> None:
    page, blocked = offline_page
    page.goto("/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Wharf")
    operations = page.locator(".opblock-summary-path")
    expect(operations.filter(has_text="/v1/topics/{topic}/messages").first).to_be_visible()
    assert operations.count() > 10
    assert blocked == []


def test_redoc_renders_offline(offline_page: tuple[Any, list[str]]) -> None:
    page, blocked = offline_page
    page.goto("/redoc")
    expect(page.locator(".api-info h1")).to_contain_text("Wharf")
    expect(page.locator("h2", has_text="Liveness: the process answers")).to_be_attached()
    assert set(blocked) <= DECORATIONS


def test_the_vendored_assets_are_the_pinned_releases(client: httpx.Client) -> None:
    """Each file is the one of the npm release VENDORED.md names, and it is served as it is."""
    for line in (ASSETS_DIR / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((ASSETS_DIR / name).read_bytes()).hexdigest() == digest, name
        served = client.get(f"/docs/assets/{name}")
        assert served.status_code == 200 and hashlib.sha256(served.content).hexdigest() == digest
