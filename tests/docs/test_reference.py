"""The built site: ``mkdocs build --strict`` passes, the generated references hold every error code,
setting, command and operation the code defines, and no page loads anything from another host."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main
import yaml

from app.api.errors import ErrorCode
from app.cli.main import cli
from app.settings import Settings
from tests.docs.examples import ROOT


def page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text()


def test_every_error_code_is_in_the_reference(site: Path) -> None:
    html = page(site, "reference/errors")
    missing = [f"{int(code)} {code.name}" for code in ErrorCode if f'id="{int(code)}"' not in html]
    assert not missing, f"error codes missing from reference/errors: {missing}"
    assert len(re.findall(r"<tr>", html)) == len(ErrorCode) + 1


def test_every_setting_is_in_the_reference_with_its_default(site: Path) -> None:
    html = page(site, "reference/settings")
    rows = {
        row_id: row
        for row_id, row in re.findall(r'<tr>\s*<td><span id="(wharf_\w+)"></span>(.*?)</tr>', html, re.S)
    }
    missing = []
    for name, field in Settings.model_fields.items():
        row = rows.get(f"wharf_{name}")
        default = field.get_default(call_default_factory=True)
        default = getattr(default, "value", default)
        shown = str(default).lower() if isinstance(default, bool) else str(default)
        if row is None or (shown and f"<code>{shown}</code>" not in row):
            missing.append(f"WHARF_{name.upper()}={shown!r}")
    assert not missing, f"settings missing from reference/settings, or with another default: {missing}"


def test_every_command_is_in_the_cli_reference(site: Path) -> None:
    html = page(site, "reference/cli")
    root = typer.main.get_command(cli)
    missing = []
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        paths = [f"wharf {name}"]
        paths += [f"wharf {name} {sub}" for sub in getattr(command, "commands", {})]
        missing += [path for path in paths if f"<code>{path}</code>" not in html]
    assert not missing, f"commands missing from reference/cli: {missing}"


def test_every_operation_is_in_the_http_reference(site: Path) -> None:
    html = page(site, "reference/http-api")
    spec = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    operations = [
        op["operationId"] for item in spec["paths"].values() for op in item.values() if "operationId" in op
    ]
    missing = [operation for operation in operations if f"<code>{operation}</code>" not in html]
    assert operations and not missing, f"operations missing from reference/http-api: {missing}"


def test_included_files_are_rendered(site: Path) -> None:
    """BENCHMARKS.md and spark_jobs/README.md stay where they are and show on their pages."""
    benchmarks = (ROOT / "BENCHMARKS.md").read_text().splitlines()
    last_heading = [line for line in benchmarks if line.startswith("## ")][-1].removeprefix("## ")
    assert last_heading.split(":")[0] in page(site, "benchmarks")
    assert "Read options" in page(site, "guides/spark")


def test_the_site_loads_nothing_from_other_hosts(site: Path) -> None:
    """Offline: no web fonts, no CDN scripts or styles; Mermaid is served from the site."""
    remote = []
    for html_file in site.rglob("*.html"):
        for tag in re.findall(r"<(?:script|link)\b[^>]*>", html_file.read_text()):
            if re.search(r'(?:src|href)="(?:https?:)?//', tag) and 'rel="canonical"' not in tag:
                remote.append(f"{html_file.relative_to(site)}: {tag}")
    assert not remote, remote
    assert "assets/javascripts/mermaid.min.js" in page(site, "concepts/topics-and-queues")
    assert (site / "assets/javascripts/mermaid.min.js").stat().st_size > 1_000_000
