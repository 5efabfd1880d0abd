"""The web console: static pages under ``/console`` and the one JSON view they add to the API.

The pages are plain HTML, CSS and JavaScript served as files. Everything else the console shows comes
from the public API (``/v1/...``) and the WebSocket subscription, called through ``@wharf/client``:
its built module, which ``npm run build`` in clients/js copies into ``static/vendor/wharf-client/``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from app.console.router import router

STATIC_DIR = Path(__file__).resolve().parent / "static"


def install_console(app: FastAPI) -> None:
    """Add the console's JSON view and serve its files at ``/console/``."""
    app.include_router(router)
    app.mount("/console", StaticFiles(directory=STATIC_DIR, html=True), name="console")


__all__ = ["install_console", "router", "STATIC_DIR"]
