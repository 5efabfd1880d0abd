"""ScheduleMessageService: delivers the messages of the 18 delay levels (RocketMQ's service of the
same name).

Level ``n`` waits in queue ``n - 1`` of ``SCHEDULE_TOPIC_XXXX``. A level's delay is fixed, so its
queue is in due order: the service reads each queue from its offset, re-appends every message whose
time (store time + the level's delay) has come, and stops at the first that is not due; it then
sleeps until the earliest head is due, or until a produce wakes it.

The offsets are the progress: ``config/delayOffset.json``, ``{"offsetTable": {"1": 12, ...}}``
(level -> next offset), written every ``persist_interval_ms`` when they moved, and at stop - always
after the re-appended messages are as durable as the flush mode promises. A message is therefore
never lost; after a crash the messages delivered since the last write are delivered again
(at least once).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from app.broker.delay_message import (
    MAX_LEVEL,
    Redeliverer,
    delivered_message,
    level_due_ms,
)
from app.store import MessageStore
from app.store.atomic_file import write_atomically
from app.store.errors import StoreConfigError
from app.store.record import decode_record, store_timestamp
from app.store.record_format import SCHEDULE_TOPIC
from app.store.results import GetMessageStatus
from app.store.service import ServiceThread

log = logging.getLogger(__name__)

BATCH_MESSAGES = 256
BATCHES_PER_LEVEL = 16  # per pass: then the other levels, the progress, and a look at the clock
IDLE_WAIT_S = 1.0  # a produce wakes the service; this is the fallback
RETRY_WAIT_S = 1.0  # after a failed pass (a full disk)
NEVER = 1 << 62


class ScheduleMessageService(ServiceThread):
    name = "schedule"

    def __init__(
        self,
        store: MessageStore,
        redeliverer: Redeliverer,
        offsets_path: Path,
        persist_interval_ms: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(0.0)
        self.store = store
        self.redeliverer = redeliverer
        self.offsets_path = offsets_path
        self.persist_interval_ms = persist_interval_ms
        self.clock = clock
        self.offsets = [0] * MAX_LEVEL  # level - 1 -> the next offset to look at
        self._persisted = list(self.offsets)
        self._persisted_at_ms = 0

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def load(self) -> None:
        """Read the offsets, moved into each queue's [min offset, max offset] (RocketMQ's
        correctDelayOffset): retention may have deleted what an offset pointed at."""
        try:
            table = json.loads(self.offsets_path.read_bytes())["offsetTable"]
            for level, offset in table.items():
                if 1 <= int(level) <= MAX_LEVEL:
                    self.offsets[int(level) - 1] = int(offset)
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreConfigError(f"{self.offsets_path} is not a delay offset table: {exc}") from None
        for queue_id, offset in enumerate(self.offsets):
            low = self.store.min_offset(SCHEDULE_TOPIC, queue_id)
            high = self.store.max_offset(SCHEDULE_TOPIC, queue_id)
            self.offsets[queue_id] = min(max(offset, low), high)
        self._persisted = list(self.offsets)
        self._persisted_at_ms = self.now_ms()

    def run_once(self) -> None:
        self.interval_s = RETRY_WAIT_S  # kept if the pass fails
        now = self.now_ms()
        next_due = now + int(IDLE_WAIT_S * 1000)
        for level in range(1, MAX_LEVEL + 1):
            next_due = min(next_due, self._deliver_level(level, now))
        self._persist(now)
        self.interval_s = max(0.0, (next_due - self.now_ms()) / 1000)

    def on_stop(self) -> None:
        self.run_once()
        self._persist(self.now_ms(), force=True)

    def _deliver_level(self, level: int, now_ms: int) -> int:
        """Deliver what is due in the level's queue; returns when its next message is due."""
        queue_id = level - 1
        for _ in range(BATCHES_PER_LEVEL):
            offset = self.offsets[queue_id]
            result = self.store.get_message(SCHEDULE_TOPIC, queue_id, offset, BATCH_MESSAGES)
            if result.status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
                self.offsets[queue_id] = result.next_offset
                continue
            if not result.records:
                if result.next_offset <= offset:
                    return NEVER
                self.offsets[queue_id] = result.next_offset  # entries that name no message
                continue
            due_messages = []
            next_offset = result.next_offset
            waiting = NEVER
            for record, queue_offset in zip(result.records, result.queue_offsets, strict=True):
                due_ms = level_due_ms(level, store_timestamp(record))
                if due_ms > now_ms:
                    next_offset, waiting = queue_offset, due_ms
                    break
                due_messages.append(delivered_message(decode_record(record), due_ms))
            self.redeliverer.deliver(due_messages)
            self.offsets[queue_id] = next_offset
            if waiting != NEVER:
                return waiting
        return now_ms  # more is due: the next pass comes at once

    def follow(self, offsets: list[int]) -> bool:
        """A slave takes its master's progress where it is ahead of its own and writes it, for the
        start after a promotion; whether anything moved. Only while the service is not running."""
        merged = [max(own, theirs) for own, theirs in zip(self.offsets, offsets, strict=False)]
        merged += self.offsets[len(merged) :]
        if merged == self.offsets:
            return False
        self.offsets = merged
        self._persist(self.now_ms(), force=True)
        return True

    def _persist(self, now_ms: int, force: bool = False) -> None:
        if self.offsets == self._persisted:
            return
        if not force and now_ms - self._persisted_at_ms < self.persist_interval_ms:
            return
        table = {str(queue_id + 1): offset for queue_id, offset in enumerate(self.offsets)}
        write_atomically(self.offsets_path, json.dumps({"offsetTable": table}, indent=2).encode())
        self._persisted = list(self.offsets)
        self._persisted_at_ms = now_ms
