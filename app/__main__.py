"""`python -m app` / `wharf`: start the broker on the settings from the environment."""

from __future__ import annotations

import sys

from app.api.app import create_app
from app.server import WharfServer, server_config
from app.settings import Settings
from app.store import StoreLockedError
from app.store.dir_lock import StoreDirectoryLock


def refuse_if_store_in_use(settings: Settings) -> None:
    """Exit at once, with one line, when another process has the store directory.

    The store takes the lock for good when it opens; this early look only spares the user a
    start-up traceback in the common case.
    """
    store_dir = settings.store_config().store_dir
    if not store_dir.is_dir():
        return
    probe = StoreDirectoryLock(store_dir)
    try:
        probe.acquire()
    except StoreLockedError as error:
        print(f"wharf: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    probe.release()


def main() -> None:
    settings = Settings()
    refuse_if_store_in_use(settings)
    WharfServer(server_config(create_app(settings), settings)).run()


if __name__ == "__main__":
    main()
