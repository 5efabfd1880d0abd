"""One process per store directory: a second store, or a second broker, is refused and touches nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.store import MessageStore, StoreLockedError
from tests.api.server import ROOT, BrokerProcess
from tests.store.conftest import StoreFactory, message, tiny_config

OPEN_AND_WAIT = """
import sys, time
from pathlib import Path
from app.store import MessageStore
from tests.store.conftest import tiny_config
store = MessageStore(tiny_config(Path(sys.argv[1]))).open()
print("open", flush=True)
time.sleep(60)
"""


def start_holder(store_dir: Path) -> subprocess.Popen[str]:
    """Another process with the store open."""
    holder = subprocess.Popen(
        [sys.executable, "-c", OPEN_AND_WAIT, str(store_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
    return holder


def test_a_second_store_in_another_process_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    holder = start_holder(store_dir)
    try:
        before = sorted((p.relative_to(store_dir), p.stat().st_mtime_ns) for p in store_dir.rglob("*"))
        with pytest.raises(
            StoreLockedError, match=f"store directory {store_dir} is in use by pid {holder.pid}"
        ):
            MessageStore(tiny_config(store_dir)).open()
        after = sorted((p.relative_to(store_dir), p.stat().st_mtime_ns) for p in store_dir.rglob("*"))
        assert after == before, "the refused store changed the holder's files"
        assert (store_dir / "abort").exists()
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_dies_with_its_process(tmp_path: Path, make_store: StoreFactory) -> None:
    store_dir = tmp_path / "store"
    holder = start_holder(store_dir)
    holder.kill()  # SIGKILL: no cleanup ran
    holder.wait()
    store = make_store(store_dir)
    assert store.recovery is not None and not store.recovery.clean
    store.append([message(body=b"after the crash")])


def test_a_closed_store_can_be_opened_again_in_the_same_process(
    tmp_path: Path, make_store: StoreFactory
) -> None:
    store = make_store(tmp_path / "store")
    with pytest.raises(StoreLockedError):
        MessageStore(tiny_config(tmp_path / "store")).open()
    store.close()
    make_store(tmp_path / "store").close()


def test_a_second_broker_on_the_same_directory_exits_at_once_and_leaves_the_first_alone(
    tmp_path: Path,
) -> None:
    store_dir = tmp_path / "store"
    first = BrokerProcess(store_dir).start()
    try:
        with httpx.Client(base_url=first.url, timeout=10) as client:
            assert client.post("/v1/topics/locked/messages", json={"body": "one"}).status_code == 200
            second = BrokerProcess(store_dir)
            result = subprocess.run(
                [sys.executable, "-m", "app"],
                cwd=ROOT,
                env=second.env,
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert result.returncode != 0  # and it did not wait: run() would have timed out
            assert f"store directory {store_dir} is in use by pid {first.process.pid}" in result.stderr  # type: ignore[union-attr]
            assert (store_dir / "abort").exists()
            assert (store_dir / "lock").read_text().strip() == str(first.process.pid)  # type: ignore[union-attr]
            # The first broker is still registered and still serves.
            brokers = client.get("/v1/clusters").json()
            assert first.url in str(brokers)
            assert client.post("/v1/topics/locked/messages", json={"body": "two"}).status_code == 200
            pulled = client.get("/v1/topics/locked/queues/0/messages", params={"offset": 0}).json()
            assert pulled["status"] == "FOUND"
    finally:
        first.stop()
    assert not (store_dir / "abort").exists()
    assert os.path.exists(store_dir / "lock")
