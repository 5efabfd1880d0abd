"""``python -m tests.api.stalled_disk``: the broker exactly as ``python -m app`` runs it, on a disk
whose CommitLog sync the test controls.

``os.fdatasync`` of a CommitLog segment blocks while the file named by WHARF_TEST_STALL_FILE exists,
as a disk that stops answering does; every such sync appends ``enter <path>`` and, once it returned,
``exit <path>`` to WHARF_TEST_SYNC_LOG. Other files sync as usual.
"""

from __future__ import annotations

import os
import runpy
import time

STALL_FILE = os.environ["WHARF_TEST_STALL_FILE"]
SYNC_LOG = os.environ["WHARF_TEST_SYNC_LOG"]
POLL_S = 0.005

_real_fdatasync = os.fdatasync


def _log(event: str, path: str) -> None:
    fd = os.open(SYNC_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{event} {path}\n".encode())
    finally:
        os.close(fd)


def fdatasync(fd: int) -> None:
    path = os.readlink(f"/proc/self/fd/{fd}")
    if f"{os.sep}commitlog{os.sep}" not in path:
        _real_fdatasync(fd)
        return
    _log("enter", path)
    while os.path.exists(STALL_FILE):
        time.sleep(POLL_S)
    _real_fdatasync(fd)
    _log("exit", path)


os.fdatasync = fdatasync
runpy.run_module("app", run_name="__main__", alter_sys=True)
