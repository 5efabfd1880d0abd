"""The broker's routing service: a created or deleted topic is in the registry when the call
returns, without re-registering every topic, and concurrent changes share one write."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.routing.registry import BrokerIdentity, RouteRegistry
from app.routing.schema import make_engine, upgrade
from app.routing.service import RoutingService
from app.routing.topic_config import TopicConfig
from tests.routing.test_registry import Writes

A = BrokerIdentity("east", "broker-a", 0, "http://a:8080")


def test_changes_are_published_alone_and_together(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'registry.db'}")
    upgrade(engine)
    registry = RouteRegistry(engine)
    local = [TopicConfig(f"t{index:03d}") for index in range(300)]
    full_reads: list[int] = []

    def every_topic() -> list[TopicConfig]:
        full_reads.append(len(local))
        return list(local)

    async def scenario() -> None:
        service = RoutingService(registry, A, every_topic, 3600, 120, 3600)
        await service.start()
        assert full_reads == [300]  # registered in full at start
        fresh = TopicConfig("fresh", 8, 8)
        local.append(fresh)
        await service.topics_changed([fresh])
        route = registry.topic_route("fresh")
        assert route is not None and route["queue_datas"][0]["read_queue_nums"] == 8
        del local[0]
        await service.topics_changed(deleted=["t000"])
        assert registry.topic_route("t000") is None
        assert full_reads == [300], "a topic change re-registered every topic"

        writes = Writes(engine)
        batch = [TopicConfig(f"c{index:02d}") for index in range(20)]
        local.extend(batch)
        await asyncio.gather(*(service.topics_changed([config]) for config in batch))
        statements, rows = writes.reset()
        # The first change is written at once; the 19 that came meanwhile in one more write.
        assert len(statements) <= 2 * 3, statements
        assert all(registry.topic_route(config.name) is not None for config in batch)

        await service.topics_changed()  # without arguments: a full heartbeat
        assert len(full_reads) == 2
        await service.stop()
        await asyncio.wait_for(service.topics_changed([TopicConfig("late")]), 5)  # stopped: no write
        assert registry.topic_route("late") is None and registry.clusters(120) == []

    try:
        asyncio.run(scenario())
    finally:
        engine.dispose()
