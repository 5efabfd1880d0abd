"""``wharf cluster status``, ``wharf admin clean`` and ``wharf admin disk``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.api.server import BrokerProcess
from tests.cli.conftest import Wharf


def test_cluster_status_names_this_broker(wharf: Wharf, broker: BrokerProcess) -> None:
    clusters = json.loads(wharf("cluster", "status", "--json").stdout)
    brokers = [
        (cluster["name"], b["broker_name"], b["address"], b["alive"])
        for cluster in clusters
        for b in cluster["brokers"]
    ]
    assert brokers == [("DefaultCluster", "broker-a", broker.url, True)]
    table = wharf("cluster", "status").stdout
    assert "broker-a" in table and "0 (master)" in table


def test_admin_clean_reports_the_pass(wharf: Wharf) -> None:
    hours = {time.localtime().tm_hour}
    report = json.loads(wharf("admin", "clean", "--json").stdout)
    hours.add(time.localtime().tm_hour)
    # "manual" always; "disk" too when this machine's disk is past the cleaning ratio; "time" too
    # when the pass runs in the hour of the day retention deletes in (WHARF_DELETE_WHEN, "04").
    allowed = {"manual", "disk"} | ({"time"} if 4 in hours else set())
    assert "manual" in report["reasons"] and set(report["reasons"]) <= allowed
    assert report["commitlog_segments"] == 0  # the only segment is the one being written
    assert "commitlog segments deleted" in wharf("admin", "clean").stdout


def used_percent(path: Path) -> float:
    stat = os.statvfs(path)
    return (stat.f_blocks - stat.f_bavail) * 100 / stat.f_blocks


def test_admin_disk_reads_the_store_partition(wharf: Wharf, broker: BrokerProcess) -> None:
    before = used_percent(broker.store_dir)
    usage = json.loads(wharf("admin", "disk", "--json").stdout)
    after = used_percent(broker.store_dir)
    # Other processes write to this disk too: the broker's reading lies between ours.
    assert min(before, after) - 0.5 <= usage["used_percent"] <= max(before, after) + 0.5
    assert (usage["refuse_writes_percent"], usage["accept_writes_percent"]) == (90, 85)
    assert usage["writable"] is (usage["used_percent"] <= 90)
    assert "accepting writes" in wharf("admin", "disk").stdout
