"""``wharf groups list`` and ``wharf groups lag GROUP``."""

from __future__ import annotations

from typing import Annotated

import typer
from wharf_client.admin import Admin

from app.cli.options import DEFAULT_URL, JsonOption, UrlOption, UserOption
from app.cli.output import print_json, print_table

cli = typer.Typer(help="Consumer groups and their lag.", no_args_is_help=True)


@cli.command("list")
def list_groups(
    url: UrlOption = DEFAULT_URL, user: UserOption = None, json_output: JsonOption = False
) -> None:
    """Every consumer group with committed offsets on the broker, and its topics."""
    with Admin(url, user=user) as admin:
        groups = list(admin.iter_groups())
    if json_output:
        print_json(groups)
    else:
        print_table(("group", "topics"), ((group["group"], group["topics"]) for group in groups))


@cli.command()
def lag(
    group: Annotated[str, typer.Argument(help="The consumer group.")],
    topic: Annotated[
        str | None, typer.Option(help="Only this topic (default: every topic of the group).")
    ] = None,
    url: UrlOption = DEFAULT_URL,
    user: UserOption = None,
    json_output: JsonOption = False,
) -> None:
    """Per topic and queue: the group's committed offset, the queue's max offset, and the lag."""
    with Admin(url, user=user) as admin:
        offsets = admin.group_offsets(group, topic)
    if json_output:
        print_json(offsets)
        return
    rows: list[tuple[object, ...]] = [
        (row["topic"], row["queue_id"], row["committed_offset"], row["max_offset"], row["lag"])
        for row in offsets
    ]
    rows.append(("total", "", "", "", sum(row["lag"] for row in offsets)))
    print_table(("topic", "queue", "committed", "max", "lag"), rows, title=f"group {group}")
