"""The HTTP benchmark's plan, its broker and the wrk runs its sections share (see bench/http.py)."""

from __future__ import annotations

import contextlib
import random
import signal
import string
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from app.store import StoreConfig
from bench import http_profile
from bench.http_load import (
    WrkRun,
    run_wrk,
)
from tests.api.server import BrokerProcess

MIB = 1 << 20
GIB = 1 << 30

SMALL_BODY = 128
LARGE_BODY = 1024
BATCH_MESSAGES = 100
PULL_BATCH = 1000
QUEUES = 4


@dataclass(frozen=True, slots=True)
class Plan:
    """How much work each section does."""

    repeats: int
    seconds: float  # per wrk run
    warmup_seconds: float
    connections: int  # single-message produce
    batch_connections: int  # batch produce and pull: large bodies, fewer in flight
    threads: int
    pull_per_queue: int
    wake_rounds: int
    holds: int
    hold_topics: int
    hold_repeats: int
    profile_seconds: float


FULL = Plan(
    repeats=3,
    seconds=5,
    warmup_seconds=2,
    connections=64,
    batch_connections=16,
    threads=2,
    pull_per_queue=50_000,
    wake_rounds=200,
    holds=5_000,
    hold_topics=50,
    hold_repeats=3,
    profile_seconds=8,
)
# Shorter runs, one repeat: what is not named here is as in FULL.
QUICK = replace(
    FULL,
    repeats=1,
    seconds=3,
    warmup_seconds=1,
    pull_per_queue=10_000,
    wake_rounds=100,
    hold_repeats=1,
    profile_seconds=5,
)


def text_body(size: int, seed: int) -> str:
    """Printable ASCII (so JSON carries it as UTF-8, not base64), different per seed."""
    rng = random.Random(seed)
    return "".join(rng.choices(string.ascii_letters + string.digits, k=size))


def broker_settings() -> dict[str, object]:
    """The store's own defaults, over the small files and index the test helper
    (``tests.api.server.BrokerProcess``) starts brokers with: a benchmark measures what users run."""
    defaults = StoreConfig(store_dir=Path("unused"))
    return {
        name: getattr(defaults, name)
        for name in (
            "flush_mode",
            "commitlog_file_size",
            "consumequeue_file_entries",
            "max_hash_slots",
            "max_index_count",
        )
    }


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


class Bench:
    """One broker for the load sections; scratch files under ``root``."""

    def __init__(self, plan: Plan, root: Path, profile_dir: Path | None) -> None:
        self.plan = plan
        self.root = root
        self.profile_dir = profile_dir
        self.broker = BrokerProcess(root / "store", **broker_settings())
        self.broker.start()
        self.client = httpx.Client(base_url=self.broker.url, timeout=60)

    def close(self) -> None:
        self.client.close()
        self.broker.stop()

    @property
    def pid(self) -> int:
        assert self.broker.process is not None
        return self.broker.process.pid

    def create_topic(self, name: str, queues: int = QUEUES) -> None:
        self.client.post("/v1/topics", json={"name": name, "queues": queues}).raise_for_status()

    def file(self, name: str, data: bytes) -> Path:
        path = self.root / name
        path.write_bytes(data)
        return path

    def wrk(self, url: str, script: Path, connections: int, pid: int, seconds: float | None = None) -> WrkRun:
        plan = self.plan
        return run_wrk(url, script, seconds or plan.seconds, connections, plan.threads, pid)

    @contextlib.contextmanager
    def sampling(self, name: str, pid: int) -> Iterator[None]:
        """Sample ``pid`` with py-spy while the block runs (``--profile``); else do nothing."""
        if self.profile_dir is None:
            yield
            return
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        out = self.profile_dir / f"{name}.txt"
        sampler = http_profile.record(pid, 600, out)
        time.sleep(0.3)  # let py-spy attach
        try:
            yield
        finally:
            sampler.send_signal(signal.SIGINT)  # py-spy writes what it has and exits
            sampler.communicate()
        if out.exists():
            summary = http_profile.render(http_profile.summarise(out), top=40)
            (self.profile_dir / f"{name}.summary.txt").write_text(f"{name}\n{summary}\n")
            print(f"  profile {name}: {out}")

    def profile(self, name: str, url: str, script: Path, connections: int, pid: int) -> None:
        """An extra, uncounted wrk run with py-spy sampling the server (``--profile``)."""
        if self.profile_dir is None:
            return
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        out = self.profile_dir / f"{name}.txt"
        seconds = self.plan.profile_seconds
        sampler = http_profile.record(pid, seconds, out)
        time.sleep(0.3)  # let py-spy attach
        run = self.wrk(url, script, connections, pid, seconds + 2)
        _, errors = sampler.communicate()
        if sampler.returncode != 0:
            print(f"py-spy failed on {name}: {errors.decode(errors='replace')}", file=sys.stderr)
            return
        summary = http_profile.render(http_profile.summarise(out), top=40)
        header = f"{name}: {run.requests_per_s:,.0f} requests/s while sampled (py-spy slows the server)\n"
        (self.profile_dir / f"{name}.summary.txt").write_text(header + summary + "\n")
        print(f"  profile {name}: {out}")

    def loads(
        self, section: str, targets: dict[str, tuple[str, Path, int]], connections: int
    ) -> dict[str, list[WrkRun]]:
        """wrk on each target (url, script, server pid): one warm-up run each, then ``repeats``
        rounds with the targets interleaved (against the machine's noise), then an extra run each
        under the profiler (``--profile``); the counted runs by target name."""
        plan = self.plan
        for url, script, pid in targets.values():
            self.wrk(url, script, connections, pid, plan.warmup_seconds)
        runs: dict[str, list[WrkRun]] = {name: [] for name in targets}
        for _ in range(plan.repeats):
            for name, (url, script, pid) in targets.items():
                runs[name].append(self.wrk(url, script, connections, pid))
        for name, (url, script, pid) in targets.items():
            self.profile(f"{section}-{name}", url, script, connections, pid)
        return runs
