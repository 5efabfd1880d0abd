"""`python -m app` / `wharf`: the command line of :mod:`app.cli`; with no command, serve."""

from __future__ import annotations

from app.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
