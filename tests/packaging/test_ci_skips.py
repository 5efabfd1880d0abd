"""With CI set, a skip fails the run (tests/conftest.py): a test that cannot run in CI is a test
that does not guard anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.api.server import ROOT

SUITE = """
import pytest

def test_runs():
    pass

def test_skips():
    pytest.skip("no such thing here")

@pytest.mark.xfail(reason="known")
def test_expected_to_fail():
    assert False
"""


def run_suite(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_runtest_makereport  # noqa: F401\n"
    )
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfsx", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_in_ci_a_skip_fails_and_names_its_reason(tmp_path: Path) -> None:
    result = run_suite(tmp_path, "true")
    assert result.returncode == 1, result.stdout
    assert "1 failed, 1 passed, 1 xfailed" in result.stdout, result.stdout
    assert "skipped in CI, where every test must run: no such thing here" in result.stdout, result.stdout


def test_outside_ci_a_skip_is_a_skip(tmp_path: Path) -> None:
    result = run_suite(tmp_path, "false")
    assert result.returncode == 0, result.stdout
    assert "1 passed, 1 skipped, 1 xfailed" in result.stdout, result.stdout
