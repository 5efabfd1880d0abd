"""Fixtures of the packaging tests: headless Chromium (tests/browser) and a throw-away PostgreSQL
database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser.conftest import browser  # noqa: F401 - the fixture, shared with the console tests
from tests.conftest import throwaway_database


@pytest.fixture(scope="module")
def throwaway_postgres_url() -> Iterator[str]:
    """An empty PostgreSQL database for this module, dropped at its end."""
    yield from throwaway_database("wharf_pkg")
