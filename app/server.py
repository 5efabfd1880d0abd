"""Running the app under uvicorn, with a shutdown that answers held pulls first.

Uvicorn waits for in-flight requests before the lifespan shutdown; a long poll may be held for
30 s, so the hold service is told to answer every held pull as soon as shutdown begins.
"""

from __future__ import annotations

import socket

import uvicorn
from fastapi import FastAPI

from app.settings import Settings


class WharfServer(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.app
        broker = getattr(getattr(app, "state", None), "broker", None)
        if broker is not None:
            await broker.holds.stop()
        await super().shutdown(sockets)


def server_config(app: FastAPI, settings: Settings, **overrides: object) -> uvicorn.Config:
    options: dict[str, object] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "timeout_graceful_shutdown": 10,
        "loop": "uvloop",
        "http": "httptools",
    }
    options.update(overrides)
    return uvicorn.Config(app, **options)  # type: ignore[arg-type]
