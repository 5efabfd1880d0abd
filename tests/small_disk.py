"""A real, small file system for disk-full tests: a tmpfs with a size limit, mounted for one test.

Mounting needs root (CI runs as root); elsewhere the tests that need it skip and say why.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def mounted_tmpfs(mount_point: Path, size_mib: int) -> Iterator[Path]:
    """Mount a tmpfs of ``size_mib`` MiB on ``mount_point`` for the duration; skip if that fails."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


def free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def fill(path: Path, leave_bytes: int = 0) -> Path:
    """Write a filler file until at most ``leave_bytes`` are free on ``path``'s file system."""
    filler = path / "filler"
    chunk = memoryview(bytes(1 << 20))
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while (room := free_bytes(path) - leave_bytes) > 0:
            try:
                os.write(fd, chunk[: min(len(chunk), room)])
            except OSError:  # full
                break
    finally:
        os.close(fd)
    return filler


def run_apart(args: list[str], timeout_s: float) -> str:
    """``python -m *args`` from the project root, its stdout: a test that writes to a nearly full
    disk runs apart, because a write through a mapping past the allocated blocks is a SIGBUS, which
    would end the test run rather than fail the test."""
    done = subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode != -signal.SIGBUS, "a write touched a page with no disk block behind it"
    assert done.returncode == 0, done.stderr[-6000:]
    return done.stdout
