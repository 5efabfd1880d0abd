"""Sampling profiles of a running server process with py-spy, summarised as text.

``record(pid, seconds, out)`` runs ``py-spy record --format raw --threads`` against the process
(collapsed stacks, one line per distinct stack with its sample count); ``summarise(path)`` reads
such a file and ranks functions by self and by inclusive samples, for one thread (the event loop's,
by default: the thread whose stacks hold ``Runner.run``) or for all of them.

    .venv/bin/python -m bench.http_profile profile.txt [--all-threads] [--top 30]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

PY_SPY = Path(sys.executable).with_name("py-spy")
_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def py_spy() -> str | None:
    """The py-spy executable next to this interpreter, else on PATH, else None."""
    if PY_SPY.exists():
        return str(PY_SPY)
    return shutil.which("py-spy")


def record(pid: int, seconds: float, out: Path, rate: int = 100) -> subprocess.Popen[bytes]:
    """Start sampling ``pid`` for ``seconds`` into ``out`` (collapsed stacks); the caller waits."""
    executable = py_spy()
    if executable is None:
        raise RuntimeError("py-spy is not installed: .venv/bin/pip install py-spy")
    return subprocess.Popen(
        [
            executable,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(max(1, round(seconds))),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--threads",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@dataclass(slots=True)
class Profile:
    """Sample counts of one thread (or all): total, per function self and inclusive."""

    samples: int = 0
    self_counts: Counter[str] = field(default_factory=Counter)
    inclusive: Counter[str] = field(default_factory=Counter)

    def top(self, counts: Counter[str], count: int) -> list[tuple[str, int, float]]:
        return [(name, n, n / self.samples if self.samples else 0.0) for name, n in counts.most_common(count)]


def _short(frame: str) -> str:
    """``func (path/to/module.py:123)`` -> ``func (module.py)``, lines dropped so calls add up."""
    found = _FRAME.match(frame)
    if found is None:
        return frame
    path = found["file"]
    for marker in ("site-packages/", "lib/python3."):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker == "lib/python3.":
                path = "stdlib/" + path.split("/", 1)[-1]
            break
    return f"{found['name']} ({path})"


def summarise(path: Path, thread: str | None = "Runner.run") -> Profile:
    """Rank the functions of the stacks in ``path``. ``thread``: keep only threads whose stacks
    contain a frame with this text (None: every thread)."""
    stacks: list[tuple[str, list[str], int]] = []
    for line in path.read_text().splitlines():
        stack, _, number = line.rpartition(" ")
        if not stack or not number.isdigit():
            continue
        count = int(number)
        frames = stack.split(";")
        # With --threads the first element is "thread (<tid>): <name>" (after "process ..." with
        # --subprocesses): the thread's identity, not a frame.
        heads = [frame for frame in frames if frame.startswith(("process ", "thread ("))]
        name = ";".join(heads) or "?"
        frames = frames[len(heads) :]
        stacks.append((name, frames, count))
    wanted = None
    if thread is not None:
        wanted = {name for name, frames, _ in stacks if any(thread in frame for frame in frames)}
    profile = Profile()
    for name, frames, count in stacks:
        if wanted is not None and name not in wanted:
            continue
        shortened = [_short(frame) for frame in frames]
        profile.samples += count
        if shortened:
            profile.self_counts[shortened[-1]] += count
        for function in set(shortened):
            profile.inclusive[function] += count
    return profile


def render(profile: Profile, top: int = 25) -> str:
    lines = [f"{profile.samples} samples"]
    for title, counts in (("self", profile.self_counts), ("inclusive", profile.inclusive)):
        lines.append(f"-- {title}")
        for name, n, share in profile.top(counts, top):
            lines.append(f"{share:6.1%} {n:6d}  {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http_profile", description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="py-spy --format raw output")
    parser.add_argument("--all-threads", action="store_true", help="not only the event loop's thread")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    print(render(summarise(args.path, None if args.all_threads else "Runner.run"), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
