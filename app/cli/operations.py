"""The operator's commands: ``wharf cluster status``, ``wharf admin clean``, ``wharf admin disk``."""

from __future__ import annotations

import typer
from wharf_client.admin import Admin

from app.cli.options import DEFAULT_URL, JsonOption, UrlOption, UserOption
from app.cli.output import format_bytes, format_ms, print_fields, print_json, print_table

cluster_cli = typer.Typer(help="The clusters and their brokers.", no_args_is_help=True)
admin_cli = typer.Typer(help="Operator requests: retention, the store's disk.", no_args_is_help=True)


@cluster_cli.command()
def status(url: UrlOption = DEFAULT_URL, user: UserOption = None, json_output: JsonOption = False) -> None:
    """Every broker of every cluster the route registry knows: address, role, liveness."""
    with Admin(url, user=user) as admin:
        clusters = admin.clusters()
    if json_output:
        print_json(clusters)
        return
    print_table(
        ("cluster", "broker", "id", "address", "alive", "last heartbeat"),
        (
            (
                cluster["name"],
                broker["broker_name"],
                f"{broker['broker_id']} ({'master' if broker['broker_id'] == 0 else 'slave'})",
                broker["address"],
                broker["alive"],
                format_ms(broker["last_heartbeat_ms"]),
            )
            for cluster in clusters
            for broker in cluster["brokers"]
        ),
    )


@admin_cli.command()
def clean(url: UrlOption = DEFAULT_URL, user: UserOption = None, json_output: JsonOption = False) -> None:
    """Run a retention pass now: expired segments go even outside WHARF_DELETE_WHEN."""
    with Admin(url, user=user) as admin:
        report = admin.clean()
    if json_output:
        print_json(report)
        return
    print_fields(
        [
            ("disk used", f"{report['disk_used_percent']:.1f} %"),
            ("why", report["reasons"] or None),
            ("forced", report["forced"]),
            ("commitlog segments deleted", report["commitlog_segments"]),
            ("consumequeue segments deleted", report["consumequeue_segments"]),
            ("index files deleted", report["index_files"]),
            ("commitlog min offset", report["commitlog_min_offset"]),
        ]
    )


@admin_cli.command()
def disk(url: UrlOption = DEFAULT_URL, user: UserOption = None, json_output: JsonOption = False) -> None:
    """The store's disk: how full it is, what is free, and whether the broker accepts writes."""
    with Admin(url, user=user) as admin:
        usage = admin.disk()
    if json_output:
        print_json(usage)
        return
    print_fields(
        [
            ("used", f"{usage['used_percent']:.1f} %"),
            ("free", format_bytes(usage["free_bytes"])),
            ("accepting writes", usage["writable"]),
            ("refuses writes above", f"{usage['refuse_writes_percent']:g} %"),
            ("accepts writes again at", f"{usage['accept_writes_percent']:g} %"),
        ]
    )
