"""The harness every benchmark shares: its common options, a scratch directory, repeated timing,
targets and baselines, a printed table per section and one JSON report.

The machine benchmarks run on is shared and noisy, so each figure is the median of several repeats,
and a figure that is judged against something the machine itself can do (the disk's bandwidth, one
fsync per message) is judged against a baseline measured in the same run, not against a constant.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

Plan = TypeVar("Plan")

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPOSITORY = RESULTS_DIR.parent.parent


def scratch_parent() -> Path:
    """Where benchmark data goes: the system temporary directory when it is on the repository's
    disk (not tmpfs), else bench/results/. Disk figures must come from the disk the store uses."""
    temporary = Path(tempfile.gettempdir())
    if os.stat(temporary).st_dev == os.stat(REPOSITORY).st_dev:
        return temporary
    return RESULTS_DIR


@dataclass(frozen=True, slots=True)
class Target:
    """A goal for a figure: ``at_least`` or ``at_most`` a threshold, on the value or on the ratio."""

    threshold: float
    at_least: bool = True
    on_ratio: bool = False

    def describe(self, unit: str) -> str:
        sign = ">=" if self.at_least else "<="
        if self.on_ratio:
            return f"{sign} {self.threshold:g}x"
        return f"{sign} {format_value(self.threshold)} {unit}"

    def passed(self, measured: float) -> bool:
        return measured >= self.threshold if self.at_least else measured <= self.threshold

    def shortfall(self, measured: float) -> float:
        """How far a missed target was missed, as a fraction of the threshold (0 when met)."""
        if self.passed(measured):
            return 0.0
        if self.at_least:
            return (self.threshold - measured) / self.threshold
        return (measured - self.threshold) / self.threshold


@dataclass(slots=True)
class Result:
    """One reported figure: the median of ``samples``, optionally against a baseline and a target."""

    name: str
    unit: str
    samples: list[float]
    target: Target | None = None
    baseline: str | None = None  # name of the result this one is divided by
    ratio: float | None = None
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)
    alias: str = ""  # short name when this result is another's baseline

    @property
    def value(self) -> float:
        return statistics.median(self.samples)

    def against(self, baseline: Result) -> Result:
        """Set :attr:`ratio` to this figure over ``baseline``'s (both medians)."""
        self.baseline = baseline.alias or baseline.name
        self.ratio = self.value / baseline.value if baseline.value else None
        return self

    @property
    def judged(self) -> float | None:
        if self.target is None:
            return None
        return self.ratio if self.target.on_ratio else self.value

    @property
    def verdict(self) -> str:
        measured = self.judged
        if self.target is None or measured is None:
            return ""
        if self.target.passed(measured):
            return "PASS"
        shortfall = self.target.shortfall(measured)
        return f"MISS by {shortfall:.1%}" if shortfall < 0.1 else f"MISS by {shortfall:.0%}"

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["value"] = self.value
        data["target"] = self.target.describe(self.unit) if self.target else None
        data["verdict"] = self.verdict or None
        return data


def measure(run: Callable[[], float], repeats: int) -> list[float]:
    """Call ``run`` (which returns one sample) ``repeats`` times; the list of samples."""
    return [run() for _ in range(repeats)]


class Stopwatch:
    """``with Stopwatch() as watch: ...`` then ``watch.seconds``."""

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.perf_counter() - self._start


def format_value(value: float) -> str:
    if value >= 100_000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:,.1f}"
    return f"{value:.3g}"


def print_table(results: Sequence[Result], title: str = "") -> None:
    """A plain-text table (name, median, unit, ratio to its baseline, target, verdict), then notes."""
    header = ("benchmark", "median", "unit", "ratio", "target", "result")
    rows = []
    for result in results:
        ratio = f"{result.ratio:.2f}x {result.baseline}" if result.ratio is not None else ""
        target = result.target.describe(result.unit) if result.target else ""
        rows.append((result.name, format_value(result.value), result.unit, ratio, target, result.verdict))
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    if title:
        print(f"\n{title}")
    line = "  ".join(cell.ljust(width) for cell, width in zip(header, widths, strict=True))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    for result in results:
        if result.note:
            print(f"  {result.name}: {result.note}")


def machine_info() -> dict[str, object]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_json(
    path: Path, benchmark: str, command: str, results: Sequence[Result], settings: dict[str, object]
) -> None:
    """Write the command, the machine, the settings and every result (all samples) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": benchmark,
        "command": command,
        "machine": machine_info(),
        "settings": settings,
        "results": [result.as_dict() for result in results],
    }
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")


def select_sections(only: str, known: Sequence[str]) -> list[str] | None:
    """The sections named in a comma-separated ``--only``; None (after saying why) if one is unknown."""
    sections = [name.strip() for name in only.split(",") if name.strip()]
    unknown = sorted(set(sections) - set(known))
    if unknown:
        print(f"unknown sections {unknown}; choose from {list(known)}", file=sys.stderr)
        return None
    return sections


def arguments(
    name: str, description: str, quick: str, sections: Sequence[str] = (), raw: bool = False
) -> argparse.ArgumentParser:
    """A parser with the options every benchmark has: ``--quick`` (``quick`` says what it does),
    ``--json`` (default bench/results/<name>.json) and, for a benchmark of ``sections``, ``--only``.
    ``raw`` keeps the description's layout (a module docstring shown whole)."""
    parser = argparse.ArgumentParser(
        prog=f"python -m bench.{name}",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument(
        "--json", type=Path, default=RESULTS_DIR / f"{name}.json", help="where to write results"
    )
    if sections:
        parser.add_argument(
            "--only", default=",".join(sections), help=f"comma-separated subset of {sections}"
        )
    return parser


def parse(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    full: Plan,
    quick: Plan,
    sections: Sequence[str] = (),
) -> tuple[argparse.Namespace, Plan, list[str]]:
    """The arguments, the plan (``quick`` with --quick, else ``full``) and the sections --only names,
    in order; an unknown section is named on stderr and ends the run with status 2."""
    args = parser.parse_args(argv)
    chosen = select_sections(args.only, sections) if sections else []
    if chosen is None:
        raise SystemExit(2)
    return args, quick if args.quick else full, chosen


@contextlib.contextmanager
def scratch_dir(prefix: str, parent: Path) -> Iterator[Path]:
    """A fresh directory under ``parent`` for one run, removed afterwards."""
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_sections(
    sections: Sequence[str],
    run: Callable[[str], list[Result]],
    title: Callable[[str, float], str] | None = None,
) -> list[Result]:
    """Run each section, printing its table under ``title(name, seconds)``; every result, in order."""
    results: list[Result] = []
    for name in sections:
        with Stopwatch() as watch:
            section = run(name)
        print_table(section, title(name, watch.seconds) if title else f"{name} ({watch.seconds:.0f} s)")
        results += section
    return results


def report(
    name: str,
    path: Path,
    argv: Sequence[str] | None,
    results: Sequence[Result],
    settings: dict[str, object],
    started: float | None = None,
) -> None:
    """Print the total time (when ``started`` is given), then write the JSON report to ``path``."""
    if started is not None:
        elapsed = time.perf_counter() - started
        print(f"\ntotal {elapsed:.0f} s")
        settings = {**settings, "elapsed_s": round(elapsed, 1)}
    command = " ".join([f".venv/bin/python -m bench.{name}", *(sys.argv[1:] if argv is None else argv)])
    write_json(path, name, command, results, settings)
    print(f"wrote {path}")
