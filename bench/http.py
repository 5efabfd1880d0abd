"""HTTP benchmark: produce, batch produce, pull, long-poll wake latency and thousands of held pulls.

Run from the repository root (needs ``wrk``: ``apt-get install -y wrk``)::

    .venv/bin/python -m bench.http [--quick] [--json out.json] [--only produce,batch,pull,wake,holds]
                                   [--profile DIR]

A real broker (``python -m app``: uvicorn with uvloop and httptools, one worker, ASYNC flush, 1 GiB
CommitLog segments) runs in its own process; the load comes from other processes. Both share the
machine's cores, so every rate here is what one server process reaches while the load generator
takes part of the CPU.

* ``produce``: one message (128 B) per POST, from wrk (keep-alive, 64 connections, 2 threads), as a
  raw ``application/octet-stream`` body and as a small JSON object. Baseline: ``bench.bare_app``, a
  FastAPI route that reads its body and answers a small JSON, under uvicorn with the same flags,
  driven by the same wrk script in the same repeats. Target: twice the baseline's rate. Beside it
  two floors with no target: the same answer from a raw ASGI callable under uvicorn
  (``bench.bare_app:asgi``) and from an httptools protocol with no ASGI cycle
  (``bench.bare_protocol``), the ceilings of a path below the framework and below uvicorn.
* ``batch``: 100 messages of 1 KiB per POST, as JSON and as the binary batch
  (``application/vnd.wharf.batch``); messages per second.
* ``pull``: 1000 messages (1 KiB bodies) per GET from a pre-filled topic, as JSON and as raw records
  (``Accept: application/vnd.wharf.records``); messages per second.
* ``wake``: a pull held on an empty queue, then a produce to that queue: the time from the produce's
  answer reaching the producer to the pull's answer reaching the consumer (two raw connections
  polled by one thread against one clock), p50 and p99 over a few hundred rounds.
* ``holds``: 5,000 pulls held at once over 50 topics x 4 queues (raw asyncio connections), then one
  message to each queue: the server's extra RSS while they are held, and the time from sending the
  produces until the last held pull's answer is in. A fresh broker per repeat.

Every figure is the median of its repeats. ``--profile DIR`` adds one extra (uncounted) wrk run per
load with ``py-spy`` sampling the server and writes the collapsed stacks and a ranked summary
(``python -m bench.http_profile``) to ``DIR``; ``holds`` samples the phases of its first repeat,
which is counted, so take the figures from a run without ``--profile``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from bench import harness, http_longpoll, http_profile, http_wrk
from bench.harness import RESULTS_DIR, Result
from bench.http_load import raise_fd_limit, wrk_path
from bench.http_setup import FULL, QUICK, Bench, broker_settings

SECTIONS = ("produce", "batch", "pull", "wake", "holds")
RUNS: dict[str, Callable[[Bench], list[Result]]] = {
    "produce": http_wrk.produce,
    "batch": http_wrk.batch,
    "pull": http_wrk.pull,
    "wake": http_longpoll.wake,
    "holds": http_longpoll.holds,
}


def make_parser() -> argparse.ArgumentParser:
    parser = harness.arguments("http", __doc__, "shorter runs, one repeat", SECTIONS, raw=True)
    parser.add_argument("--profile", type=Path, default=None, help="sample the server with py-spy into DIR")
    parser.add_argument(
        "--dir", type=Path, default=RESULTS_DIR, help="parent of the scratch directory (a real disk)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args, plan, sections = harness.parse(make_parser(), argv, FULL, QUICK, SECTIONS)
    if wrk_path() is None and set(sections) & {"produce", "batch", "pull"}:
        print("wrk is not installed: apt-get install -y wrk", file=sys.stderr)
        return 1
    if args.profile is not None and http_profile.py_spy() is None:
        print("py-spy is not installed: .venv/bin/pip install py-spy", file=sys.stderr)
        return 1
    fd_limit = raise_fd_limit()  # the broker inherits it
    if "holds" in sections and fd_limit < plan.holds * 2 + 1000:
        print(f"the open-file limit is {fd_limit}, too low for {plan.holds} held pulls", file=sys.stderr)
        return 1
    load: dict[str, float] = {}
    started = time.perf_counter()

    def run(name: str) -> list[Result]:
        load[name] = os.getloadavg()[0]  # the machine is shared: say how busy it was
        return RUNS[name](bench)

    def title(name: str, seconds: float) -> str:
        return f"{name} ({seconds:.0f} s, 1-min load average {load[name]:.1f} at start)"

    with harness.scratch_dir("http-bench-", args.dir) as root:
        bench = Bench(plan, root, args.profile)
        try:
            results = harness.run_sections(sections, run, title)
        finally:
            with contextlib.suppress(Exception):
                bench.close()
    settings = {
        "plan": asdict(plan),
        "sections": sections,
        "broker": broker_settings(),
        "wrk": {"threads": plan.threads, "connections": plan.connections},
        "open_file_limit": fd_limit,
        "load_average_at_section_start": load,
    }
    harness.report("http", args.json, argv, results, settings, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
