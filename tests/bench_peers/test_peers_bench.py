"""The peers benchmark end to end with a handful of messages: a real broker process, and Redis and
NATS when they answer on localhost (the benchmark skips them, with the reason, when not)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import peers
from tests.api.server import free_port

WHARF_ROWS = (
    "Wharf binary produce",
    "Wharf JSON produce",
    "Wharf binary consume",
    "Wharf JSON consume",
    "Wharf binary e2e p50",
    "Wharf binary e2e p99",
)
PEERS = {"redis": "Redis Streams", "nats": "NATS JetStream"}


def test_a_small_run_reports_every_row_with_a_positive_figure(tmp_path: Path) -> None:
    path = tmp_path / "peers.json"

    assert peers.main(["--quick", "--messages", "300", "--samples", "20", "--json", str(path)]) == 0

    report = json.loads(path.read_text())
    values = {result["name"]: result["value"] for result in report["results"]}
    for name in WHARF_ROWS:
        assert values[name] > 0, name
    # The broker's own process is always visible; a few hundred messages may take under one tick.
    for lane in ("Wharf binary", "Wharf JSON"):
        for what in ("produce", "consume"):
            assert values[f"{lane} {what} broker CPU"] >= 0
    skipped = report["settings"]["skipped"]
    measured = [name for system, name in PEERS.items() if system not in skipped]
    for name in measured:
        for row in ("produce", "consume", "e2e p50", "e2e p99"):
            assert values[f"{name} {row}"] > 0, (name, row)
    for system, name in PEERS.items():
        if system in skipped:
            assert not any(row.startswith(name) for row in values), values
    judged = {result["name"]: result for result in report["results"] if result["target"]}
    if measured:
        assert set(judged) == {
            "Wharf binary produce",
            "Wharf JSON produce",
            "Wharf binary consume",
            "Wharf JSON consume",
            "Wharf binary e2e p99",
            "Wharf plain JSON produce",
            "Wharf plain JSON consume",
            "Wharf plain binary produce",
            "Wharf plain binary consume",
            "Wharf plain HTTP e2e p99",
            "Wharf WebSocket JSON e2e p99",
        }
        assert all(result["ratio"] > 0 and result["verdict"] for result in judged.values())
    else:
        assert not judged


def test_peers_that_do_not_answer_are_skipped_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "peers.json"
    closed = f"127.0.0.1:{free_port()}"  # nothing listens there

    argv = ["--quick", "--only", "throughput", "--messages", "200", "--json", str(path)]
    assert peers.main([*argv, "--redis", f"redis://{closed}", "--nats", f"nats://{closed}"]) == 0

    report = json.loads(path.read_text())
    assert set(report["settings"]["skipped"]) == set(PEERS)
    assert all(reason for reason in report["settings"]["skipped"].values())
    names = [result["name"] for result in report["results"]]
    assert "Wharf binary produce" in names and "Wharf JSON consume" in names
    assert not any(name.startswith(tuple(PEERS.values())) for name in names)
    assert not any(result["target"] for result in report["results"])  # no peer, nothing to judge by
