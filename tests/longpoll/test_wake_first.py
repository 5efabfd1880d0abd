"""A produce that wakes held pulls lets them answer before its own answer (in process, with the
store's arrival listener wired to the hold service as the broker wires it): an HTTP long poll, and
a WebSocket subscriber's queue reader, which holds with a wake event of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.broker import Broker, read_or_hold
from app.codec import IncomingMessage
from app.longpoll.hold import PullHoldService, WakeEvent
from app.outbound import HttpOutbound
from app.routing.topic_config import TopicConfigManager
from app.settings import Settings
from app.store import GetMessageStatus, MessageStore, StoreConfig
from app.store.queue_table import QueueTable


@pytest.mark.parametrize("subscriber", [False, True], ids=["long poll", "subscriber"])
def test_a_woken_pull_has_its_messages_before_the_produce_returns(tmp_path: Path, subscriber: bool) -> None:
    config = StoreConfig(store_dir=tmp_path / "store")
    queues = QueueTable(config)
    holds = PullHoldService(queues.max_offset)
    store = MessageStore(config, [holds.notify_arrival], queues=queues)
    store.open()
    broker = Broker(
        Settings(), store, TopicConfigManager(tmp_path / "topics.json"), holds, outbound=HttpOutbound()
    )

    async def scenario() -> tuple[bool, int]:
        await holds.start()
        try:
            await broker.produce("orders", [IncomingMessage(b"first", queue_id=0)])
            wake = WakeEvent() if subscriber else None
            pull = asyncio.ensure_future(
                read_or_hold(store, holds, "orders", 0, 1, 32, None, 30.0, wake=wake)
            )
            while holds.held_count == 0:
                await asyncio.sleep(0)  # the pull reads, finds nothing past offset 1, and holds
            await broker.produce("orders", [IncomingMessage(b"second", queue_id=0)])
            answered_first = pull.done()
            read = await pull
            assert read.result.status is GetMessageStatus.FOUND
            return answered_first, len(read.result.records)
        finally:
            await holds.stop()

    try:
        answered_first, found = asyncio.run(scenario())
    finally:
        store.close()
    assert found == 1
    assert answered_first, "the producer's answer came before the pull it woke had its message"
    assert holds.woken == 1
