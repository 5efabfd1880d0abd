"""TimerMessageService: delivers messages at any time up to the maximum delay (RocketMQ 5's timer).

Such a message waits in the timer topic, its time in TIMER_OUT_MS. One thread does the work in
passes:

1. *enqueue*: read the timer topic from the enqueue offset; a message already due is delivered at
   once, any other becomes a unit of the timer log (:mod:`app.store.timer_log`);
2. *dequeue*: take the units due now from the wheel, earliest first, and append each message to its
   real topic - or, for a unit placed early to *roll*, store the message again in the timer topic
   (a message waiting longer than ``roll_window_ms`` is re-stored before the CommitLog's retention
   can take it, then enqueued again);
3. *checkpoint*, every ``persist_interval_ms`` when something moved and at stop: force the timer
   log, then write the enqueue offset, the log's length and the time through which every due unit
   was delivered - after the appends of 1 and 2 are as durable as the flush mode promises.

It then sleeps until the next unit or second is due, or until a produce wakes it. A restart reads
the timer topic again from the checkpoint's offset and the log cuts back to its length, so nothing
is lost; the messages delivered since the last checkpoint are delivered again (at least once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from app.broker.delay_message import (
    TIMER_TOPIC,
    Redeliverer,
    delivered_message,
    record_physical_offset,
    record_properties,
    rolled_message,
)
from app.store import Message, MessageStore
from app.store.record import decode_record, store_timestamp
from app.store.record_format import PROPERTY_TIMER_OUT_MS
from app.store.results import GetMessageStatus
from app.store.service import ServiceThread
from app.store.timer_log import TimerCheckpoint, TimerLog, TimerUnit, TimerWheel

log = logging.getLogger(__name__)

ENQUEUE_BATCH = 1024
DEQUEUE_BATCH = 1024
BATCHES_PER_PASS = 16  # then a checkpoint and a look at the clock
IDLE_WAIT_S = 1.0
RETRY_WAIT_S = 1.0


class TimerMessageService(ServiceThread):
    name = "timer"

    def __init__(
        self,
        store: MessageStore,
        redeliverer: Redeliverer,
        log_dir: Path,
        checkpoint_path: Path,
        persist_interval_ms: int,
        roll_window_ms: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(0.0)
        self.store = store
        self.redeliverer = redeliverer
        self.log = TimerLog(log_dir)
        self.checkpoint_path = checkpoint_path
        self.persist_interval_ms = persist_interval_ms
        self.roll_window_ms = roll_window_ms
        self.clock = clock
        self.wheel = TimerWheel(self.log, 0)
        self.enqueue_offset = 0
        self._persisted = TimerCheckpoint()
        self._persisted_at_ms = 0
        self._taken = 0  # units handed out by the wheel since the last checkpoint

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def load(self) -> int:
        """Read the checkpoint, cut the log back to it and rebuild the wheel; returns how many
        units are pending."""
        checkpoint = TimerCheckpoint.load(self.checkpoint_path)
        if not self.checkpoint_path.exists():
            checkpoint.through_ms = self.now_ms()
        pending = self.log.open(checkpoint.log_end, checkpoint.through_ms)
        self.wheel = TimerWheel(self.log, checkpoint.through_ms)
        low = self.store.min_offset(TIMER_TOPIC, 0)
        high = self.store.max_offset(TIMER_TOPIC, 0)
        self.enqueue_offset = min(max(checkpoint.enqueue_offset, low), high)
        self._persisted = checkpoint
        self._persisted_at_ms = self.now_ms()
        return pending

    def close(self) -> None:
        self.log.close()

    def run_once(self) -> None:
        self.interval_s = RETRY_WAIT_S  # kept if the pass fails
        now = self.now_ms()
        behind = False
        for _ in range(BATCHES_PER_PASS):
            if not self._enqueue(now):
                break
        else:
            behind = True
        for _ in range(BATCHES_PER_PASS):
            if not self._dequeue(now):
                break
        else:
            behind = True
        self._persist(now)
        next_due = now if behind else min(self.wheel.next_due_ms(), now + int(IDLE_WAIT_S * 1000))
        self.interval_s = max(0.0, (next_due - self.now_ms()) / 1000)

    def on_stop(self) -> None:
        self.run_once()
        self._persist(self.now_ms(), force=True)

    def _enqueue(self, now_ms: int) -> bool:
        """Read one batch of the timer topic; False once there is nothing more to read."""
        offset = self.enqueue_offset
        result = self.store.get_message(TIMER_TOPIC, 0, offset, ENQUEUE_BATCH)
        if result.status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
            self.enqueue_offset = result.next_offset
            return True
        if not result.records:
            self.enqueue_offset = max(offset, result.next_offset)
            return self.enqueue_offset != offset
        due: list[Message] = []
        later = []
        for record in result.records:
            deliver_ms = int(record_properties(record)[PROPERTY_TIMER_OUT_MS])
            if deliver_ms <= now_ms:
                due.append(delivered_message(decode_record(record), deliver_ms))
            else:
                roll_ms = store_timestamp(record) + self.roll_window_ms
                later.append(TimerUnit(min(deliver_ms, roll_ms), deliver_ms, record_physical_offset(record)))
        self.redeliverer.deliver(due)
        self.wheel.add(later)
        self.enqueue_offset = result.next_offset
        return True

    def _dequeue(self, now_ms: int) -> bool:
        """Deliver (or roll) one batch of due units; False once none is due."""
        units = self.wheel.take_due(now_ms, DEQUEUE_BATCH)
        if not units:
            return False
        messages = []
        for unit in units:
            stored = self.store.look_message(unit.commitlog_offset)
            if stored is None or stored.topic != TIMER_TOPIC:
                log.error("timer message at CommitLog offset %d is gone (retention?)", unit.commitlog_offset)
                continue
            if unit.deliver_ms <= now_ms:
                messages.append(delivered_message(stored, unit.deliver_ms))
            else:
                messages.append(rolled_message(stored))
        try:
            self.redeliverer.deliver(messages)
        except BaseException:
            self.wheel.put_back(units)
            raise
        self._taken += len(units)
        return True

    def _persist(self, now_ms: int, force: bool = False) -> None:
        persisted = self._persisted
        if (
            self.enqueue_offset == persisted.enqueue_offset
            and self.log.end == persisted.log_end
            and not self._taken
        ):
            return  # the time alone moved on: nothing to save
        if not force and now_ms - self._persisted_at_ms < self.persist_interval_ms:
            return
        through = self.wheel.through_ms(now_ms)
        checkpoint = TimerCheckpoint(self.enqueue_offset, self.log.flush(), through)
        checkpoint.save(self.checkpoint_path)
        self._persisted = checkpoint
        self._persisted_at_ms = now_ms
        self._taken = 0
        self.log.trim(through // 1000 * 1000)
