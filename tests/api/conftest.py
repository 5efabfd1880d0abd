from __future__ import annotations

import itertools

import httpx
import pytest

_names = itertools.count()


@pytest.fixture
def topic(client: httpx.Client, request: pytest.FixtureRequest) -> str:
    """A fresh topic with 4 queues, named after the test."""
    name = f"{request.node.name[:80]}-{next(_names)}".replace("[", "_").replace("]", "_")
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
    response = client.post("/v1/topics", json={"name": name, "queues": 4})
    assert response.status_code == 201, response.text
    return name
