"""Fixtures of the packaging tests: headless Chromium (tests/browser) and a throw-away PostgreSQL
database."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.browser.conftest import browser  # noqa: F401 - the fixture, shared with the console tests
from tests.routing.conftest import PG_ADMIN


@pytest.fixture(scope="module")
def throwaway_postgres_url() -> Iterator[str]:
    """An empty PostgreSQL database for this module, dropped at its end."""
    name = f"wharf_pkg_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL is needed and is not reachable at {PG_ADMIN}: {exc}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    yield f"{base}/{name}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
