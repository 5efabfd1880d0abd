"""A nemesis run: the cluster, the workload and the faults for a set time, then every fault healed,
the replicas converged, the groups drained, and the history checked.

    python -m tests.chaos.run                          # 60 s, seed 1
    WHARF_CHAOS_SECONDS=1200 WHARF_CHAOS_SEED=7 python -m tests.chaos.run

It needs root (a tmpfs for the slave whose disk fills) and the PostgreSQL of the test suite. The
history (one JSON line per operation), the brokers' logs and the checker's table stay in
WHARF_CHAOS_DIR (default: a new directory under /tmp) when the run fails, and are removed when it
passes; the exit status is the checker's.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.chaos.checker import Report, check
from tests.chaos.cluster import BROKER_NAMES, Cluster, Node
from tests.chaos.history import History
from tests.chaos.nemesis import Nemesis
from tests.chaos.workload import Workload
from tests.conftest import throwaway_database

RECOVERY_BOUND_S = 30.0  # the longest a fault may leave the cluster without a SEND_OK
SETTLE_S = 3.0  # producers go on this long after the last fault healed
CONVERGE_S = 120.0
DRAIN_S = 120.0


def settings() -> tuple[float, int]:
    return float(os.environ.get("WHARF_CHAOS_SECONDS", "60")), int(os.environ.get("WHARF_CHAOS_SEED", "1"))


def run(root: Path, registry_url: str, seconds: float, seed: int) -> Report:
    history = History(root / "history.jsonl")
    history.add("run", seconds=seconds, seed=seed)
    cluster = Cluster(root, registry_url)
    workload: Workload | None = None
    try:
        cluster.start()
        workload = Workload(cluster, history)
        workload.start()
        Nemesis(cluster, history, random.Random(seed)).run_for(seconds)
        cluster.heal()
        time.sleep(SETTLE_S)
        workload.stop_producing()
        converged = cluster.wait_converged(CONVERGE_S)
        drained = workload.drain(DRAIN_S)
        missing = workload.missing()
        workload.stop()
        workload = None
        for name in BROKER_NAMES:
            equal, detail = (
                replicas_equal(cluster.by_name(name)) if converged else (False, "did not converge")
            )
            history.add("converged", broker_name=name, equal=equal, detail=detail)
        if drained:
            history.add("end")
        else:
            history.add("stalled", missing=missing)  # no "end": the checker names what is lost
    finally:
        if workload is not None:
            workload.stop()
        cluster.close()
        history.close()
    return check(history.events, RECOVERY_BOUND_S)


def replicas_equal(nodes: list[Node]) -> tuple[bool, str]:
    """Whether the nodes hold the same CommitLog bytes up to its end, and the same epoch log."""
    ends = {
        node.label: int(str((node.ha(timeout_s=5) or {}).get("commitlog_max_offset", -1))) for node in nodes
    }
    if len(set(ends.values())) != 1:
        return False, f"CommitLog ends differ: {ends}"
    end = next(iter(ends.values()))
    # Retention deletes a full disk's oldest segments first (SPEC 1.9): compare what every replica
    # still holds.
    start = max(first_segment(node.store_dir) for node in nodes)
    logs = {node.label: commitlog(node.store_dir, start, end) for node in nodes}
    epochs = {node.label: epoch_log(node.store_dir) for node in nodes}
    differing = sorted({label for label in logs if logs[label] != logs[nodes[0].label]})
    if differing:
        return False, f"CommitLog bytes {start}..{end} differ from {nodes[0].label}'s on {differing}"
    if len(set(epochs.values())) != 1:
        return False, f"epoch logs differ: { {k: v.decode() for k, v in epochs.items()} }"
    return (
        True,
        f"{len(nodes)} replicas hold the same bytes {start}..{end} and epochs {epochs[nodes[0].label].decode()}",
    )


def epoch_log(store_dir: Path) -> bytes:
    """The epoch log's bytes; none (every record written in epoch 0) when it has no file."""
    path = store_dir / "config" / "epochs.json"
    return path.read_bytes() if path.exists() else b"[]"


def segments(store_dir: Path) -> list[Path]:
    return sorted(path for path in (store_dir / "commitlog").iterdir() if path.name.isdigit())


def first_segment(store_dir: Path) -> int:
    """The CommitLog offset of the first segment the store still has."""
    found = segments(store_dir)
    return int(found[0].name) if found else 0


def commitlog(store_dir: Path, start: int, end: int) -> bytes:
    """The CommitLog's bytes ``[start, end)``, read segment by segment at their offsets; short when
    a segment in that range is missing."""
    data = bytearray()
    for path in segments(store_dir):
        base = int(path.name)
        with path.open("rb") as segment:
            size = os.fstat(segment.fileno()).st_size
            low, high = max(start, base), min(end, base + size)
            if low >= high:
                continue
            segment.seek(low - base)
            data += segment.read(high - low)
    return bytes(data)


def main() -> int:
    seconds, seed = settings()
    root = Path(os.environ.get("WHARF_CHAOS_DIR") or tempfile.mkdtemp(prefix="wharf-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    databases = throwaway_database("wharf_chaos")
    registry_url = next(databases)
    try:
        report = run(root, registry_url, seconds, seed)
    finally:
        next(databases, None)
    print(report.table())
    if report.ok:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"history and broker logs kept in {root}", file=sys.stderr)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
