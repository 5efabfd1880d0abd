"""Start a real Wharf broker process (uvicorn, real sockets) on a free port for end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class BrokerProcess:
    """``python -m app`` in a child process with its own store directory and WHARF_* settings.

    ``module`` runs another entry point instead: one that wraps the disk or the broker before
    starting the app (:mod:`tests.api.stalled_disk`, :mod:`tests.store.sync_journal`)."""

    def __init__(
        self, store_dir: Path, *, module: str = "app", args: Sequence[str] = (), **settings: object
    ) -> None:
        self.store_dir = store_dir
        self.module = module
        self.args = list(args)  # the command line after ``python -m module``
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "WHARF_HOST": "127.0.0.1",
            "WHARF_PORT": str(self.port),
            "WHARF_STORE_DIR": str(store_dir),
            "WHARF_COMMITLOG_FILE_SIZE": str(1024 * 1024),
            "WHARF_CONSUMEQUEUE_FILE_ENTRIES": "1000",
            # Index files are allocated whole: the default one would take 420 MB of disk.
            "WHARF_MAX_HASH_SLOTS": "16384",
            "WHARF_MAX_INDEX_COUNT": "65536",
            "WHARF_LOG_LEVEL": "warning",
        }
        self.env.update({f"WHARF_{name.upper()}": str(value) for name, value in settings.items()})
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = store_dir.parent / f"broker-{self.port}.log"

    def start(self, timeout_s: float = 30.0) -> BrokerProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.module, *self.args],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"broker did not become ready in {timeout_s} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout_s: float = 20.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        code = self.process.returncode
        self.process = None
        return code

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
