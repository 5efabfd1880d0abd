"""``wharf topics list|create|describe|delete``."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from wharf_client.admin import Admin

from app.cli.options import DEFAULT_URL, JsonOption, UrlOption, UserOption
from app.cli.output import format_ms, format_perm, print_fields, print_json, print_line, print_table

cli = typer.Typer(help="Create, list, describe and delete topics.", no_args_is_help=True)

TopicArgument = Annotated[str, typer.Argument(metavar="NAME", help="The topic.")]


def topic_fields(topic: dict[str, Any]) -> list[tuple[str, object]]:
    return [
        ("topic", topic["name"]),
        ("read queues", topic["read_queues"]),
        ("write queues", topic["write_queues"]),
        ("perm", format_perm(topic["perm"])),
        ("order", topic["order"]),
    ]


@cli.command("list")
def list_topics(
    url: UrlOption = DEFAULT_URL, user: UserOption = None, json_output: JsonOption = False
) -> None:
    """Every topic of the broker, by name."""
    with Admin(url, user=user) as admin:
        topics = list(admin.iter_topics())
    if json_output:
        print_json(topics)
        return
    print_table(
        ("topic", "read queues", "write queues", "perm", "order"),
        (
            (
                topic["name"],
                topic["read_queues"],
                topic["write_queues"],
                format_perm(topic["perm"]),
                topic["order"],
            )
            for topic in topics
        ),
    )


@cli.command()
def create(
    name: TopicArgument,
    queues: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=1024,
            help="Read and write queues (default: the broker's WHARF_DEFAULT_TOPIC_QUEUE_NUMS).",
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    user: UserOption = None,
    json_output: JsonOption = False,
) -> None:
    """Create a topic on the broker (a topic already there with this configuration is fine)."""
    with Admin(url, user=user) as admin:
        topic = admin.create_topic(name, queues)
    if json_output:
        print_json(topic)
    else:
        print_fields(topic_fields(topic))


@cli.command()
def describe(
    name: TopicArgument,
    url: UrlOption = DEFAULT_URL,
    user: UserOption = None,
    json_output: JsonOption = False,
) -> None:
    """A topic's configuration and, per queue, its offsets and last store time."""
    with Admin(url, user=user) as admin:
        topic = admin.topic(name)
        queues = admin.topic_queues(name)
    if json_output:
        print_json({**topic, "queues": queues})
        return
    print_fields(topic_fields(topic))
    print_table(
        ("queue", "min offset", "max offset", "messages", "last stored"),
        (
            (
                queue["queue_id"],
                queue["min_offset"],
                queue["max_offset"],
                queue["max_offset"] - queue["min_offset"],
                format_ms(queue["last_store_timestamp"]),
            )
            for queue in queues
        ),
    )


@cli.command()
def delete(name: TopicArgument, url: UrlOption = DEFAULT_URL, user: UserOption = None) -> None:
    """Delete a topic and its queues on the broker."""
    with Admin(url, user=user) as admin:
        admin.delete_topic(name)
    print_line(f"deleted topic {name}")
