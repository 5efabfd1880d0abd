"""The OpenAPI document: FastAPI's, plus the table of error codes.

``python -m app.api.openapi > openapi.yaml`` writes the checked-in copy; a test fails when it drifts.
"""

from __future__ import annotations

from typing import Any

import yaml
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.errors import ERROR_DESCRIPTIONS, ErrorCode


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            table = "\n".join(
                f"- `{int(code)}` {code.name}: {ERROR_DESCRIPTIONS[code]}" for code in ErrorCode
            )
            schema.setdefault("components", {}).setdefault("schemas", {})["ErrorCode"] = {
                "type": "integer",
                "enum": [int(code) for code in ErrorCode],
                "description": "Every error_code Wharf answers; the HTTP status is error_code // 100.\n\n"
                + table,
            }
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def render(app: FastAPI) -> str:
    return yaml.safe_dump(app.openapi(), sort_keys=False, allow_unicode=True, width=120)


if __name__ == "__main__":
    from app.api.app import create_app

    print(render(create_app()), end="")
