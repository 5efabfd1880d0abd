"""Logs (app/logs.py): one line per event, JSON lines on demand, the access log on or off, no secret.

The formatters are checked on records made here; the rest on real broker processes, whose standard
output and error share one file (the start-up line printed by ``wharf serve`` is the one line of
standard output).
"""

from __future__ import annotations

import base64
import logging
import signal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson
import pytest
from pydantic import ValidationError
from websockets.sync.client import connect

from app.logs import JsonFormatter, TextFormatter
from app.settings import Settings
from tests.api.acl_setup import ADMIN, PRODUCER, SECRETS, acl_broker, client_for
from tests.api.server import BrokerProcess
from tests.ws.wsclient import Socket

DATABASE_PASSWORD = "db-pass-5a7e"


def record(message: str, *args: object, exc: BaseException | None = None, **extra: Any) -> logging.LogRecord:
    made = logging.makeLogRecord(
        {"name": "app.test", "levelno": logging.ERROR, "levelname": "ERROR", "msg": message, "args": args}
    )
    made.__dict__.update(extra)
    if exc is not None:
        made.exc_info = (type(exc), exc, exc.__traceback__)
    return made


def failure(text: str) -> BaseException:
    try:
        raise RuntimeError(text)
    except RuntimeError as error:
        return error


def run_broker(broker: BrokerProcess, requests: Any) -> list[str]:
    """Start the broker, make ``requests``, stop it with SIGTERM; every line it wrote."""
    broker.start()
    try:
        requests()
    finally:
        assert broker.process is not None
        broker.process.send_signal(signal.SIGTERM)
        broker.process.wait(60)
        broker.process = None
    return broker.log().splitlines()


def event_lines(lines: list[str]) -> list[str]:
    """The log's lines without the start-up line (standard output)."""
    return [line for line in lines if not line.startswith("wharf ")]


# -- formatters -------------------------------------------------------------------------------------


def test_a_text_event_with_a_traceback_is_one_line() -> None:
    line = TextFormatter().format(
        record("store fault on %s", "orders", exc=failure("first\nsecond"), queue_id=3, note="two words")
    )
    assert "\n" not in line
    assert line.split(" ", 3)[1:3] == ["ERROR", "app.test:"]
    assert 'store fault on orders queue_id=3 note="two words" | Traceback' in line
    assert "RuntimeError: first\\nsecond" in line


def test_a_json_event_carries_the_fields() -> None:
    line = JsonFormatter().format(record("pull of %s answered", "orders", exc=failure("boom"), queue_id=3))
    assert "\n" not in line
    entry = orjson.loads(line)
    assert entry["level"] == "error" and entry["logger"] == "app.test"
    assert entry["event"] == "pull of orders answered" and entry["queue_id"] == 3
    assert entry["timestamp"].endswith("Z")
    assert entry["exception"].startswith("Traceback") and "RuntimeError: boom" in entry["exception"]


@pytest.mark.parametrize("formatter", [TextFormatter, JsonFormatter])
def test_secrets_are_masked_in_events_fields_and_tracebacks(formatter: type[logging.Formatter]) -> None:
    url = f"postgresql+psycopg://wharf:{DATABASE_PASSWORD}@db:5432/registry"
    line = formatter(secrets=[DATABASE_PASSWORD]).format(  # type: ignore[call-arg]
        record(
            "cannot reach %s",
            url,
            exc=failure(f"conninfo password={DATABASE_PASSWORD} host=db"),
            request="GET /healthz?token=YWs6c2VjcmV0 HTTP/1.1",
            headers="[(b'authorization', b'Basic YWRtaW4tYWs6c2VjcmV0')]",
            detail=f"the password is {DATABASE_PASSWORD}",
        )
    )
    for secret in (DATABASE_PASSWORD, "YWs6c2VjcmV0", "YWRtaW4tYWs6c2VjcmV0"):
        assert secret not in line
    assert "postgresql+psycopg://wharf:***@db:5432/registry" in line
    assert "token=***" in line and "Basic ***" in line


def test_the_level_and_format_are_taken_in_any_case_and_checked() -> None:
    settings = Settings(log_level="WARNING", log_format="JSON")
    assert (settings.log_level, settings.log_format) == ("warning", "json")
    with pytest.raises(ValidationError, match="log_level"):
        Settings(log_level="loud")


