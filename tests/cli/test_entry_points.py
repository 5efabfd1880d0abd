"""The ``wharf`` entry points as a shell runs them: ``python -m app`` and the console script, the
version, one line and status 1 when no broker answers, and client commands that start without
loading the server."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from tests.api.server import ROOT, BrokerProcess, free_port
from tests.cli.conftest import wharf_process


def test_no_broker_is_one_line_and_exit_status_1() -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    for command in (["topics", "list"], ["produce", "t"], ["consume", "t", "-g", "g"], ["admin", "disk"]):
        process = wharf_process(*command, "--url", closed, url="http://127.0.0.1:9", stdin=subprocess.PIPE)
        out, errors = process.communicate("x\n", timeout=60)
        assert process.returncode == 1, (command, errors)
        (line,) = errors.splitlines()
        assert line.startswith("wharf: ") and "Connection refused" in line and closed in line, line


def test_the_url_comes_from_wharf_url(broker: BrokerProcess) -> None:
    process = wharf_process("cluster", "status", "--json", url=broker.url)
    out, errors = process.communicate(timeout=60)
    assert process.returncode == 0, errors
    assert broker.url in out


def test_client_commands_load_neither_the_server_nor_the_settings(broker: BrokerProcess) -> None:
    probe = (
        "import sys\n"
        "from app.__main__ import main\n"
        f"sys.argv = ['wharf', 'topics', 'list', '--url', {broker.url!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as done:\n"
        "    assert not done.code, done.code\n"
        "heavy = {'fastapi', 'starlette', 'uvicorn', 'sqlalchemy', 'pydantic',\n"
        "         'app.api', 'app.server', 'app.settings'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_version_and_help() -> None:
    process = wharf_process("--version", url="http://127.0.0.1:9")
    out, _ = process.communicate(timeout=60)
    assert (process.returncode, out) == (0, f"wharf, version {version('wharf')}\n")
    process = wharf_process("-h", url="http://127.0.0.1:9")
    out, _ = process.communicate(timeout=60)
    for command in ("serve", "topics", "produce", "consume", "groups", "message", "cluster", "admin"):
        assert command in out
