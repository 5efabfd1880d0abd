"""The API's documentation pages: Swagger UI at ``/docs`` and ReDoc at ``/redoc``.

FastAPI's own pages load their scripts from a CDN and are blank without internet access. These are
the same pages with the scripts served from the package (``app/api/docs_assets/``; versions, sources
and licences in its VENDORED.md), so the docs of an installed broker work offline.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

ASSETS_DIR = Path(__file__).resolve().parent / "docs_assets"
ASSETS_URL = "/docs/assets"


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs``, ``/redoc`` and their assets; the app is made with ``docs_url=None`` and
    ``redoc_url=None`` so that FastAPI's CDN pages are not there too."""
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon-32x32.png",
            # Swagger UI would otherwise send the document to an online validator for a badge.
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_URL}/favicon-32x32.png",
            with_google_fonts=False,
        )

    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
