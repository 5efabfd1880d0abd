"""The options every client command takes (``--url``, ``--user``, ``--json``) and the parsers of
option values; a bad value is a usage error (exit status 2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer
from wharf_client.auth import basic_auth

DEFAULT_URL = "http://127.0.0.1:8080"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def check_user(value: str | None) -> str | None:
    """``--user``: ``accessKey:secretKey``, checked as the client reads it."""
    if value is not None:
        try:
            basic_auth(value)
        except ValueError as error:
            raise typer.BadParameter(str(error)) from None
    return value


UrlOption = Annotated[
    str,
    typer.Option("--url", envvar="WHARF_URL", help="The broker's address.", show_envvar=True),
]
UserOption = Annotated[
    str | None,
    typer.Option(
        "--user",
        envvar="WHARF_USER",
        show_envvar=True,
        metavar="AK:SK",
        callback=check_user,
        help="Access and secret key, for a broker with an ACL.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def parse_start(value: str) -> str:
    """``--from``: ``first``, ``last``, milliseconds since the epoch or an ISO 8601 time (local time
    when it names no zone), as the pull API's ``from`` (``first``, ``last`` or milliseconds)."""
    if value in ("first", "last") or (value.isascii() and value.isdigit()):
        return value
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r}: use first, last, or an ISO time such as 2024-05-01T12:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    # In whole milliseconds, without a float of seconds on the way.
    milliseconds = (moment - EPOCH) // timedelta(milliseconds=1)
    if milliseconds < 0:
        raise typer.BadParameter(f"{value!r} is before 1970")
    return str(milliseconds)
