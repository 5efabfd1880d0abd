"""Logging: one line per event, as plain text or JSON lines, with secrets taken out.

:func:`log_config` builds the configuration (a :func:`logging.config.dictConfig` dictionary, given
to uvicorn as its ``log_config``) for Wharf's loggers (``app.*``), uvicorn's (``uvicorn.error``,
``uvicorn.access``) and every other library's (the root logger, warnings and above). Every line goes
to standard error, one event per line: a traceback is folded into its event's line.

``WHARF_LOG_FORMAT=text`` (the default)::

    2025-01-31T09:15:02.114Z INFO app.store.recovery: recovery: normal (clean shutdown)

``WHARF_LOG_FORMAT=json``, for log shippers: one object per line with ``timestamp`` (UTC, ISO 8601),
``level``, ``event`` (the message), ``logger``, the fields the call passed in ``extra=``, the access
fields of a request line (``client``, ``method``, ``path``, ``http_version``, ``status``) and, for a
fault, ``exception``.

``WHARF_ACCESS_LOG`` turns the lines of requests and WebSocket handshakes on (uvicorn's access log,
and the ``"WebSocket /path" [accepted]`` lines uvicorn writes to ``uvicorn.error``).

Secrets never reach a line (:class:`Redactor`, applied to the whole formatted line, traceback
included): the password of a URL (``scheme://user:***@host``), the configured database password
wherever it appears, credentials in a query string (``token=***``), an ``Authorization`` value and a
``password=`` or ``secretKey:`` value.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

from app.settings import Settings

MASK = "***"
# A shorter literal secret would mask ordinary words; URLs and key=value pairs are masked anyway.
MIN_LITERAL_SECRET = 4

_PATTERNS = (
    # scheme://user:password@host
    (re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@\"'\\]*:)[^\s@/?#\"'\\]*@"), rf"\g<1>{MASK}@"),
    # ?token=... &password=... in a logged path or URL
    (
        re.compile(
            r"(?i)(\b(?:token|access_token|password|passwd|secret|secret_?key|signature)=)[^&\s\"'#]*"
        ),
        rf"\g<1>{MASK}",
    ),
    # Authorization: Basic ..., ('authorization', 'Bearer ...')
    (
        re.compile(
            r"(?i)(\bauthorization[\"']?(?:\s*[:=]\s*|,\s*b?)[\"']?(?:(?:basic|bearer|digest)\s+)?)[^\s\"',;)]+"
        ),
        rf"\g<1>{MASK}",
    ),
    # password=..., secretKey: ...
    (
        re.compile(r"(?i)(\b(?:password|passwd|secret_?key)[\"']?\s*[=:]\s*[\"']?)[^\s\"',;&})]+"),
        rf"\g<1>{MASK}",
    ),
)

# What every LogRecord carries; anything else was passed with ``extra=`` and becomes a field.
_RECORD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's coloured copy of the message
}
_ACCESS_FIELDS = ("client", "method", "path", "http_version", "status")


class Redactor:
    """Masks secrets in a log line: by pattern, and the ``secrets`` given, wherever they appear."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        literals = sorted({secret for secret in secrets if len(secret) >= MIN_LITERAL_SECRET}, key=len)
        self._literals = literals[::-1]  # longest first: a secret containing another is masked whole

    def __call__(self, text: str) -> str:
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        for secret in self._literals:
            if secret in text:
                text = text.replace(secret, MASK)
        return text


def url_secrets(url: str) -> list[str]:
    """The password of ``url`` as written and decoded (empty without one)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return []
    return [password, unquote(password)] if password else []


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _extra(record: logging.LogRecord) -> dict[str, Any]:
    """The fields the call passed with ``extra=``."""
    return {name: value for name, value in record.__dict__.items() if name not in _RECORD_ATTRIBUTES}


def _access_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields of a uvicorn access line: ``client - "METHOD path HTTP/version" status``."""
    if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
        return dict(zip(_ACCESS_FIELDS, record.args, strict=True))
    return {}


class _LineFormatter(logging.Formatter):
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.redact = Redactor(secrets)

    def _exception(self, record: logging.LogRecord) -> str:
        parts = []
        if record.exc_info:
            parts.append(self.formatException(record.exc_info))
        elif record.exc_text:
            parts.append(record.exc_text)
        if record.stack_info:
            parts.append(self.formatStack(record.stack_info))
        return "\n".join(parts)


class TextFormatter(_LineFormatter):
    """``<timestamp> <LEVEL> <logger>: <event> key=value ... | <traceback>``, newlines written as ``\\n``."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        for name, value in _extra(record).items():
            text = str(value)
            if not text or any(character.isspace() for character in text):
                text = orjson.dumps(text).decode()
            line += f" {name}={text}"
        exception = self._exception(record)
        if exception:
            line += f" | {exception}"
        return self.redact(line).replace("\r", "\\r").replace("\n", "\\n")


class JsonFormatter(_LineFormatter):
    """One JSON object per line: timestamp, level, event, logger, the event's fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": _timestamp(record),
            "level": record.levelname.lower(),
            "event": self.redact(record.getMessage()),
            "logger": record.name,
        }
        for name, value in (_extra(record) | _access_fields(record)).items():
            entry.setdefault(name, self.redact(value) if isinstance(value, str) else value)
        exception = self._exception(record)
        if exception:
            entry["exception"] = self.redact(exception)
        return orjson.dumps(
            entry, default=lambda value: self.redact(str(value)), option=orjson.OPT_NON_STR_KEYS
        ).decode()


def json_event(event: str, logger: str, level: int = logging.INFO, **fields: Any) -> str:
    """One line as :class:`JsonFormatter` writes it, for what the broker prints outside its loggers
    (the start-up line on standard output, a note before logging is set up): with
    ``WHARF_LOG_FORMAT=json`` every line the process writes is a JSON object."""
    record = logging.makeLogRecord(
        {"name": logger, "levelno": level, "levelname": logging.getLevelName(level), "msg": event}
    )
    record.__dict__.update(fields)
    return JsonFormatter().format(record)


class DropWebSocketHandshakes(logging.Filter):
    """Without the access log, uvicorn's per-socket lines (``"WebSocket /path" [accepted]``) go too."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith('%s - "WebSocket %s"'))


def log_config(settings: Settings) -> dict[str, Any]:
    """The logging configuration for ``settings`` (format, level, access log, secrets to mask)."""
    level = settings.log_level.upper()
    formatter = JsonFormatter if settings.log_format == "json" else TextFormatter
    handlers = ["wharf"]
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "wharf": {
                "()": f"{formatter.__module__}.{formatter.__qualname__}",
                "secrets": url_secrets(settings.resolved_database_url),
            }
        },
        "filters": {"websocket_handshakes": {"()": f"{__name__}.DropWebSocketHandshakes"}},
        "handlers": {
            "wharf": {"class": "logging.StreamHandler", "formatter": "wharf", "stream": "ext://sys.stderr"}
        },
        "loggers": {
            "app": {"handlers": handlers, "level": level, "propagate": False},
            "uvicorn": {"handlers": handlers, "level": level, "propagate": False},
            "uvicorn.error": {
                "level": level,
                "filters": [] if settings.access_log else ["websocket_handshakes"],
            },
            "uvicorn.access": {
                "handlers": handlers if settings.access_log else [],
                "level": level,
                "propagate": False,
            },
        },
        "root": {"handlers": handlers, "level": "WARNING"},
    }
