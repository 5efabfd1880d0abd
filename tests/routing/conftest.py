"""Databases for the registry tests: a SQLite file, and the run's PostgreSQL database emptied per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> Iterator[str]:
    """An empty schema-less database per test: drop everything the last test made."""
    url = postgres_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("DROP SCHEMA public CASCADE")
        connection.execute("CREATE SCHEMA public")
    yield postgres_url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'registry.db'}"
    return str(request.getfixturevalue("fresh_postgres_url"))
