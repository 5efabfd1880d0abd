"""The ``wharf`` command against a real broker: one broker process per test module (tests/conftest.py),
a fresh topic per test (tests/api/conftest.py), and :func:`wharf` to run a command in this process
(typer's CliRunner) with WHARF_URL naming that broker."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from app.cli import cli
from tests.api.conftest import topic  # noqa: F401 - the fixture, shared
from tests.api.server import ROOT, BrokerProcess

Wharf = Callable[..., Result]


def run_wharf(
    url: str, *args: str, stdin: str | bytes | None = None, env: dict[str, str] | None = None
) -> Result:
    result = CliRunner().invoke(cli, list(args), input=stdin, env={"WHARF_URL": url, **(env or {})})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.fixture
def wharf(broker: BrokerProcess) -> Wharf:
    """``wharf(*args, stdin=..., env=...)``: the command's Result (exit_code, stdout, stderr)."""

    def run(*args: str, stdin: str | bytes | None = None, env: dict[str, str] | None = None) -> Result:
        return run_wharf(broker.url, *args, stdin=stdin, env=env)

    return run


def wharf_process(
    *args: str, url: str, env: dict[str, str] | None = None, **popen: object
) -> subprocess.Popen[str]:
    """``python -m app ARGS`` in a child process (the real entry point, real signals)."""
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "app", *args],
        cwd=ROOT,
        env={**os.environ, "WHARF_URL": url, **(env or {})},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **popen,
    )


def stored_messages(client: httpx.Client, name: str) -> list[dict[str, Any]]:
    """Every message of the topic, queue by queue, in queue order (the pull API's objects)."""
    found = []
    for queue in client.get(f"/v1/topics/{name}/queues").json()["queues"]:
        offset = queue["min_offset"]
        while offset < queue["max_offset"]:
            answer = client.get(
                f"/v1/topics/{name}/queues/{queue['queue_id']}/messages",
                params={"offset": offset, "max_messages": 256},
            ).json()
            found += answer["messages"]
            offset = answer["next_offset"]
    return found
