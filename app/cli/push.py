"""``wharf push``: push subscriptions (create, list, describe, pause, resume, delete) and
``test-receiver``, a tiny endpoint that prints what it is sent and checks its signatures."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Annotated, Any

import typer
from wharf_client.admin import Admin

from app.cli.options import DEFAULT_URL, JsonOption, UrlOption, UserOption
from app.cli.output import print_json, print_line, print_table
from app.push.signing import SECRET_PREFIX, secret_key, signature

cli = typer.Typer(
    help="Push subscriptions: the broker POSTs a topic's messages to a URL.", no_args_is_help=True
)

GroupArgument = Annotated[str, typer.Argument(help="The consumer group the subscription is.")]


@cli.command()
def create(
    group: GroupArgument,
    topic: Annotated[str, typer.Option(help="The topic to push.")],
    endpoint: Annotated[str, typer.Option("--endpoint", help="Where to POST: an http:// or https:// URL.")],
    tags: Annotated[str | None, typer.Option(help="Only messages with these tags (a || b).")] = None,
    sql92: Annotated[str | None, typer.Option(help="Only messages this SQL92 expression matches.")] = None,
    ordered: Annotated[bool, typer.Option(help="One request per queue at a time, in order.")] = False,
    max_in_flight: Annotated[int, typer.Option(help="Requests in flight at once.")] = 16,
    batch: Annotated[int, typer.Option(help="Messages per request (above 1: a JSON array).")] = 1,
    timeout_ms: Annotated[int, typer.Option(help="A request unanswered this long failed.")] = 10_000,
    max_reconsume_times: Annotated[int, typer.Option(help="Deliveries again before the dead letters.")] = 16,
    secret: Annotated[str | None, typer.Option(help="whsec_... (default: the broker makes one).")] = None,
    paused: Annotated[bool, typer.Option(help="Create it paused.")] = False,
    cloudevents: Annotated[
        bool, typer.Option(help="Deliver CloudEvents (ce-* headers; a batch as a JSON array of events).")
    ] = False,
    url: UrlOption = DEFAULT_URL,
    user: UserOption = None,
) -> None:
    """Create (or change) the group's push subscription; prints it, with a new secret once."""
    if tags is not None and sql92 is not None:
        raise typer.BadParameter("give --tags or --sql92, not both")
    fields: dict[str, Any] = {
        "topic": topic,
        "url": endpoint,
        "ordered": ordered,
        "max_in_flight": max_in_flight,
        "batch": batch,
        "timeout_ms": timeout_ms,
        "max_reconsume_times": max_reconsume_times,
        "paused": paused,
        "format": "cloudevents" if cloudevents else "raw",
    }
    if tags is not None or sql92 is not None:
        fields["filter"] = {"tags": tags} if tags is not None else {"sql92": sql92}
    if secret is not None:
        fields["secret"] = secret
    with Admin(url, user=user) as admin:
        print_json(admin.put_push_subscription(group, **fields))


@cli.command("list")
def list_subscriptions(
    url: UrlOption = DEFAULT_URL, user: UserOption = None, json_output: JsonOption = False
) -> None:
    """Every push subscription of the broker, with its lag and counts."""
    with Admin(url, user=user) as admin:
        found = admin.push_subscriptions()
    if json_output:
        print_json(found)
        return
    columns = ("group", "topic", "url", "paused", "lag", "in flight", "delivered", "failed")
    print_table(
        columns,
        (
            (
                row["group"],
                row["topic"],
                row["url"],
                row["paused"],
                *(row["state"].get(key, "") for key in ("lag", "in_flight", "delivered", "failed")),
            )
            for row in found
        ),
    )


@cli.command()
def describe(group: GroupArgument, url: UrlOption = DEFAULT_URL, user: UserOption = None) -> None:
    """The group's push subscription and its state, as JSON."""
    with Admin(url, user=user) as admin:
        print_json(admin.push_subscription(group))


def _set_paused(group: str, paused: bool, url: str, user: str | None) -> None:
    with Admin(url, user=user) as admin:
        found = admin.push_subscription(group)
        found.pop("state", None)
        found.pop("group", None)
        if found.get("filter") is None:
            found.pop("filter", None)
        print_json(admin.put_push_subscription(group, **(found | {"paused": paused})))


@cli.command()
def pause(group: GroupArgument, url: UrlOption = DEFAULT_URL, user: UserOption = None) -> None:
    """Stop delivering (what is in flight is delivered again on resume)."""
    _set_paused(group, True, url, user)


@cli.command()
def resume(group: GroupArgument, url: UrlOption = DEFAULT_URL, user: UserOption = None) -> None:
    """Deliver again, from the committed offsets."""
    _set_paused(group, False, url, user)


@cli.command()
def delete(group: GroupArgument, url: UrlOption = DEFAULT_URL, user: UserOption = None) -> None:
    """Stop and remove the group's push subscription (its committed offsets stay)."""
    with Admin(url, user=user) as admin:
        admin.delete_push_subscription(group)
    print_line(f"push subscription {group} deleted")


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """Does the request carry a Standard Webhooks signature of ``body`` under ``secret``?"""
    key = secret_key(secret)
    expected = signature(
        key, headers.get("webhook-id", ""), int(headers.get("webhook-timestamp", "0") or 0), body
    )
    return expected.split(",", 1)[1] in [
        value.split(",", 1)[-1] for value in headers.get("webhook-signature", "").split()
    ]


def receiver_handler(secret: str | None, status: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            headers = {name.lower(): value for name, value in self.headers.items()}
            shown: dict[str, Any] = {
                name: value for name, value in headers.items() if name.startswith(("wharf-", "webhook-"))
            }
            shown["content-type"] = headers.get("content-type")
            if secret is not None:
                shown["signature"] = "valid" if verify(secret, headers, body) else "INVALID"
            shown["body"] = body.decode("utf-8", "replace")
            print_line(json.dumps(shown, ensure_ascii=False))
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@cli.command("test-receiver")
def test_receiver(
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on.")] = 9000,
    secret: Annotated[str | None, typer.Option(help="whsec_...: check each request's signature.")] = None,
    status: Annotated[int, typer.Option(help="The status to answer (200: acknowledged).")] = 200,
) -> None:
    """A tiny endpoint: prints each request it is sent as a JSON line and answers ``--status``."""
    if secret is not None:
        try:
            if not secret.startswith(SECRET_PREFIX) or not secret_key(secret):
                raise ValueError
        except ValueError:
            raise typer.BadParameter("--secret is whsec_ followed by base64") from None
    server = ThreadingHTTPServer((host, port), receiver_handler(secret, status))
    print_line(f"listening on http://{host}:{server.server_address[1]}/ (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
