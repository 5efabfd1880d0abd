"""The peers benchmark's plain lanes (one request at a time on one httpx connection), the JSON
socket latency lane, the HTTP floors (the plain lanes against the bare ASGI relay) and the store
floors (the JSON socket lane and the plain lanes against the relay with a store), with a handful of
messages: a real broker process, the relays, and Redis and NATS when they answer on localhost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import peers

PLAIN = (
    "plain-json",
    "plain-binary",
    "plain-http",
    "ws-json",
    "floor",
    "floor-json",
    "floor-binary",
    "ws-store-floor",
    "store-floor-json",
    "store-floor-binary",
)
# Each new row with a target, and the target as the report writes it.
TARGETS = {
    "Wharf plain JSON produce": ">= 1x",
    "Wharf plain JSON consume": ">= 2x",
    "Wharf plain binary produce": ">= 2x",
    "Wharf plain binary consume": ">= 5x",
    "Wharf plain HTTP e2e p99": "<= 2x",
    "Wharf WebSocket JSON e2e p99": "<= 1x",
}
ROWS = (
    *TARGETS,
    "Wharf plain HTTP e2e p50",
    "Wharf WebSocket JSON e2e p50",
    "HTTP floor e2e p50",
    "HTTP floor e2e p99",
    "HTTP floor, JSON batches produce",
    "HTTP floor, JSON batches consume",
    "HTTP floor, binary batches produce",
    "HTTP floor, binary batches consume",
    "WebSocket store floor e2e p50",
    "WebSocket store floor e2e p99",
    "HTTP store floor, JSON batches produce",
    "HTTP store floor, JSON batches consume",
    "HTTP store floor, binary batches produce",
    "HTTP store floor, binary batches consume",
)
CPU_ROWS = (
    "Wharf plain JSON produce broker CPU",
    "Wharf plain JSON consume broker CPU",
    "Wharf plain binary produce broker CPU",
    "Wharf plain binary consume broker CPU",
    "Wharf plain HTTP e2e broker CPU",
    "Wharf WebSocket JSON e2e broker CPU",
    "HTTP floor e2e broker CPU",  # the relay's process
    "HTTP floor, JSON batches produce broker CPU",
    "HTTP floor, binary batches consume broker CPU",
    "WebSocket store floor e2e broker CPU",  # the store relay's process
)


def test_the_plain_lanes_report_their_rows_judged_against_the_peers(tmp_path: Path) -> None:
    path = tmp_path / "peers.json"
    argv = ["--quick", "--messages", "300", "--samples", "20", "--wharf", ",".join(PLAIN)]

    assert peers.main([*argv, "--json", str(path)]) == 0

    report = json.loads(path.read_text())
    results = {result["name"]: result for result in report["results"]}
    for name in ROWS:
        assert results[name]["value"] > 0, name
    # The broker's own process is always visible; a few hundred messages may take under one tick.
    for name in CPU_ROWS:
        assert results[name]["value"] >= 0, name
    # Only the lanes asked for: no row of the other Wharf lanes.
    assert not any(name.startswith(("Wharf binary", "Wharf JSON")) for name in results), list(results)
    assert report["settings"]["wharf_lanes"] == list(PLAIN)
    # The floor is a reference: no target of its own, never the baseline of another row.
    floor = [result for name, result in results.items() if name.startswith("HTTP floor")]
    assert len(floor) == 11 and not any(result["target"] or result["baseline"] for result in floor)
    assert "bare ASGI relay" in results["HTTP floor e2e p50"]["note"]
    assert "Wharf plain binary's client code" in results["HTTP floor, binary batches produce"]["note"]
    assert not any(str(result["baseline"]).startswith("HTTP floor") for result in results.values())
    # So is the store floor: a relay that stores each message in Wharf's store.
    store_floor = [result for name, result in results.items() if name.startswith("WebSocket store floor")]
    assert len(store_floor) == 3 and not any(result["target"] or result["baseline"] for result in store_floor)
    assert "Wharf's store" in results["WebSocket store floor e2e p50"]["note"]
    assert not any(str(result["baseline"]).startswith("WebSocket") for result in results.values())
    # And the plain lanes' store floors: the relay storing each request's messages in Wharf's store.
    http_store_floor = [result for name, result in results.items() if name.startswith("HTTP store floor")]
    assert len(http_store_floor) == 8
    assert not any(result["target"] or result["baseline"] for result in http_store_floor)
    assert "Wharf's store" in results["HTTP store floor, JSON batches produce"]["note"]
    assert "Wharf plain binary's client code" in results["HTTP store floor, binary batches produce"]["note"]
    if set(report["settings"]["skipped"]) != {"redis", "nats"}:  # a peer to judge by
        judged = {name: result["target"] for name, result in results.items() if result["target"]}
        assert judged == TARGETS
        assert all(results[name]["ratio"] > 0 and results[name]["verdict"] for name in TARGETS)
    else:
        assert not any(result["target"] for result in results.values())


def test_an_unknown_wharf_lane_ends_the_run_before_it_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert peers.main(["--quick", "--wharf", "plain-json,plain-xml"]) == 2

    assert "plain-xml" in capsys.readouterr().err
