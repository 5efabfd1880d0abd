"""The installed version of Wharf, for ``wharf --version`` and the start-up line."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def wharf_version() -> str:
    try:
        return version("wharf")
    except PackageNotFoundError:  # running from a checkout that is not installed
        return "unknown"
