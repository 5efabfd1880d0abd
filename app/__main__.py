"""`python -m app` / `wharf`: start the broker on the settings from the environment."""

from __future__ import annotations

from app.api.app import create_app
from app.server import WharfServer, server_config
from app.settings import Settings


def main() -> None:
    settings = Settings()
    WharfServer(server_config(create_app(settings), settings)).run()


if __name__ == "__main__":
    main()
