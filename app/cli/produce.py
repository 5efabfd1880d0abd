"""``wharf produce TOPIC [FILE|-]``: one message per line, or one NDJSON object per line, sent in
batches by the route-aware producer of :mod:`app.client`.

Blank lines are skipped. A line's end (``\\n`` or ``\\r\\n``) is not part of its body. With
``--ndjson`` a line is ``{"body": ..., "encoding": "utf8"|"base64", "tags": ..., "keys": [...] or
"k1 k2", "properties": {...}, "unique_id": ...}``: the produce API's field names; ``--tags`` and
``--key`` fill what a line leaves out. A rich progress bar (messages/s, bytes) runs on standard error
while a file is sent, or once standard input has given more lines than a screen holds.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.text import Text
from wharf_client.codec import BodyEncodingError, decode_body
from wharf_client.producer import OutgoingMessage, Producer

from app.cli.options import DEFAULT_URL, JsonOption, UrlOption, UserOption
from app.cli.output import print_json, print_line, stderr

DEFAULT_BATCH = 100
MAX_BATCH = 10_000
NDJSON_FIELDS = ("body", "encoding", "tags", "keys", "properties", "unique_id")


class InputError(typer.BadParameter):
    """A line of the input is not a message: a usage error (exit status 2), naming the line."""

    def __init__(self, number: int, problem: str) -> None:
        super().__init__(f"line {number}: {problem}", param_hint="FILE")


@dataclass(frozen=True, slots=True)
class Defaults:
    """What ``--tags`` and ``--key`` give every message."""

    tags: str
    keys: tuple[str, ...]


def message_of_line(line: bytes, defaults: Defaults) -> OutgoingMessage:
    return OutgoingMessage(line, defaults.tags, list(defaults.keys))


def message_of_json(number: int, line: bytes, defaults: Defaults) -> OutgoingMessage:
    try:
        document = json.loads(line)
    except ValueError as error:
        raise InputError(number, f"not valid JSON ({error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("body"), str):
        raise InputError(number, 'each line must be a JSON object with a "body" string')
    unknown = sorted(set(document) - set(NDJSON_FIELDS))
    if unknown:
        raise InputError(number, f"unknown field {unknown[0]!r}; a line may hold {', '.join(NDJSON_FIELDS)}")
    try:
        body = decode_body(document["body"], _text(number, document, "encoding") or "utf8")
    except BodyEncodingError as error:
        raise InputError(number, str(error)) from None
    keys = document.get("keys")
    if isinstance(keys, str):
        keys = keys.split()
    if keys is not None and not (isinstance(keys, list) and all(isinstance(key, str) for key in keys)):
        raise InputError(number, '"keys" must be a list of strings or one string of space-separated keys')
    properties = document.get("properties") or {}
    if not (isinstance(properties, dict) and all(isinstance(value, str) for value in properties.values())):
        raise InputError(number, '"properties" must be an object of strings')
    return OutgoingMessage(
        body,
        _text(number, document, "tags") or defaults.tags,
        keys if keys is not None else list(defaults.keys),
        properties,
        _text(number, document, "unique_id"),
    )


def _text(number: int, document: dict[str, Any], field: str) -> str | None:
    value = document.get(field)
    if value is not None and not isinstance(value, str):
        raise InputError(number, f"{field!r} must be a string")
    return value


def read_messages(
    lines: Iterable[bytes], ndjson: bool, defaults: Defaults
) -> Iterator[tuple[OutgoingMessage, int]]:
    """Each message of the input with the bytes of input it took (for the progress bar)."""
    for number, raw in enumerate(lines, start=1):
        line = raw.removesuffix(b"\n").removesuffix(b"\r")
        blank = not line.strip() if ndjson else not line
        if blank:
            continue
        message = message_of_json(number, line, defaults) if ndjson else message_of_line(line, defaults)
        yield message, len(raw)


def batches(
    messages: Iterator[tuple[OutgoingMessage, int]], size: int
) -> Iterator[tuple[list[OutgoingMessage], int]]:
    batch: list[OutgoingMessage] = []
    batch_bytes = 0
    for message, input_bytes in messages:
        batch.append(message)
        batch_bytes += input_bytes
        if len(batch) == size:
            yield batch, batch_bytes
            batch, batch_bytes = [], 0
    if batch:
        yield batch, batch_bytes


class MessageRateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        elapsed = task.finished_time if task.finished else task.elapsed
        messages = task.fields["messages"]
        rate = messages / elapsed if elapsed else 0.0
        return Text(f"{messages:,} messages {rate:,.0f}/s", style="progress.data.speed")


class SendProgress:
    """The progress bar, started at once for a file (``total_bytes`` known) or after the first
    screenful of standard input."""

    def __init__(self, total_bytes: int | None) -> None:
        self.total_bytes = total_bytes
        self.show_after_lines = 0 if total_bytes is not None else stderr.size.height
        columns: list[ProgressColumn] = [TextColumn("sending")]
        if total_bytes is not None:
            columns.append(BarColumn())
        columns += [MessageRateColumn(), DownloadColumn(), TransferSpeedColumn(), TimeElapsedColumn()]
        self.bar = Progress(*columns, console=stderr)
        self.task: TaskID | None = None
        self.messages = 0
        self.input_bytes = 0

    def advance(self, messages: int, input_bytes: int) -> None:
        self.messages += messages
        self.input_bytes += input_bytes
        if self.task is None and self.messages > self.show_after_lines:
            self.task = self.bar.add_task("sending", total=self.total_bytes, messages=0)
            self.bar.start()
        if self.task is not None:
            self.bar.update(self.task, completed=self.input_bytes, messages=self.messages)

    def stop(self) -> None:
        if self.task is not None:
            self.bar.stop()


def open_input(source: str, stack: ExitStack) -> tuple[BinaryIO, int | None]:
    """The input's byte stream and its size (None for standard input)."""
    if source == "-":
        return sys.stdin.buffer, None
    path = Path(source)
    try:
        stream = stack.enter_context(path.open("rb"))
        return stream, path.stat().st_size
    except OSError as error:
        raise typer.BadParameter(f"cannot read {source}: {error.strerror}", param_hint="FILE") from None


