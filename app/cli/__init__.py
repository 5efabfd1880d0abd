"""The ``wharf`` command line: the command group in :mod:`app.cli.main`, the broker-side commands in
:mod:`app.cli.serving`, one module per group of client commands.

The settings helpers of :mod:`app.cli.serving` (``load_settings``, ``describe_invalid_settings``, ...)
are importable from here too; they load the settings and the server, so they are imported on first
use and the client commands start without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.cli.main import cli, main

if TYPE_CHECKING:
    from app.cli.serving import (
        EXIT_BAD_SETTING,
        EXIT_UNAVAILABLE,
        describe_invalid_settings,
        exit_on_invalid_settings,
        load_settings,
        refuse_if_store_in_use,
        startup_line,
    )

__all__ = [
    "EXIT_BAD_SETTING",
    "EXIT_UNAVAILABLE",
    "cli",
    "describe_invalid_settings",
    "exit_on_invalid_settings",
    "load_settings",
    "main",
    "refuse_if_store_in_use",
    "startup_line",
]
_SERVING = frozenset(__all__) - {"cli", "main"}


def __getattr__(name: str) -> Any:
    if name in _SERVING:
        from app.cli import serving

        return getattr(serving, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
