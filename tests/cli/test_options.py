"""The option parsers of the client commands."""

from __future__ import annotations

import time

import pytest
import typer

from app.cli.options import check_user, parse_start


def test_from_takes_first_last_milliseconds_and_iso_times() -> None:
    assert parse_start("first") == "first"
    assert parse_start("last") == "last"
    assert parse_start("1714564800000") == "1714564800000"
    assert parse_start("2024-05-01T12:00:00Z") == "1714564800000"
    assert parse_start("2024-05-01T14:00:00+02:00") == "1714564800000"
    assert parse_start("2024-05-01T12:00:00.250+00:00") == "1714564800250"
    assert parse_start("2024-05-01T12:00:00.123Z") == "1714564800123"


def test_from_without_a_zone_is_local_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert parse_start("2024-05-01T21:00:00") == "1714564800000"
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize("value", ["yesterday", "2024-13-01", "1969-12-31T00:00:00Z", "-5"])
def test_a_bad_from_is_a_usage_error(value: str) -> None:
    with pytest.raises(typer.BadParameter):
        parse_start(value)


def test_user_must_be_access_key_colon_secret_key() -> None:
    assert check_user("ak:sk") == "ak:sk"
    assert check_user(None) is None
    for bad in ("no-colon", ":only-secret"):
        with pytest.raises(typer.BadParameter):
            check_user(bad)
