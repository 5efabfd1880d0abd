"""The slaves' reports to the route registry (table ha_replicas), on SQLite and PostgreSQL: how far
each slave's CommitLog goes, and a beat counted per report, by which the other slaves tell a
slave that stopped reporting."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from app.routing.registry import HaReport, RouteRegistry
from app.routing.schema import downgrade, make_engine, upgrade

NAME = "broker-a"


@pytest.fixture
def registry(database_url: str) -> Iterator[RouteRegistry]:
    engine = make_engine(database_url)
    upgrade(engine)
    yield RouteRegistry(engine)
    engine.dispose()


def test_a_first_report_has_no_beat_and_each_later_one_counts_one(registry: RouteRegistry) -> None:
    assert registry.ha_report(NAME, 1, "http://s1", 100, 10_000) == {1: HaReport(100, 0, 10_000)}
    assert registry.ha_report(NAME, 1, "http://s1", 250, 10_000) == {1: HaReport(250, 1, 10_000)}
    assert registry.ha_report(NAME, 1, "http://s1", 250, 2_000) == {1: HaReport(250, 2, 2_000)}


def test_a_report_answers_every_slave_of_the_name_and_counts_only_its_own_beat(
    registry: RouteRegistry,
) -> None:
    registry.ha_report(NAME, 1, "http://s1", 100, 10_000)
    registry.ha_report(NAME, 2, "http://s2", 90, 2_000)
    registry.ha_report("broker-b", 1, "http://b1", 5, 10_000)
    reports = registry.ha_report(NAME, 2, "http://s2", 120, 2_000)
    assert reports == {1: HaReport(100, 0, 10_000), 2: HaReport(120, 1, 2_000)}


def test_a_promoted_slave_reports_no_more(registry: RouteRegistry) -> None:
    registry.ha_claim(NAME, 0, "http://m", "SYNC_MASTER")
    registry.ha_report(NAME, 1, "http://s1", 100, 10_000)
    registry.ha_report(NAME, 2, "http://s2", 100, 10_000)
    assert registry.ha_promote(NAME, 0, 1, "http://s1", "SYNC_MASTER") is not None
    assert set(registry.ha_report(NAME, 2, "http://s2", 100, 10_000)) == {2}


def test_reports_made_before_the_beats_were_counted_start_at_none(database_url: str) -> None:
    """Revision 0005 adds the counter to the rows 0004 holds; its downgrade takes it away again."""
    engine = make_engine(database_url)
    try:
        upgrade(engine, "0004")
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO ha_replicas (broker_name, broker_id, url, max_offset) "
                    "VALUES ('broker-a', 1, 'http://s1', 77)"
                )
            )
        upgrade(engine)
        registry = RouteRegistry(engine)
        assert registry.ha_report(NAME, 2, "http://s2", 70, 2_000)[1] == HaReport(77, 0, 0)
        assert registry.ha_report(NAME, 1, "http://s1", 80, 2_000)[1] == HaReport(80, 1, 2_000)
        downgrade(engine, "0004")
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT broker_id, max_offset FROM ha_replicas ORDER BY 1"))
            assert rows.all() == [(1, 80), (2, 70)]
    finally:
        engine.dispose()


def test_an_automatic_promotion_needs_the_lease_the_slave_saw_stand_still(registry: RouteRegistry) -> None:
    """A master back from a pause that renewed its lease before the slave's promotion keeps its
    role: it took writes on that lease, and the slave promoted over it would drop them."""
    registry.ha_claim(NAME, 0, "http://m", "SYNC_MASTER")
    seen = registry.ha_record(NAME)
    assert seen is not None
    registry.ha_renew(NAME, 0, 0, "http://m", 0)  # the master renews after the slave looked
    assert registry.ha_promote(NAME, 0, 1, "http://s1", "SYNC_MASTER", 0, seen.lease) is None
    record = registry.ha_record(NAME)
    assert record is not None and (record.epoch, record.master_id) == (0, 0)
    promoted = registry.ha_promote(NAME, 0, 1, "http://s1", "SYNC_MASTER", 0, record.lease)
    assert promoted is not None and (promoted.epoch, promoted.master_id) == (1, 1)
