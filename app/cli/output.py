"""What the client commands print: rich tables for people, JSON with ``--json`` for programs, and
one line on standard error for a failure."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console
from rich.filesize import decimal
from rich.table import Table
from rich.text import Text
from wharf_client.codec import Message as StoredMessage

from app.codec import RESERVED_PROPERTIES, encode_body

# Both follow sys.stdout and sys.stderr as they are when printing.
stdout = Console(highlight=False)
stderr = Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def print_json_line(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")


def print_line(text: str) -> None:
    sys.stdout.write(text + "\n")


def print_error(text: str) -> None:
    """One line, whatever the text holds: a message with a newline would look like two errors."""
    sys.stderr.write(f"wharf: {' '.join(text.split())}\n")


def cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return " ".join(str(item) for item in value) or "-"
    if isinstance(value, dict):
        return " ".join(f"{name}:{item}" for name, item in value.items()) or "-"
    return str(value)


def print_table(columns: Sequence[str], rows: Iterable[Sequence[object]], title: str | None = None) -> None:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for column in columns:
        # A narrow screen folds a cell over lines rather than cut it: ids are copied from here.
        table.add_column(column, overflow="fold")
    for row in rows:
        # Text, not markup: a body or a key may hold [brackets].
        table.add_row(*(Text(cell(value)) for value in row))
    stdout.print(table)


def print_fields(fields: Iterable[tuple[str, object]], title: str | None = None) -> None:
    """A record as a two-column table: name, value."""
    table = Table(title=title, box=None, show_header=False, title_justify="left", padding=(0, 2, 0, 0))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for name, value in fields:
        table.add_row(name, Text(cell(value)))
    stdout.print(table)


def format_ms(milliseconds: int | None) -> str | None:
    """A broker time (ms since the epoch) in local time, to the second (``--json`` has the ms)."""
    if not milliseconds:
        return None
    return datetime.fromtimestamp(milliseconds / 1000).strftime("%Y-%m-%d %H:%M:%S")


def format_bytes(size: int | None) -> str | None:
    return None if size is None else decimal(size)


def format_perm(perm: int) -> str:
    """RocketMQ's permission bits as letters: r(ead) w(rite) i(nherit)."""
    return "".join(letter if perm & bit else "-" for bit, letter in ((4, "r"), (2, "w"), (1, "i")))


def message_json(message: StoredMessage) -> dict[str, Any]:
    """A consumed message as the API shows one (GET /v1/messages/{id}, a pull's ``messages``)."""
    body, encoding = encode_body(message.body)
    return {
        "msg_id": message.msg_id,
        "unique_id": message.unique_id,
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "tags": message.tags,
        "keys": message.keys.split(),
        "properties": {
            name: value for name, value in message.properties.items() if name not in RESERVED_PROPERTIES
        },
        "body": body,
        "encoding": encoding,
        "born_timestamp": message.born_timestamp,
        "store_timestamp": message.store_timestamp,
        "reconsume_times": message.reconsume_times,
    }


def message_fields(message: dict[str, Any]) -> list[tuple[str, object]]:
    """The rows of one message (the API's message object) for :func:`print_fields`."""
    return [
        ("msg id", message["msg_id"]),
        ("unique id", message["unique_id"]),
        ("topic", message["topic"]),
        ("queue", message["queue_id"]),
        ("queue offset", message["queue_offset"]),
        ("tags", message["tags"] or None),
        ("keys", message["keys"]),
        ("properties", message["properties"]),
        ("born", format_ms(message["born_timestamp"])),
        ("stored", format_ms(message["store_timestamp"])),
        ("reconsumed", message["reconsume_times"]),
        ("body", message["body"] if message["encoding"] == "utf8" else f"(base64) {message['body']}"),
    ]
