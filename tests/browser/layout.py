"""What every console page must be at every size: no sideways scrolling, its actions on screen."""

from __future__ import annotations

from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the test modules skip (or fail in CI) with the reason
    expect = None

PHONE = (390, 844)
DESKTOP = (1280, 800)
VIEWPORTS = [pytest.param(PHONE, id="390x844"), pytest.param(DESKTOP, id="1280x800")]


def assert_no_horizontal_overflow(page: Any) -> None:
    scroll_width, client_width = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    if scroll_width > client_width:
        wider = page.evaluate(WIDER)
        raise AssertionError(f"the page is {scroll_width} px wide in a {client_width} px window: {wider}")


# The innermost elements whose content is wider than they are, or that reach past the window's edge.
WIDER = """() => [...document.querySelectorAll("body *")]
  .filter((node) => (node.clientWidth > 0 && node.scrollWidth > node.clientWidth)
    || node.getBoundingClientRect().right > document.documentElement.clientWidth)
  .reverse().slice(0, 5)
  .map((node) => `${node.tagName.toLowerCase()}${node.id ? "#" + node.id : ""} (${node.scrollWidth} px in ${node.clientWidth})`)"""


def assert_reachable(page: Any, locator: Any) -> None:
    """Scrolled to, ``locator`` is visible and lies wholly inside the window's width."""
    locator.scroll_into_view_if_needed()
    assert expect is not None
    expect(locator).to_be_visible()
    box = locator.bounding_box()
    width = page.viewport_size["width"]
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (
        f"{locator} lies at x {box and box['x']}..{box and box['x'] + box['width']} in a {width} px window"
    )
