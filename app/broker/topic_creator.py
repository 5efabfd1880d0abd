"""Group commit for topic creation: concurrent creates share one append to the topic log (one
fsync) and one write to the route registry, as producers share one flush in the store.

The first create is written at once; creates that arrive while a write is under way wait for it and
are written together by the next one. Each caller gets, for each topic it asked for, the
configuration now in force and whether its request created it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from app.broker.delay_message import INTERNAL_TOPICS
from app.broker.transaction_message import TRANSACTION_TOPICS
from app.routing.topic_config import TopicConfig, TopicConfigManager
from app.store.errors import InvalidTopicError

Outcome = tuple[TopicConfig, bool]


class TopicCreator:
    def __init__(
        self, topics: TopicConfigManager, publish: Callable[[list[TopicConfig]], Awaitable[None]]
    ) -> None:
        self.topics = topics
        self.publish = publish
        self._queue: list[tuple[list[TopicConfig], asyncio.Future[list[Outcome]]]] = []
        self._task: asyncio.Task[None] | None = None

    async def create(self, configs: list[TopicConfig]) -> list[Outcome]:
        """Create those of ``configs`` not there yet; returns once they are in the topic log and
        published to the route registry. The internal topics of delayed and transactional messages
        are refused."""
        for config in configs:
            if config.name in INTERNAL_TOPICS:
                raise InvalidTopicError(f"topic name {config.name!r} is reserved for delayed messages")
            if config.name in TRANSACTION_TOPICS:
                raise InvalidTopicError(f"topic name {config.name!r} is reserved for transactional messages")
        future: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
        self._queue.append((configs, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="wharf-topic-creator")
        return await future

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                outcomes = await asyncio.to_thread(
                    self.topics.create_many, [config for configs, _ in batch for config in configs]
                )
                fresh = [config for config, created in outcomes if created]
                if fresh:
                    await self.publish(fresh)
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            start = 0
            for configs, future in batch:
                if not future.done():
                    future.set_result(outcomes[start : start + len(configs)])
                start += len(configs)
