"""Fuzzing against openapi.yaml: schemathesis sends generated requests, valid and invalid, to a real
broker over HTTP and checks every answer against the document.

No answer may be a 5xx; every status, Content-Type and body must be one the document declares for
the operation; no request may take longer than REQUEST_TIMEOUT_S. The broker runs with its fast
lane (app.api.fast_lane, on by default), so the produce and pull requests of the common shapes are
checked against the document as the lane answers them, on the connection: the run fails if the
lane answered none. The seed is fixed, so a run is
repeatable. A longer run (the README's "Tests and benchmarks"):

    WHARF_FUZZ_MAX_EXAMPLES=1000 WHARF_FUZZ_SEED=7 .venv/bin/python -m pytest tests/contract/test_fuzz.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.server import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

SEED = int(os.environ.get("WHARF_FUZZ_SEED", "20151015"))
# Examples per operation and phase: with the coverage phase's own cases, about 1,400 requests.
MAX_EXAMPLES = int(os.environ.get("WHARF_FUZZ_MAX_EXAMPLES", "30"))
MIN_CASES = 1000
# Produce and pull cases of the shapes the fast lane takes (with the fixed seed: 77, 45 of them on
# the connection).
MIN_LANE_REQUESTS = 40
MIN_LANE_CONNECTION_REQUESTS = 20
CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
    )
)
REQUEST_TIMEOUT_S = 10


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # A pull held for its whole max_wait_ms is what the document promises, not a hang: the cap keeps
    # each such case short, and the request timeout still catches anything held longer.
    process = BrokerProcess(tmp_path_factory.mktemp("fuzz") / "store", max_wait_ms=200).start()
    yield process
    process.stop()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_generated_requests_get_documented_answers(fuzz_broker: BrokerProcess, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    command = [
        *(sys.executable, "-m", "schemathesis.cli"),
        *("--config-file", str(HERE / "schemathesis.toml")),
        "run",
        str(ROOT / "openapi.yaml"),
        *("--url", fuzz_broker.url),
        *("--seed", str(SEED)),
        *("--max-examples", str(MAX_EXAMPLES)),
        *("--checks", CHECKS),
        *("--request-timeout", str(REQUEST_TIMEOUT_S)),
        *("--workers", "1"),
        *("--generation-database", "none"),
        "--continue-on-failure",
        "--no-color",
        *("--report", "json", "--report-json-path", str(report)),
    ]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1700)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output + "\n" + fuzz_broker.log()[-5000:]
    summary = json.loads(report.read_text())
    assert summary["operations"]["tested"] == summary["operations"]["total"], output
    assert summary["test_cases"]["generated"] >= MIN_CASES, output
    assert summary["test_cases"]["errored"] == 0, output
    # The lean path was among what the document checked: the lane answered on the connection.
    metrics = httpx.get(f"{fuzz_broker.url}/metrics", timeout=10).text
    counters = {
        sample.name: sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name.startswith("wharf_http_fast_lane")
    }
    assert counters["wharf_http_fast_lane_requests_total"] >= MIN_LANE_REQUESTS, counters
    assert counters["wharf_http_fast_lane_connection_requests_total"] >= MIN_LANE_CONNECTION_REQUESTS, (
        counters
    )
