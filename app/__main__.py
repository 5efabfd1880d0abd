"""`python -m app` / `wharf`: the command line of :mod:`app.cli`; with no command, serve."""

from __future__ import annotations

from app.cli import main, refuse_if_store_in_use

__all__ = ["main", "refuse_if_store_in_use"]

if __name__ == "__main__":
    main()
