"""The topic log: a create appends one line whatever the number of topics, a restart reads every
topic back, a torn last line is cut off, dead lines are compacted away, pages cover every topic."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from wharf_client.perm import PERM_READ, PERM_READ_WRITE

from app.routing import topic_config
from app.routing.topic_config import TopicConfig, TopicConfigManager


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "topics.log"


def names(count: int, prefix: str = "t") -> list[str]:
    return [f"{prefix}{index:05d}" for index in range(count)]


def bytes_written_by_one_create(manager: TopicConfigManager, name: str) -> tuple[int, bytes]:
    """Bytes a create adds to the log, and checks the log was appended to, not rewritten."""
    before = manager.path.read_bytes()
    inode = os.stat(manager.path).st_ino
    manager.create_many([TopicConfig(name, 8, 8)])
    after = manager.path.read_bytes()
    assert os.stat(manager.path).st_ino == inode, "the log was replaced, not appended to"
    assert after.startswith(before), "the log's earlier bytes changed"
    return len(after) - len(before), after[len(before) :]


def test_a_create_appends_one_line_whatever_the_number_of_topics(path: Path) -> None:
    manager = TopicConfigManager(path)
    manager.create_many([TopicConfig(name, 8, 8) for name in names(10)])
    few, line = bytes_written_by_one_create(manager, "new-aaaa")
    manager.create_many([TopicConfig(name, 8, 8) for name in names(2_000, "u")])
    many, _ = bytes_written_by_one_create(manager, "new-bbbb")
    assert few == many == len(line)
    assert json.loads(line) == {
        "op": "put",
        "name": "new-aaaa",
        "read_queue_nums": 8,
        "write_queue_nums": 8,
        "perm": 6,
        "order": False,
    }


def test_every_change_is_read_back_after_a_restart(path: Path) -> None:
    manager = TopicConfigManager(path)
    results = manager.create_many(
        [TopicConfig("orders", 8, 8), TopicConfig("audit"), TopicConfig("orders", 2, 2)]
    )
    assert results == [
        (TopicConfig("orders", 8, 8), True),
        (TopicConfig("audit"), True),
        (TopicConfig("orders", 8, 8), False),
    ]
    manager.put(TopicConfig("audit", 4, 4, PERM_READ))
    manager.create_many([TopicConfig("gone")])
    assert manager.delete("gone") and not manager.delete("gone")
    manager.close()
    again = TopicConfigManager(path)
    assert again.all() == [TopicConfig("audit", 4, 4, PERM_READ), TopicConfig("orders", 8, 8)]
    assert len(again) == 2


def test_a_torn_last_line_is_cut_off_and_appending_goes_on(path: Path) -> None:
    manager = TopicConfigManager(path)
    manager.create_many([TopicConfig(name) for name in names(3)])
    manager.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"op": "put", "name": "half-wri')  # a write cut by a crash
    again = TopicConfigManager(path)
    assert [config.name for config in again.all()] == names(3)
    assert path.read_bytes() == whole
    again.create_many([TopicConfig("after")])
    again.close()
    assert [config.name for config in TopicConfigManager(path).all()] == ["after", *names(3)]


def test_dead_lines_are_compacted_once_they_outnumber_the_live_ones(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(topic_config, "COMPACT_MIN_GARBAGE", 10)
    manager = TopicConfigManager(path)
    manager.create_many([TopicConfig(name) for name in names(5)])
    for round_ in range(1, 4):
        for name in names(5):
            manager.put(TopicConfig(name, round_, round_))
    # 20 lines were written for 5 topics: the log was rewritten when its 11th dead line came.
    lines = path.read_bytes().splitlines()
    assert len(lines) < 20
    assert len(lines) - 5 <= 10
    manager.close()
    assert TopicConfigManager(path).all() == [TopicConfig(name, 3, 3) for name in names(5)]


def test_a_log_with_dead_lines_is_compacted_at_start(path: Path) -> None:
    manager = TopicConfigManager(path)
    manager.create_many([TopicConfig(name) for name in names(4)])
    for name in names(4)[:3]:
        manager.delete(name)
    manager.close()
    assert len(path.read_bytes().splitlines()) == 7
    again = TopicConfigManager(path)
    assert [config.name for config in again.all()] == names(4)[3:]
    assert len(path.read_bytes().splitlines()) == 1


def test_an_older_versions_topics_json_is_taken_over(tmp_path: Path, path: Path) -> None:
    legacy = tmp_path / "config" / "topics.json"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(
        json.dumps({"topics": [{"name": "orders", "read_queue_nums": 8, "write_queue_nums": 8}]})
    )
    manager = TopicConfigManager(path, legacy)
    assert manager.all() == [TopicConfig("orders", 8, 8)]
    assert not legacy.exists()
    manager.close()
    assert TopicConfigManager(path, legacy).all() == [TopicConfig("orders", 8, 8)]


def test_rocketmqs_topics_json_is_read_and_left_for_rocketmq(tmp_path: Path, path: Path) -> None:
    # RocketMQ 4.9's TopicConfigManager.encode(): a table of TopicConfig objects by name.
    rocketmq = tmp_path / "config" / "topics.json"
    rocketmq.parent.mkdir(parents=True)
    table = {
        "dataVersion": {"counter": 3, "timestamp": 1700000000000},
        "topicConfigTable": {
            "orders": {"topicName": "orders", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
                       "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False},
            "ledger": {"topicName": "ledger", "readQueueNums": 8, "writeQueueNums": 4, "perm": 4, "order": True},
            "odd": {"topicName": "odd", "readQueueNums": -1, "writeQueueNums": "8", "perm": 7},
        },
    }  # fmt: skip
    rocketmq.write_text(json.dumps(table))
    manager = TopicConfigManager(path, rocketmq)
    assert manager.all() == [
        TopicConfig("ledger", 8, 4, PERM_READ, True),
        TopicConfig("odd", 4, 4, PERM_READ_WRITE),
        TopicConfig("orders", 2, 2, PERM_READ_WRITE),
    ]
    assert json.loads(rocketmq.read_text()) == table  # RocketMQ still reads its own file
    manager.close()
    assert [c.name for c in TopicConfigManager(path, rocketmq).all()] == ["ledger", "odd", "orders"]


def test_pages_cover_every_topic_once_in_name_order(path: Path) -> None:
    manager = TopicConfigManager(path)
    manager.create_many([TopicConfig(name) for name in reversed(names(25))])
    seen: list[str] = []
    after = None
    while True:
        page, more = manager.page(after, 7)
        seen += [config.name for config in page]
        if not more:
            break
        after = page[-1].name
        manager.create_many([TopicConfig(f"a-late-{len(seen)}")])  # behind the cursor: not on a later page
    assert seen == names(25)
    assert manager.page(None, 100)[1] is False
    assert manager.page("zzz", 10) == ([], False)
