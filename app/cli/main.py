"""The ``wharf`` command group (typer).

On the broker's machine: ``serve`` (also ``wharf`` alone and ``python -m app``), ``healthcheck``,
``openapi`` (:mod:`app.cli.serving`, imported only when one of them runs). Against a broker over
HTTP, with the client of :mod:`app.client`: ``topics``, ``produce``, ``consume``, ``groups``,
``message``, ``cluster``, ``admin``; these never load the server, FastAPI or the settings.

Exit statuses of the client commands: 0 done, 1 the broker refused (its envelope's message, one
line) or could not be reached (one line, no traceback), 2 a usage error.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import httpx
import typer
from typer.core import TyperGroup
from wharf_client.errors import BrokerError, WharfClientError

from app.cli import consume, groups, messages, operations, produce, push, topics
from app.cli.output import print_error
from app.cli.version import wharf_version

if TYPE_CHECKING:
    from typer._click import Context as ClickContext

EXIT_BROKER_ERROR = 1


class WharfGroup(TyperGroup):
    """Turns what the client raises into one line on standard error and exit status 1."""

    def invoke(self, ctx: ClickContext) -> Any:
        try:
            return super().invoke(ctx)
        except BrokerError as error:
            print_error(f"{error.message} ({error.error_code})")
        except WharfClientError as error:  # no broker answered, or the retries ran out
            print_error(str(error))
        except httpx.HTTPError as error:
            print_error(f"{_where(error)}{error}")
        raise typer.Exit(EXIT_BROKER_ERROR)


def _where(error: httpx.HTTPError) -> str:
    try:
        return f"{error.request.url}: "
    except RuntimeError:  # an error raised before its request was made
        return ""


cli = typer.Typer(
    name="wharf",
    cls=WharfGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=False,
    pretty_exceptions_enable=False,  # its tracebacks would show local variables: --user's secret
    rich_markup_mode="rich",
)


def show_version(value: bool) -> None:
    if value:
        print(f"wharf, version {wharf_version()}")
        raise typer.Exit()


@cli.callback()
def root(
    context: typer.Context,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=show_version, help="Show the version and exit."),
    ] = False,
) -> None:
    """Wharf, an HTTP-native, RocketMQ-style message broker. Without a command: serve.

    Every setting of the broker is a WHARF_* environment variable (the documentation's settings
    reference); the client commands ask the broker at --url (WHARF_URL) as --user (WHARF_USER).
    """
    if context.invoked_subcommand is None:
        serve()


HostOption = Annotated[
    str | None,
    typer.Option(help="The address to listen on (WHARF_HOST; default 127.0.0.1).", show_default=False),
]
PortOption = Annotated[
    int | None,
    typer.Option(
        min=0, max=65535, help="The port to listen on (WHARF_PORT; default 8080).", show_default=False
    ),
]


@cli.command()
def serve(
    host: HostOption = None,
    port: PortOption = None,
    store_dir: Annotated[
        Path | None,
        typer.Option(help="The store's directory (WHARF_STORE_DIR; default ./data).", show_default=False),
    ] = None,
) -> None:
    """Start the broker on the WHARF_* settings of the environment; an option given wins over its
    variable."""
    from app.cli import serving

    serving.serve(host=host, port=port, store_dir=store_dir)


@cli.command()
def healthcheck(
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the answer.")] = 3.0,
    host: HostOption = None,
    port: PortOption = None,
) -> None:
    """Exit 0 when the broker on this machine (--host/WHARF_HOST, --port/WHARF_PORT) answers
    /healthz, else 1."""
    from app.cli import serving

    serving.healthcheck(timeout, host=host, port=port)


@cli.command()
def openapi() -> None:
    """Print the OpenAPI document the broker serves, as YAML (the checked-in openapi.yaml)."""
    from app.cli import serving

    serving.print_openapi()


cli.add_typer(topics.cli, name="topics")
cli.command()(produce.produce)
cli.command()(consume.consume)
cli.add_typer(groups.cli, name="groups")
cli.add_typer(push.cli, name="push")
cli.command()(messages.message)
cli.add_typer(operations.cluster_cli, name="cluster")
cli.add_typer(operations.admin_cli, name="admin")


def main() -> None:
    """The console script ``wharf`` and ``python -m app``."""
    cli(prog_name="wharf")