# -- the broker's lines -----------------------------------------------------------------------------


@pytest.mark.slow
def test_json_lines_carry_timestamp_level_event_logger_and_fields(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store", log_level="info", log_format="json", access_log="true")
    lines = run_broker(broker, lambda: httpx.get(f"{broker.url}/healthz?probe=json"))

    # Every line the process writes parses, the start-up line on standard output too.
    entries = [orjson.loads(line) for line in lines]
    assert all({"timestamp", "level", "event", "logger"} <= entry.keys() for entry in entries)
    (started,) = [entry for entry in entries if entry["logger"] == "app.cli.serving"]
    assert started["event"].startswith("wharf ") and started["api"] == f"{broker.url}/v1/"
    events = {(entry["logger"], entry["event"]) for entry in entries}
    assert ("app.store.recovery", "recovery: normal (a new store)") in events
    assert ("app.server", "shutdown: SIGTERM received; stopping within 10 s") in events
    (access,) = [
        entry for entry in entries if entry["logger"] == "uvicorn.access" and "probe" in entry["path"]
    ]
    assert (access["method"], access["path"], access["status"]) == ("GET", "/healthz?probe=json", 200)


@pytest.mark.slow
@pytest.mark.parametrize("access_log", [True, False], ids=["on", "off"])
def test_the_access_log_setting(tmp_path: Path, access_log: bool) -> None:
    broker = BrokerProcess(tmp_path / "store", log_level="info", access_log=str(access_log).lower())

    def requests() -> None:
        httpx.get(f"{broker.url}/healthz?probe=access")
        with Socket(broker.url.replace("http://", "ws://") + "/v1/ws/subscribe?topic=probe-socket"):
            pass

    log = "\n".join(run_broker(broker, requests))
    assert "shutdown: complete" in log  # the broker logged at info level
    assert ('"GET /healthz?probe=access HTTP/1.1" 200' in log) is access_log
    assert ("/v1/ws/subscribe?topic=probe-socket" in log) is access_log


def with_password(url: str) -> tuple[str, str]:
    """``url`` with a password (the test server trusts local connections and ignores it), and the
    password; a URL that has one already keeps it."""
    parts = urlsplit(url)
    if parts.password:
        return url, parts.password
    netloc = f"{parts.username or 'postgres'}:{DATABASE_PASSWORD}@{parts.hostname}:{parts.port or 5432}"
    return urlunsplit(parts._replace(netloc=netloc)), DATABASE_PASSWORD


@pytest.mark.slow
def test_no_password_or_secret_reaches_the_log(tmp_path: Path, postgres_url: str) -> None:
    url, password = with_password(postgres_url)
    # Trace: uvicorn logs every request's scope, headers and query string included.
    broker = acl_broker(tmp_path, database_url=url, log_level="trace", access_log="true")
    tokens = [
        base64.urlsafe_b64encode(f"{ADMIN[0]}:{ADMIN[1]}".encode()).decode().rstrip("="),
        base64.b64encode(f"{PRODUCER[0]}:{PRODUCER[1]}".encode()).decode(),
    ]

    def requests() -> None:
        with client_for(broker, PRODUCER) as producer:
            assert producer.get("/v1/topics").status_code == 200
        with client_for(broker, (PRODUCER[0], ADMIN[1])) as wrong:
            assert wrong.get("/v1/topics").status_code == 401
        with client_for(broker, None) as anonymous:
            assert anonymous.get(f"/healthz?token={tokens[0]}").status_code == 200
        socket_url = broker.url.replace("http://", "ws://") + "/v1/ws/subscribe"
        with Socket(f"{socket_url}?token={tokens[0]}&topic=t"):
            pass
        # At debug level the WebSocket library logs every handshake header.
        with connect(f"{socket_url}?topic=t", additional_headers={"Authorization": f"Basic {tokens[1]}"}):
            pass

    log = "\n".join(run_broker(broker, requests))
    for secret in [password, *SECRETS, *tokens]:
        assert secret not in log, f"{secret!r} is in the log"
    # ...although the requests were logged, credentials and all.
    assert "authentication failed" in log and "token=***" in log and "authorization: Basic ***" in log
