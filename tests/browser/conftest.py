"""Headless Chromium (Debian's package) driven by Playwright against a real broker process.

The browser tests need ``/usr/bin/chromium`` (or ``WHARF_CHROMIUM``) and the ``playwright`` package;
Playwright's own browser downloads are never used. Without them the tests are skipped with the
reason, except in CI (``CI`` set), where a missing browser is a failure: CI must run them. A failing
test leaves a screenshot and the page's HTML in ``tmp/artifacts/`` (or ``WHARF_ARTIFACTS_DIR``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.server import ROOT, BrokerProcess

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


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


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


@pytest.fixture
def page(browser: Any, broker: BrokerProcess, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh page; on failure its screenshot and HTML are kept in the artifacts directory."""
    context = browser.new_context(base_url=broker.url, viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(10_000)
    console_errors: list[str] = []
    page.on("pageerror", lambda error: console_errors.append(str(error)))
    yield page
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in request.node.nodeid)
        page.screenshot(path=str(ARTIFACTS_DIR / f"{name}.png"), full_page=True)
        (ARTIFACTS_DIR / f"{name}.html").write_text(page.content())
        if console_errors:
            (ARTIFACTS_DIR / f"{name}.errors.txt").write_text("\n".join(console_errors))
    context.close()
    assert not console_errors, f"JavaScript errors on the page: {console_errors}"
