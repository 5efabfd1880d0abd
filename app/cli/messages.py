"""``wharf message ID`` and ``wharf message --key KEY --topic T``: look messages up."""

from __future__ import annotations

from typing import Annotated

import typer
from wharf_client.admin import Admin

from app.cli.options import DEFAULT_URL, JsonOption, UrlOption, UserOption
from app.cli.output import format_ms, message_fields, print_fields, print_json, print_table


def message(
    msg_id: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="The message id (32 hex digits).")
    ] = None,
    key: Annotated[str | None, typer.Option(help="Look up by key instead (with --topic).")] = None,
    topic: Annotated[str | None, typer.Option(help="The topic to look the key up in.")] = None,
    max_messages: Annotated[int, typer.Option("--max", min=1, max=1000, help="Most messages by key.")] = 32,
    url: UrlOption = DEFAULT_URL,
    user: UserOption = None,
    json_output: JsonOption = False,
) -> None:
    """One message by its id, or a topic's messages with a key (newest first)."""
    if msg_id is not None:
        if key is not None or topic is not None:
            raise typer.BadParameter("give a message id, or --key and --topic, not both", param_hint="ID")
        with Admin(url, user=user) as admin:
            found = admin.message(msg_id)
        if json_output:
            print_json(found)
        else:
            print_fields(message_fields(found))
        return
    if key is None or topic is None:
        raise typer.BadParameter("give a message id, or --key and --topic", param_hint="ID")
    with Admin(url, user=user) as admin:
        messages = admin.messages_by_key(topic, key, max_messages)
    if json_output:
        print_json(messages)
        return
    print_table(
        ("msg id", "queue", "offset", "tags", "keys", "stored", "body"),
        (
            (
                found["msg_id"],
                found["queue_id"],
                found["queue_offset"],
                found["tags"] or None,
                found["keys"],
                format_ms(found["store_timestamp"]),
                found["body"] if found["encoding"] == "utf8" else "(base64)",
            )
            for found in messages
        ),
        title=f"{topic}: key {key}",
    )
