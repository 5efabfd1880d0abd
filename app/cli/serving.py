"""The commands that run on the broker's machine: serve, healthcheck, openapi.

:func:`serve` starts the broker on the WHARF_* settings of the environment (``wharf serve``, ``wharf``
alone and ``python -m app``). :func:`healthcheck` asks the broker on this machine for /healthz (the
container image's HEALTHCHECK). :func:`print_openapi` prints the OpenAPI document.

Each reads the settings with :func:`load_settings`, which reports a bad WHARF_* variable in one line
(name, value, what is allowed) and exits with status 2 instead of a traceback. This module loads the
server and the settings; the client commands never import it.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any, NoReturn

import uvicorn
from pydantic import ValidationError
from pydantic_settings import SettingsError

from app.address import is_wildcard
from app.cli.version import wharf_version
from app.logs import json_event
from app.server import WharfServer, server_config
from app.settings import Settings
from app.store import StoreLockedError
from app.store.dir_lock import StoreDirectoryLock
from app.store.record_format import encode_host

NO_ADDRESS = bytes(4)  # the IPv4 form of a host that has none

# Exit statuses: 1 the broker cannot run here (store in use, not healthy), 2 a bad setting or ACL file.
EXIT_UNAVAILABLE = 1
EXIT_BAD_SETTING = 2


def env_name(field: str) -> str:
    """The environment variable that sets the Settings field ``field``."""
    return f"{Settings.model_config.get('env_prefix', '')}{field}".upper()


def _allowed(message: str) -> str:
    # pydantic prefixes what a validator raised; the rest already says what is allowed.
    return message.removeprefix("Value error, ")


def describe_invalid_settings(error: ValidationError | SettingsError) -> list[str]:
    """One line per bad variable: its name, the value given and what is allowed."""
    if isinstance(error, SettingsError):
        # pydantic-settings could not even parse the value (e.g. a list that is not JSON).
        match = re.search(r'field "(\w+)"', str(error))
        if match is None:
            return [f"invalid settings: {error}"]
        name = env_name(match.group(1))
        return [f"{name}={_env_value(name)!r} cannot be parsed: {error.__cause__ or error}"]
    lines = []
    for item in error.errors(include_url=False):
        location = item.get("loc", ())
        if not location:  # a check across several settings
            lines.append(f"invalid settings: {_allowed(item['msg'])}")
            continue
        lines.append(
            f"{env_name(str(location[0]))}={item.get('input')!r} is not allowed: {_allowed(item['msg'])}"
        )
    return lines


def _env_value(name: str) -> str | None:
    wanted = name.upper()
    return next((value for key, value in os.environ.items() if key.upper() == wanted), None)


def exit_on_invalid_settings(error: ValidationError | SettingsError) -> NoReturn:
    """Print what is wrong with the settings, one line per variable, and exit with status 2."""
    for line in describe_invalid_settings(error):
        print(f"wharf: {line}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_SETTING)


def load_settings(**overrides: Any) -> Settings:
    """The settings from the environment, or exit 2 with one line naming the bad variable."""
    try:
        return Settings(**overrides)
    except (ValidationError, SettingsError) as error:
        exit_on_invalid_settings(error)


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
        raise SystemExit(EXIT_UNAVAILABLE) from None
    probe.release()


def startup_line(base_url: str) -> str:
    """The line printed once the broker listens: where the API, the console and the docs are."""
    return (
        f"wharf {wharf_version()}: API {base_url}/v1/, console {base_url}/console/, "
        f"docs {base_url}/docs (ReDoc {base_url}/redoc)"
    )


def startup_event(base_url: str, log_format: str) -> str:
    """:func:`startup_line`, as a JSON object under ``WHARF_LOG_FORMAT=json`` (with the addresses as
    fields of their own)."""
    line = startup_line(base_url)
    if log_format != "json":
        return line
    return json_event(
        line,
        __name__,
        version=wharf_version(),
        api=f"{base_url}/v1/",
        console=f"{base_url}/console/",
        docs=f"{base_url}/docs",
    )


def announce_advertised_address(settings: Settings) -> None:
    """Say which address a broker bound to every interface puts into routes and message ids, and
    warn when that address has no IPv4 form for its message ids."""
    if not settings.advertised_url and is_wildcard(settings.host):
        warn(
            f"the host {settings.host} listens on every interface; routes and message ids carry "
            f"{settings.resolved_advertised_url} (set WHARF_ADVERTISED_URL to the address clients use)",
            settings.log_format,
        )
    store = settings.store_config()
    if encode_host(store.store_host, store.store_port).startswith(NO_ADDRESS):
        warn(
            f"the advertised address {settings.resolved_advertised_url} has no IPv4 address: message "
            f"ids carry 0.0.0.0:{store.store_port} (their IPv6 form is not written), so a lookup by id "
            "cannot tell this broker from another such one on the same port (set "
            "WHARF_ADVERTISED_URL to an IPv4 address, or a name that resolves to one)",
            settings.log_format,
        )


def warn(note: str, log_format: str) -> None:
    """One warning line on standard error, before logging is set up: JSON under ``json``."""
    if log_format == "json":
        print(json_event(note, __name__, logging.WARNING), file=sys.stderr, flush=True)
    else:
        print(f"wharf: {note}", file=sys.stderr, flush=True)


def given(**options: object) -> dict[str, object]:
    """The command-line options given (not None): they win over their WHARF_* variables."""
    return {name: value for name, value in options.items() if value is not None}


def serve(host: str | None = None, port: int | None = None, store_dir: Path | None = None) -> None:
    """Start the broker on the WHARF_* settings of the environment, with the options given over
    their variables."""
    settings = load_settings(**given(host=host, port=port, store_dir=store_dir))
    refuse_if_store_in_use(settings)
    announce_advertised_address(settings)
    # Imported here: the other commands start without loading the API and the registry.
    from app.acl import AclFileError
    from app.api.app import create_app

    try:
        app = create_app(settings)
    except AclFileError as error:  # one line, never the file's secrets
        print(f"wharf: {error}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_SETTING) from None
    AnnouncingServer(
        server_config(app, settings), settings.resolved_advertised_url, settings.log_format
    ).run()


class AnnouncingServer(WharfServer):
    """Prints :func:`startup_event` once the socket is bound (the store is open by then)."""

    def __init__(self, config: uvicorn.Config, base_url: str, log_format: str = "text") -> None:
        super().__init__(config)
        self.base_url = base_url
        self.log_format = log_format

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            print(startup_event(self.base_url, self.log_format), flush=True)


def healthcheck(timeout: float, host: str | None = None, port: int | None = None) -> None:
    """Exit 0 when the broker on this machine (``host``/WHARF_HOST, ``port``/WHARF_PORT) answers
    /healthz, else 1."""
    import httpx

    settings = load_settings(**given(host=host, port=port))
    host = "127.0.0.1" if is_wildcard(settings.host) else settings.host
    scheme = "https" if settings.tls_certfile else "http"
    url = (
        f"{scheme}://[{host}]:{settings.port}/healthz"
        if ":" in host
        else f"{scheme}://{host}:{settings.port}/healthz"
    )
    try:
        # Liveness of the broker on this machine: its certificate need not name the loopback address.
        status = httpx.get(url, timeout=timeout, verify=False).status_code
    except httpx.HTTPError as error:
        print(f"wharf: {url}: {error!r}", file=sys.stderr)
        raise SystemExit(EXIT_UNAVAILABLE) from None
    if status != 200:
        print(f"wharf: {url} answered {status}", file=sys.stderr)
        raise SystemExit(EXIT_UNAVAILABLE)


def print_openapi() -> None:
    """Print the OpenAPI document the broker serves, as YAML (the checked-in openapi.yaml)."""
    from app.api.app import create_app
    from app.api.openapi import render

    print(render(create_app(load_settings())), end="")
