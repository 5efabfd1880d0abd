"""The registry database: engine creation and schema migrations with Alembic."""

from __future__ import annotations

import math
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, text

# Alembic's "package:path" form: the migrations are found inside the installed package.
MIGRATIONS = "app:migrations"


class SchemaOutOfDateError(RuntimeError):
    """The database schema is not at the newest migration and upgrading was not allowed."""


# libpq rounds a connect timeout under 2 s up to 2 s.
MIN_CONNECT_TIMEOUT_S = 2


def make_engine(url: str, timeout_s: float = 5.0) -> Engine:
    """An engine whose every wait is bounded by ``timeout_s``: connecting, taking a pooled
    connection, a statement on the server, a lock, and unacknowledged TCP data."""
    if url.startswith("sqlite"):
        database = url.split("///", 1)[-1]
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url, pool_timeout=timeout_s, connect_args={"timeout": timeout_s, "check_same_thread": False}
        )

        @event.listens_for(engine, "connect")
        def _pragmas(connection, _record):
            cursor = connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        return engine
    timeout_ms = max(1, int(timeout_s * 1000))
    connect_args: dict[str, object] = {}
    if url.startswith("postgresql"):
        connect_args = {
            "connect_timeout": max(MIN_CONNECT_TIMEOUT_S, math.ceil(timeout_s)),
            "options": f"-c statement_timeout={timeout_ms} -c lock_timeout={timeout_ms}",
            "tcp_user_timeout": timeout_ms,
            "keepalives": 1,
            "keepalives_idle": max(1, math.ceil(timeout_s)),
            "keepalives_interval": 1,
            "keepalives_count": 3,
        }
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=5,
        max_overflow=5,
        pool_timeout=timeout_s,
        connect_args=connect_args,
    )


def alembic_config() -> Config:
    """Alembic's configuration for the broker: no alembic.ini (that is the developers' command line),
    only the migrations' location inside the package."""
    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


# Brokers starting together against one PostgreSQL take turns migrating.
MIGRATION_LOCK_KEY = 0x57686172


def upgrade(engine: Engine, revision: str = "head") -> None:
    config = alembic_config()
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str) -> None:
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def ensure_schema(engine: Engine, auto_upgrade: bool) -> None:
    """Bring the schema to the newest migration, or refuse with a clear message when not allowed."""
    current, head = current_revision(engine), head_revision()
    if current == head:
        return
    if not auto_upgrade:
        raise SchemaOutOfDateError(
            f"the route registry schema is at {current or 'nothing'}, this broker needs {head}: "
            "run `alembic upgrade head` (with WHARF_DATABASE_URL set) or set WHARF_DATABASE_AUTO_UPGRADE=true"
        )
    upgrade(engine)
