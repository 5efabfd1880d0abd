"""One source for the store's defaults: StoreConfig's, which every storage setting takes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import DERIVED_STORE_FIELDS, Settings
from app.store.config import StoreConfig
from app.store.record_format import parse_delay_levels

STORE_FIELDS = [field for field in dataclasses.fields(StoreConfig) if field.name not in DERIVED_STORE_FIELDS]


def test_every_store_field_has_a_setting_with_the_same_default() -> None:
    settings = Settings.model_fields
    missing = [field.name for field in STORE_FIELDS if field.name not in settings]
    assert missing == [], f"StoreConfig fields without a WHARF_ setting: {missing}"
    diverging = {
        field.name: (field.default, settings[field.name].default)
        for field in STORE_FIELDS
        if settings[field.name].default != field.default
    }
    assert diverging == {}, f"defaults (StoreConfig, Settings) that differ: {diverging}"


def test_the_derived_fields_default_alike() -> None:
    config = Settings(_env_file=None).store_config()  # type: ignore[call-arg]
    plain = StoreConfig(store_dir=config.store_dir)
    assert (config.store_host, config.store_port) == (plain.store_host, plain.store_port)


def test_store_config_carries_every_setting(tmp_path: Path) -> None:
    # A value other than the default for every field: each must reach StoreConfig.
    changed: dict[str, object] = {}
    for field in STORE_FIELDS:
        default = field.default
        if isinstance(default, bool):
            changed[field.name] = not default
        elif isinstance(default, int):
            changed[field.name] = default + 1 if field.name != "max_properties_size" else default - 1
        elif field.name == "delete_when":
            changed[field.name] = "05"
        elif field.name == "message_delay_level":
            changed[field.name] = "1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s"
    changed["flush_mode"] = "SYNC"
    changed["disk_max_used_space_ratio"] = 70
    changed["disk_force_clean_ratio"] = 80
    changed["disk_refuse_writes_ratio"] = 89
    changed["disk_accept_writes_ratio"] = 84
    changed["access_message_in_memory_max_ratio"] = 12.5
    assert set(changed) == {field.name for field in STORE_FIELDS}
    config = Settings(store_dir=tmp_path, host="10.1.2.3", port=9000, **changed).store_config()  # type: ignore[arg-type]
    for name, value in changed.items():
        assert str(getattr(config, name)) == str(value), name
    assert (config.store_dir, config.store_host, config.store_port) == (tmp_path, "10.1.2.3", 9000)


def test_the_message_delay_levels_are_eighteen_delays_with_units() -> None:
    assert parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")[-1] == 7_200_000
    assert parse_delay_levels(" ".join(["100ms"] * 17 + ["1d"])) == (100,) * 17 + (86_400_000,)
    for bad in ("1s 5s", " ".join(["1x"] * 18), " ".join(["-1s"] * 18), ""):
        with pytest.raises(ValueError):
            parse_delay_levels(bad)
    with pytest.raises(ValidationError):
        Settings(message_delay_level="1s")
