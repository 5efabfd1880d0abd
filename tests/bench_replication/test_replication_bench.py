"""The replication benchmark end to end with a short run: real master and slave processes."""

from __future__ import annotations

import json
from pathlib import Path

from bench import replication


def test_a_quick_run_reports_every_row_with_a_positive_figure(tmp_path: Path) -> None:
    path = tmp_path / "replication.json"

    assert replication.main(["--quick", "--json", str(path)]) == 0

    values = {result["name"]: result for result in json.loads(path.read_text())["results"]}
    for name in (
        "produce, master alone",
        "produce, master with a slave",
        "replication rate",
        "slave holds all, after the last answer",
        "produce latency p50, SYNC_MASTER",
        "produce latency p99, SYNC_MASTER",
        "produce rate, SYNC_MASTER",
    ):
        assert values[name]["value"] > 0, name
    assert (
        values["slave lag under load, max"]["value"] >= values["slave lag under load, median"]["value"] >= 0
    )
    for name in (
        "produce, master with a slave",
        "produce rate, SYNC_MASTER",
        "produce latency p99, SYNC_MASTER",
    ):
        assert values[name]["ratio"] > 0, name
