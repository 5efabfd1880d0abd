"""Every migration runs up and down, on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from app.routing.models import Base
from app.routing.schema import (
    SchemaOutOfDateError,
    current_revision,
    downgrade,
    ensure_schema,
    head_revision,
    make_engine,
    upgrade,
)


def tables(engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


def test_upgrade_then_downgrade_then_upgrade(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        upgrade(engine)
        assert current_revision(engine) == head_revision()
        assert tables(engine) == set(Base.metadata.tables)
        downgrade(engine, "base")
        assert current_revision(engine) is None
        assert tables(engine) == set()
        upgrade(engine)
        assert tables(engine) == set(Base.metadata.tables)
    finally:
        engine.dispose()


def test_migrations_match_the_models(database_url: str) -> None:
    """Autogenerate finds nothing to do: the migrations create exactly what the models declare."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = make_engine(database_url)
    try:
        upgrade(engine)
        with engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert differences == []
    finally:
        engine.dispose()


def test_ensure_schema_refuses_when_told_not_to_upgrade(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        with pytest.raises(SchemaOutOfDateError, match="alembic upgrade head"):
            ensure_schema(engine, auto_upgrade=False)
        ensure_schema(engine, auto_upgrade=True)
        ensure_schema(engine, auto_upgrade=False)  # at head now: nothing to refuse
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()
