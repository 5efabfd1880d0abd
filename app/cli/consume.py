"""``wharf consume TOPIC --group G``: print a topic's messages, one per line, as a member of the
group (:class:`app.client.GroupConsumer`): it joins the group by heartbeat, reads the queues the
brokers allocate to it with group pulls, commits fenced by the generation, and leaves at the end,
so it shares the topic with the group's other members instead of reading their queues too.

The group reads from its committed offsets; ``--from`` says where it starts on a queue it has none
for. Without ``--follow`` the command stops once a pull of every broker finds nothing new on its
queues (or after ``--max`` messages); with it, it long-polls until ``--max`` or Ctrl-C (exit
status 130; a SIGINT the command inherited as ignored stays ignored, as Python leaves it). A
member commits each batch once it is printed: a group pull reads from the group's offsets, so a
member moves on only by committing.

``--all-queues`` reads every queue of the topic on its own instead (the pull consumer of
:mod:`app.client`, RocketMQ's assign): no membership, and offsets are committed only with
``--commit``, after the last message printed - the way to look without moving the group.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import Annotated, Any

import typer
from wharf_client.codec import encode_body
from wharf_client.consumer import ConsumedMessage, PullConsumer
from wharf_client.group_consumer import GroupConsumer

from app.cli.options import DEFAULT_URL, JsonOption, UrlOption, UserOption, parse_start
from app.cli.output import message_json, print_json_line

FOLLOW_WAIT_MS = 2_000  # how long a pull is held under --follow; Ctrl-C waits at most this long
BATCH_SIZE = 32
EXIT_INTERRUPTED = 130


def print_message(consumed: ConsumedMessage, json_output: bool) -> None:
    if json_output:
        print_json_line(message_json(consumed.message))
    else:
        # A body that is not UTF-8 is printed in base64, as the API shows it.
        sys.stdout.write(encode_body(consumed.body)[0] + "\n")
    sys.stdout.flush()


def print_api_message(message: dict[str, Any], json_output: bool) -> None:
    """A group pull's message object: as it is with --json, else its body (base64 when not UTF-8)."""
    if json_output:
        print_json_line(message)
    else:
        sys.stdout.write(message["body"] + "\n")
    sys.stdout.flush()


def print_messages(
    consumer: PullConsumer, limit: int | None, json_output: bool, interrupted: Sequence[int] = ()
) -> int:
    """Print until ``limit``, the end (``stop_at_end``), or a Ctrl-C in ``interrupted``; it is
    looked at between polls (each waits at most 0.1 s), so every message taken is printed."""
    printed = 0
    while (limit is None or printed < limit) and not interrupted:
        consumed = consumer.poll(0.1)
        if consumed is None:
            if consumer.drained:
                break
            continue
        print_message(consumed, json_output)
        printed += 1
    return printed


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[list[int]]:
    """Hold Ctrl-C back for the block: the signals caught meanwhile are in the list it yields, for
    the block to look at when it may stop, and one raises KeyboardInterrupt after the block.

    Nothing is raised inside the block, so no HTTP call or lock is cut halfway (an interrupt raised
    inside the HTTP client could leave its connection pool locked, and the command hung on its way
    out). A SIGINT this process started with ignored (a job a shell without job control put in the
    background) stays ignored."""
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, None):
        yield []
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            raise KeyboardInterrupt


def print_as_member(consumer: GroupConsumer, limit: int | None, follow: bool, json_output: bool) -> None:
    """Group pulls until ``limit``, or (without ``follow``) until every broker answered nothing in
    a row; each batch committed once printed. Ctrl-C is looked at between pulls (a pull is held at
    most FOLLOW_WAIT_MS): the batch printed is committed first, then KeyboardInterrupt is raised."""
    printed = 0
    empty_in_a_row = 0
    with interrupts_deferred() as interrupted:
        while (limit is None or printed < limit) and not interrupted:
            room = BATCH_SIZE if limit is None else min(BATCH_SIZE, limit - printed)
            batch = consumer.poll(room, FOLLOW_WAIT_MS if follow else 0)
            if not batch.messages:
                empty_in_a_row += 1
                if not follow and empty_in_a_row >= len(consumer.brokers()):
                    return
                continue
            empty_in_a_row = 0
            for message in batch.messages:
                print_api_message(message, json_output)
            printed += len(batch.messages)
            # Refused as fenced (the group rebalanced): the queue's new owner reads them again.
            consumer.commit(batch)


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
        bool,
        typer.Option(
            "--commit",
            help="With --all-queues: commit the offsets after the messages printed (a member always does).",
        ),
    ] = False,
    all_queues: Annotated[
        bool,
        typer.Option(
            "--all-queues", help="Read every queue without joining the group (no sharing with its members)."
        ),
    ] = False,
    url: UrlOption = DEFAULT_URL,
    user: UserOption = None,
    json_output: JsonOption = False,
) -> None:
    """Print a topic's messages, one per line: the body, or the message as JSON with --json."""
    if all_queues:
        interrupted = consume_all_queues(
            topic, group, start, max_messages, follow, commit, url, user, json_output
        )
    else:
        interrupted = consume_as_member(topic, group, start, max_messages, follow, url, user, json_output)
    if interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)


def consume_as_member(
    topic: str,
    group: str,
    start: str,
    limit: int | None,
    follow: bool,
    url: str,
    user: str | None,
    json_output: bool,
) -> bool:
    """Consume as a member of the group; True when Ctrl-C stopped it."""
    timestamp_ms = int(start) if start.isdigit() else None
    consumer = GroupConsumer(
        url,
        group,
        {topic: "*"},
        consume_from="timestamp" if timestamp_ms is not None else start,
        consume_timestamp_ms=timestamp_ms,
        user=user,
    )
    try:
        print_as_member(consumer, limit, follow, json_output)
    except KeyboardInterrupt:
        return True
    finally:
        consumer.close()  # leaves the group: its queues go to the other members at once
    return False


def consume_all_queues(
    topic: str,
    group: str,
    start: str,
    limit: int | None,
    follow: bool,
    commit: bool,
    url: str,
    user: str | None,
    json_output: bool,
) -> bool:
    """Read every queue with the pull consumer; True when Ctrl-C stopped it."""
    consumer = PullConsumer(
        url,
        topic,
        group,
        user=user,
        start=start,
        auto_commit=False,
        stop_at_end=not follow,
        max_wait_ms=FOLLOW_WAIT_MS if follow else 0,
        batch_size=min(BATCH_SIZE, limit or BATCH_SIZE),
    )
    interrupted = False
    try:
        consumer.start()
        try:
            # Ctrl-C is a flag here too: raised inside a poll, it would leave the poll running on
            # the client's loop, to take a message that is never printed but then committed.
            with interrupts_deferred() as caught:
                print_messages(consumer, limit, json_output, caught)
        except KeyboardInterrupt:
            interrupted = True
        if commit:
            consumer.commit(strict=True)
    finally:
        consumer.close()
    return interrupted
