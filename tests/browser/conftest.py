"""Headless Chromium (Debian's package) driven by Playwright against a real broker process.

The browser tests need ``/usr/bin/chromium`` (or ``WHARF_CHROMIUM``) and the ``playwright`` package;
Playwright's own browser downloads are never used. Without them the tests are skipped with the
reason, except in CI (``CI`` set), where a missing browser is a failure: CI must run them. Screenshots
go to ``tmp/artifacts/`` (or ``WHARF_ARTIFACTS_DIR``): the ones tests take on purpose on every run, and
a screenshot with the page's HTML of every page of a failing test.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.server import ROOT, BrokerProcess
from tests.conftest import in_ci

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS_DIR = Path(os.environ.get("WHARF_ARTIFACTS_DIR", ROOT / "tmp" / "artifacts"))


def chromium_path() -> str | None:
    configured = os.environ.get("WHARF_CHROMIUM")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def unavailable(reason: str) -> None:
    if in_ci():
        pytest.fail(f"{reason}; CI must run the browser tests (see .ci/run)", pytrace=False)
    pytest.skip(reason)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one module. Playwright's sync API keeps an event loop running in this thread while
    it is started, so it must be stopped before other tests call ``asyncio.run``."""
    executable = chromium_path()
    if executable is None:
        unavailable("chromium is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


class Pages:
    """Opens pages, each in a browser context of its own (its own sessionStorage, cookies and
    viewport); on a failed test their screenshots and HTML are kept in the artifacts directory."""

    def __init__(self, browser: Any, request: pytest.FixtureRequest) -> None:
        self.browser = browser
        self.request = request
        self.opened: list[tuple[Any, Any, list[str]]] = []

    def open(
        self, base_url: str, *, width: int = 1280, height: int = 1000, timezone_id: str | None = None
    ) -> Any:
        options: dict[str, Any] = {"base_url": base_url, "viewport": {"width": width, "height": height}}
        if timezone_id is not None:
            options["timezone_id"] = timezone_id
        context = self.browser.new_context(**options)
        page = context.new_page()
        page.set_default_timeout(10_000)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        self.opened.append((context, page, errors))
        return page

    def close(self) -> list[str]:
        """Close every page; the JavaScript errors they raised."""
        report = getattr(self.request.node, "report_call", None)
        failed = report is not None and report.failed
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.request.node.nodeid)
        errors: list[str] = []
        for index, (context, page, page_errors) in enumerate(self.opened):
            if failed and not page.is_closed():
                ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
                stem = ARTIFACTS_DIR / (name if index == 0 else f"{name}.{index}")
                page.screenshot(path=f"{stem}.png", full_page=True)
                Path(f"{stem}.html").write_text(page.content())
                if page_errors:
                    Path(f"{stem}.errors.txt").write_text("\n".join(page_errors))
            errors.extend(page_errors)
            context.close()
        return errors


@pytest.fixture
def pages(browser: Any, request: pytest.FixtureRequest) -> Iterator[Pages]:
    opened = Pages(browser, request)
    yield opened
    errors = opened.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def page(pages: Pages, broker: BrokerProcess) -> Any:
    """A fresh page on the module's broker, 1280 x 1000."""
    return pages.open(broker.url)


def save_screenshot(page: Any, case: str) -> Path:
    """Keep a full-page screenshot as ``console-<case>-<width>x<height>.png`` for a person to look at,
    whatever the outcome."""
    size = page.viewport_size
    ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS_DIR / f"console-{case}-{size['width']}x{size['height']}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
