"""Commits are checked against the queue's offsets; the HTTP cases are in test_groups.py. Here the
case HTTP cannot reach quickly: a commit below the min offset that retention moved up."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.api.errors import ErrorCode, from_broker
from app.broker import Broker
from app.broker.errors import OffsetOutOfRangeError
from app.longpoll.hold import PullHoldService
from app.outbound import HttpOutbound
from app.routing.topic_config import TopicConfigManager
from app.settings import Settings
from app.store import Message, MessageStore, StoreConfig


def test_a_commit_below_the_queues_min_offset_is_refused(tmp_path: Path) -> None:
    with MessageStore(StoreConfig(store_dir=tmp_path / "store", commitlog_file_size=1 << 16)) as store:
        store.put([Message("orders", b"m", 0) for _ in range(5)])
        queue = store.queue("orders", 0)
        assert queue is not None
        queue.min_logic_offset = 2  # what retention leaves after deleting the first messages' segment
        broker = Broker(
            Settings(),
            store,
            TopicConfigManager(tmp_path / "topics.json"),
            PullHoldService(store.max_offset),
            outbound=HttpOutbound(),
        )

        with pytest.raises(OffsetOutOfRangeError) as refused:
            broker.commit_offset("billing", "orders", 0, 1)
        answer = from_broker(refused.value)
        assert answer.code is ErrorCode.OFFSET_OUT_OF_RANGE
        assert answer.extra == {"topic": "orders", "queue_id": 0, "min_offset": 2, "max_offset": 5}
        assert store.consumer_offsets.committed("billing", "orders", 0) == -1
        broker.commit_offset("billing", "orders", 0, 2)
        broker.commit_offset("billing", "orders", 0, 5)
        assert store.consumer_offsets.committed("billing", "orders", 0) == 5
