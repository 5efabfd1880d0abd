"""openapi.yaml at the repository root is exactly what the app serves."""

from __future__ import annotations

from pathlib import Path

import httpx
import yaml

from app.api.app import create_app
from app.api.errors import ErrorCode
from tests.api.server import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_openapi_matches_the_app() -> None:
    checked_in = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    assert checked_in == create_app().openapi(), (
        "openapi.yaml drifted: run python -m app.api.openapi > openapi.yaml"
    )


def test_the_served_document_is_the_same(client: httpx.Client) -> None:
    served = client.get("/openapi.json").json()
    assert served == yaml.safe_load((ROOT / "openapi.yaml").read_text())


def test_every_error_code_is_documented() -> None:
    schema = create_app().openapi()["components"]["schemas"]["ErrorCode"]
    assert schema["enum"] == [int(code) for code in ErrorCode]
    for code in ErrorCode:
        assert str(int(code)) in schema["description"]


def test_contract_paths_are_present(broker: BrokerProcess) -> None:
    paths = create_app().openapi()["paths"]
    for path in (
        "/v1/topics",
        "/v1/topics/{topic}",
        "/v1/topics/{topic}/queues",
        "/v1/topics/{topic}/queues/{queue_id}/offset",
        "/v1/topics/{topic}/messages",
        "/v1/topics/{topic}/queues/{queue_id}/messages",
        "/healthz",
        "/readyz",
    ):
        assert path in paths, path
