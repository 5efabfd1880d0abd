"""A retry that races the first produce of its unique id - still waiting for its group commit -
waits for that produce's answer instead of storing a second copy. In process, with a real SYNC
store whose disk does not finish a flush until the test lets it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from app.broker import Broker
from app.codec import IncomingMessage
from app.longpoll.hold import PullHoldService
from app.outbound import HttpOutbound
from app.routing.topic_config import TopicConfigManager
from app.settings import Settings
from app.store import MessageStore, StoreConfig
from app.store.config import FlushMode
from tests.store.conftest import GatedFlusher


def test_a_retry_racing_the_first_produce_waits_for_its_answer(tmp_path: Path) -> None:
    store = MessageStore(StoreConfig(store_dir=tmp_path / "store", flush_mode=FlushMode.SYNC))
    flusher = GatedFlusher(store.commitlog.files, store.checkpoint)
    store.flusher = flusher
    store.open()
    broker = Broker(
        Settings(),
        store,
        TopicConfigManager(tmp_path / "topics.json"),
        PullHoldService(store.max_offset),
        outbound=HttpOutbound(),
    )
    message = IncomingMessage(b"pay 10", queue_id=0, unique_id="payment-42")

    async def scenario() -> tuple[list[dict], list[dict]]:
        first = asyncio.ensure_future(broker.produce("orders", [message]))
        deadline = time.monotonic() + 10
        while not flusher.entered.is_set():  # the first produce is appended, its flush held
            assert time.monotonic() < deadline, "the first produce never reached the disk"
            await asyncio.sleep(0.001)
        retry = asyncio.ensure_future(broker.produce("orders", [message]))
        await asyncio.sleep(0)  # the retry runs up to its wait for the same group commit
        assert not first.done() and not retry.done()
        flusher.gate.set()
        return await first, await retry

    try:
        first, retry = asyncio.run(scenario())
    finally:
        flusher.gate.set()
        store.close()
    assert retry == first and first[0]["status"] == "SEND_OK"
    assert store.max_offset("orders", 0) == 1
