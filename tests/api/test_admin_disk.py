"""GET /v1/admin/disk on a real small file system (a tmpfs with a size limit): the store's disk use
and free space read now, and whether the disk guard accepts writes, following the disk both ways."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.api.server import BrokerProcess
from tests.api.test_disk_full import used_percent
from tests.small_disk import fill, free_bytes, mounted_tmpfs

MIB = 1 << 20


def test_disk_use_follows_the_disk_and_says_when_writes_are_refused(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "disk", 48) as disk:
        broker = BrokerProcess(
            disk,
            commitlog_file_size=MIB,
            consumequeue_file_entries=256,
            max_hash_slots=256,
            max_index_count=1024,
            disk_refuse_writes_ratio=60,
            disk_accept_writes_ratio=50,
        ).start()
        try:
            with httpx.Client(base_url=broker.url, timeout=30.0) as client:
                calm = client.get("/v1/admin/disk").json()
                assert calm["writable"] is True
                assert abs(calm["used_percent"] - used_percent(disk)) < 5
                assert abs(calm["free_bytes"] - free_bytes(disk)) <= 2 * MIB
                assert (calm["refuse_writes_percent"], calm["accept_writes_percent"]) == (60, 50)

                filler = fill(disk, leave_bytes=12 * MIB)  # 75 % used
                full = client.get("/v1/admin/disk").json()
                assert full["used_percent"] > 70 and full["writable"] is False
                assert full["free_bytes"] <= 12 * MIB

                filler.unlink()
                assert client.get("/v1/admin/disk").json()["writable"] is True
        finally:
            broker.stop()
