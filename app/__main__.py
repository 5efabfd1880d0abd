"""`python -m app` / `wharf`: start the broker on the settings from the environment."""

from __future__ import annotations

import uvicorn

from app.api.app import create_app
from app.settings import Settings


def main() -> None:
    settings = Settings()
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    main()
