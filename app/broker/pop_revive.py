"""Dead letters of pop consumption, and the reviver that finds them (RocketMQ's PopReviveService):
a message handed out with the group's max reconsume times that is not acked in time, or that is
nacked, goes to the group's dead-letter topic (:mod:`app.broker.dead_letter`) and is then done.

A message on its way is held in flight under a new nonce for :data:`DEAD_LETTER_RETRY_MS`: should
the move fail (the route registry is down, the disk is full) it is tried again once that passes.
Once the copy is stored the message is acked, unless it was handed out again meanwhile. A crash
between the two leaves a second copy in the dead-letter topic, never a lost message. Pops find
such messages as they go; the reviver looks every :data:`REVIVE_INTERVAL_S` too, so that they go
when nobody pops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from app.broker.dead_letter import max_reconsume_times, send_to_dead_letter
from app.broker.pop_state import InFlight, PopRecord, QueueKey
from app.broker.pop_table import PopTable

if TYPE_CHECKING:
    from app.broker.core import Broker

log = logging.getLogger(__name__)

DEAD_LETTER_RETRY_MS = 10_000
REVIVE_INTERVAL_S = 1.0


class Doomed(NamedTuple):
    """A message on its way to the dead-letter topic, held in flight under ``nonce``."""

    queue_id: int
    offset: int
    nonce: int
    reconsume_times: int


class DeadLetters:
    def __init__(self, broker: Broker, table: PopTable, now_ms: Callable[[], int]) -> None:
        self.broker = broker
        self.table = table
        self.now_ms = now_ms
        self._tasks: set[asyncio.Task[None]] = set()
        self._reviver: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._reviver = asyncio.create_task(self._revive(), name="wharf-pop-reviver")

    async def close(self) -> None:
        """Stop the reviver and wait for the moves under way."""
        if self._reviver is not None:
            self._reviver.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def due(self, group: str, entry: InFlight) -> bool:
        """Whether the entry was delivered as often as the group allows."""
        return entry.reconsume_times >= max_reconsume_times(self.broker, group)

    def hold(self, changes: list[PopRecord], key: QueueKey, offset: int, entry: InFlight) -> Doomed:
        """Keep the message in flight while it moves; what to pass to :meth:`send_later`."""
        nonce = self.table.hand_out(
            changes, key, offset, self.now_ms() + DEAD_LETTER_RETRY_MS, entry.reconsume_times
        )
        return Doomed(key[2], offset, nonce, entry.reconsume_times)

    def send_later(self, group: str, topic: str, doomed: list[Doomed]) -> None:
        """Move the held messages in a task of their own; call it once their hold is recorded."""
        if doomed:
            task = asyncio.create_task(self._send(group, topic, doomed))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, group: str, topic: str, doomed: list[Doomed]) -> None:
        for queue_id, offset, nonce, reconsume_times in doomed:
            try:
                messages = self.broker.store.read_messages(topic, queue_id, offset, 1)
                if messages and messages[0].queue_offset == offset:
                    await send_to_dead_letter(self.broker, group, messages[0], reconsume_times)
            except Exception as error:  # logged, and tried again
                log.warning(
                    "message %s/%d@%d of group %r not moved to its dead-letter topic, trying again in %d ms: %s",
                    topic,
                    queue_id,
                    offset,
                    group,
                    DEAD_LETTER_RETRY_MS,
                    error,
                )
                continue
            key = (group, topic, queue_id)
            queue = self.table.queues.get(key)
            if queue is not None and queue.current(offset, nonce) is not None:
                changes: list[PopRecord] = []
                self.table.ack(changes, key, offset)
                written = self.table.record(changes)
                if written is not None:
                    await asyncio.wrap_future(written)

    async def _revive(self) -> None:
        while True:
            await asyncio.sleep(REVIVE_INTERVAL_S)
            try:
                self.revive_once()
            except Exception:
                log.exception("pop reviver pass failed")

    def revive_once(self) -> None:
        """Send every message due for the dead-letter topic there, popped or not."""
        now = self.now_ms()
        changes: list[PopRecord] = []
        moves: dict[tuple[str, str], list[Doomed]] = {}
        for key, queue in list(self.table.queues.items()):
            next_deadline = queue.next_deadline_ms()
            if next_deadline is None or next_deadline > now:
                continue
            group, topic, _ = key
            for offset, entry in list(queue.inflight.items()):
                if entry.deadline_ms <= now and self.due(group, entry):
                    moves.setdefault((group, topic), []).append(self.hold(changes, key, offset, entry))
        # A failed write only delays the moves: the holds are in memory, and tried again.
        self.table.record(changes)
        for (group, topic), doomed in moves.items():
            self.send_later(group, topic, doomed)
