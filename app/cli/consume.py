"""``wharf consume TOPIC --group G``: print a topic's messages, one per line, with the pull consumer
of :mod:`app.client`.

The group reads from its committed offsets; ``--from`` says where it starts on a queue it has none
for. Without ``--follow`` the command stops once every queue is read to its end (or after ``--max``
messages); with it, it long-polls until ``--max`` or Ctrl-C (exit status 130). Offsets are committed
only with ``--commit``: the offset after the last message printed, per queue.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from app.cli.options import DEFAULT_URL, JsonOption, UrlOption, UserOption, parse_start
from app.cli.output import message_json, print_json_line
from app.client.consumer import ConsumedMessage, PullConsumer
from app.codec import encode_body

FOLLOW_WAIT_MS = 2_000  # how long a pull is held under --follow; Ctrl-C waits at most this long
EXIT_INTERRUPTED = 130


def print_message(consumed: ConsumedMessage, json_output: bool) -> None:
    if json_output:
        print_json_line(message_json(consumed.message))
    else:
        # A body that is not UTF-8 is printed in base64, as the API shows it.
        sys.stdout.write(encode_body(consumed.body)[0] + "\n")
    sys.stdout.flush()


def print_messages(consumer: PullConsumer, limit: int | None, json_output: bool) -> int:
    printed = 0
    while limit is None or printed < limit:
        consumed = consumer.poll(0.1)
        if consumed is None:
            if consumer.drained:
                break
            continue
        print_message(consumed, json_output)
        printed += 1
    return printed


def consume(
    topic: Annotated[str, typer.Argument(metavar="TOPIC", help="The topic.")],
    group: Annotated[str, typer.Option("--group", "-g", help="The consumer group.")],
    start: Annotated[
        str,
        typer.Option(
            "--from",
            metavar="first|last|ISO-TIME",
            callback=parse_start,
            help="Where the group starts on a queue it has no committed offset for.",
        ),
    ] = "last",
    max_messages: Annotated[int | None, typer.Option("--max", min=1, help="Stop after this many.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Wait for new messages.")] = False,
    commit: Annotated[
        bool, typer.Option("--commit", help="Commit the offsets after the messages printed.")
    ] = False,
    url: UrlOption = DEFAULT_URL,
    user: UserOption = None,
    json_output: JsonOption = False,
) -> None:
    """Print a topic's messages, one per line: the body, or the message as JSON with --json."""
    consumer = PullConsumer(
        url,
        topic,
        group,
        user=user,
        start=start,
        auto_commit=False,
        stop_at_end=not follow,
        max_wait_ms=FOLLOW_WAIT_MS if follow else 0,
        batch_size=min(32, max_messages or 32),
    )
    interrupted = False
    try:
        consumer.start()
        try:
            print_messages(consumer, max_messages, json_output)
        except KeyboardInterrupt:
            interrupted = True
        if commit:
            consumer.commit(strict=True)
    finally:
        consumer.close()
    if interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
