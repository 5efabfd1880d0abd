"""The web console: static pages under ``/console``; the one JSON view they add to the API is
app.api.console_view.

The pages are plain HTML, CSS and JavaScript served as files. Everything else the console shows comes
from the public API (``/v1/...``) and the WebSocket subscription, called through ``@wharf/client``:
its built module, which ``npm run build`` in clients/js copies into ``static/vendor/wharf-client/``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent / "static"


def install_console(app: FastAPI) -> None:
    """Serve the console's files at ``/console/`` (after the routes under it: its JSON view)."""
    app.mount("/console", StaticFiles(directory=STATIC_DIR, html=True), name="console")


__all__ = ["install_console", "STATIC_DIR"]
