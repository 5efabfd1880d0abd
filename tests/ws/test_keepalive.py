"""uvicorn's WebSocket keepalive never closes a client before the broker's own bounds do.

A client that stops reading answers no ping either. uvicorn's keepalive (a ping every 20 s, 20 s for
the pong by default) would close it with 1011 "keepalive ping timeout", a server error to the client,
40 s after it stopped reading: before the broker's own 1013 (``ws_send_timeout_s``, 30 s) or 1008
(``ws_idle_timeout_s``, 60 s), whose reasons tell the client what to do. So the pong may take longer
than either bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI

from app.server import server_config
from app.settings import Settings


@pytest.mark.parametrize(
    ("send_s", "idle_s"),
    [(None, None), (30.0, 600.0), (300.0, 1.0), (0.5, 0.5)],
    ids=["defaults", "long-idle", "long-send", "short"],
)
def test_a_ping_may_wait_longer_than_the_brokers_bounds(
    tmp_path: Path, send_s: float | None, idle_s: float | None
) -> None:
    values: dict[str, object] = {"store_dir": tmp_path / "store"}
    if send_s is not None:
        values["ws_send_timeout_s"] = send_s
    if idle_s is not None:
        values["ws_idle_timeout_s"] = idle_s
    settings = Settings(**values)

    config = server_config(FastAPI(), settings)

    # However soon after the client's last read the ping goes out, its answer is awaited past both.
    assert config.ws_ping_interval is not None and config.ws_ping_timeout is not None
    assert config.ws_ping_timeout > max(settings.ws_send_timeout_s, settings.ws_idle_timeout_s)