def produce(
    topic: Annotated[str, typer.Argument(metavar="TOPIC", help="The topic.")],
    source: Annotated[
        str, typer.Argument(metavar="[FILE|-]", help="The file to send; - or nothing: standard input.")
    ] = "-",
    ndjson: Annotated[
        bool, typer.Option("--ndjson", help=f"Each line is a JSON object: {', '.join(NDJSON_FIELDS)}.")
    ] = False,
    batch: Annotated[int, typer.Option(min=1, max=MAX_BATCH, help="Messages per request.")] = DEFAULT_BATCH,
    tags: Annotated[str | None, typer.Option(help="The tag of every message.")] = None,
    key: Annotated[
        list[str] | None, typer.Option("--key", help="A key of every message; repeat for more.")
    ] = None,
    url: UrlOption = DEFAULT_URL,
    user: UserOption = None,
    json_output: JsonOption = False,
) -> None:
    """Send one message per line of FILE or standard input; prints how many were acknowledged."""
    defaults = Defaults(tags or "", tuple(key or ()))
    acknowledged = flush_timeouts = 0
    with ExitStack() as stack:
        stream, total_bytes = open_input(source, stack)
        producer = stack.enter_context(Producer(url, user=user))
        progress = SendProgress(total_bytes)
        try:
            for messages, input_bytes in batches(read_messages(stream, ndjson, defaults), batch):
                results = producer.send_batch(topic, messages)
                acknowledged += len(results)
                flush_timeouts += sum(result.status == "FLUSH_DISK_TIMEOUT" for result in results)
                progress.advance(len(messages), input_bytes)
        finally:
            progress.stop()
            # Said also when a batch failed: what was acknowledged before is stored.
            if json_output:
                print_json(
                    {"topic": topic, "acknowledged": acknowledged, "flush_disk_timeouts": flush_timeouts}
                )
            else:
                print_line(acknowledged_line(acknowledged, flush_timeouts))


def acknowledged_line(acknowledged: int, flush_timeouts: int) -> str:
    line = f"{acknowledged} message{'' if acknowledged == 1 else 's'} acknowledged"
    if flush_timeouts:
        line += f" ({flush_timeouts} with FLUSH_DISK_TIMEOUT: stored, not yet known to be on disk)"
    return line
