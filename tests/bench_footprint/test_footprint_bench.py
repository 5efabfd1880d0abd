"""The footprint benchmark end to end on its idle scenario: a real broker process at its default
settings, one message, its store and memory measured. The run must report every row with a number,
and the idle store must stay within its 64 MiB: what the defaults allocate does not depend on the
machine's load (memory does, and is only reported here)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench import footprint

LABEL = "idle, 1 message"
PARTS = ("commitlog", "consumequeue", "index", "config", "other")


def test_a_quick_idle_run_reports_the_store_and_the_memory(tmp_path: Path) -> None:
    path = tmp_path / "footprint.json"

    assert footprint.main(["--quick", "--only", "idle", "--json", str(path)]) in (0, 1)

    report = json.loads(path.read_text())
    results = {result["name"]: result for result in report["results"]}
    assert f"{LABEL}: ran to the end" not in results, results[f"{LABEL}: ran to the end"]["note"]
    for name in (
        f"{LABEL}: store on disk",
        f"{LABEL}: store apparent size",
        *(f"{LABEL}: {part} on disk" for part in PARTS),
        f"{LABEL}: VmRSS",
        f"{LABEL}: RssAnon",
        f"{LABEL}: RssFile",
    ):
        value = results[name]["value"]
        assert isinstance(value, float) and math.isfinite(value) and value >= 0, (name, value)
    disk = results[f"{LABEL}: store on disk"]
    parts = sum(results[f"{LABEL}: {part} on disk"]["extra"]["bytes"] for part in PARTS)
    assert parts == disk["extra"]["bytes"] > 0
    assert disk["target"] and disk["verdict"] == "PASS", disk
    rss = results[f"{LABEL}: VmRSS"]
    assert rss["value"] > 0 and rss["target"] and rss["verdict"]
    assert results[f"{LABEL}: commitlog on disk"]["extra"]["apparent_bytes"] > 0  # the message is there
    # The broker ran at its defaults: no setting of the store's sizes reached it.
    assert set(report["settings"]["broker_environment"]) <= set(footprint.KEPT_SETTINGS)
    assert {anchor["name"] for anchor in report["settings"]["anchors"]} >= {
        "Kafka log segment (log.segment.bytes)",
        "RocketMQ CommitLog segment (mapedFileSizeCommitLog)",
    }
    assert not Path(report["settings"]["runs"]["idle"]["store"]).parent.exists()  # removed


def test_disk_usage_counts_what_du_counts(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    (store / "commitlog" / "0").write_bytes(b"x" * 10_000)
    (store / "checkpoint").write_bytes(b"y" * 10)
    with open(store / "commitlog" / "sparse", "wb") as sparse:
        sparse.truncate(1 << 20)  # a hole: apparent size, no blocks

    usage = footprint.disk_usage(store)

    assert usage.files == 3 and usage.directories == 2
    assert usage.part("commitlog", apparent=True) == 10_000 + (1 << 20) + (store / "commitlog").stat().st_size
    assert usage.part("commitlog") < 100_000  # the hole takes nothing
    assert usage.part("other", apparent=True) == 10 + store.stat().st_size
    assert usage.total_disk == sum(usage.part(part) for part in PARTS)
