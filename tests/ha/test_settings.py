"""The replication settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings


def test_a_master_is_asynchronous_unless_told() -> None:
    settings = Settings()
    assert settings.broker_role == "ASYNC_MASTER"
    assert settings.ha_master_url == ""
    assert settings.ha_sync_timeout_ms == 3000


def test_a_slave_needs_an_id_other_than_its_masters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHARF_BROKER_ROLE", "SLAVE")
    with pytest.raises(ValidationError, match="WHARF_BROKER_ID >= 1"):
        Settings()
    monkeypatch.setenv("WHARF_BROKER_ID", "2")
    assert Settings().broker_role == "SLAVE"


def test_an_unknown_role_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHARF_BROKER_ROLE", "PRIMARY")
    with pytest.raises(ValidationError):
        Settings()
