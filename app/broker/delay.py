"""Delayed delivery: a produce's ``delay_level``, ``delay_ms`` or ``deliver_at_ms`` checked and
applied, and the two services that deliver the messages when they are due.

* ``delay_level`` 1-18 (1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h): the message waits
  in ``SCHEDULE_TOPIC_XXXX``, delivered by :class:`~app.broker.schedule.ScheduleMessageService`;
* ``delay_ms`` or ``deliver_at_ms`` (epoch ms), at most ``max_delay_ms`` ahead: it waits in the timer
  topic, delivered by :class:`~app.broker.timer.TimerMessageService`. A time already past (or a
  ``delay_ms`` of 0) is no delay: the message is stored in its topic at once.

Where a message waits and how it comes back: :mod:`app.broker.delay_message`. The produce's answer
for a delayed message names its real queue, no queue offset (it has none until it is delivered)
and ``deliver_at_ms``, when it is due.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.broker.delay_message import (
    INTERNAL_TOPICS,
    MAX_LEVEL,
    TIMER_TOPIC,
    Redeliverer,
    level_due_ms,
    real_placement,
    scheduled_due_ms,
)
from app.broker.errors import InvalidParameterError
from app.broker.schedule import ScheduleMessageService
from app.broker.timer import TimerMessageService
from app.codec import IncomingMessage
from app.settings import Settings
from app.store import Message, MessageStore
from app.store.record import StoredMessage
from app.store.record_format import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_OUT_MS,
    SCHEDULE_TOPIC,
)
from app.store.results import AppendResult

LEVEL_NAMES = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


def is_delayed(incoming: IncomingMessage) -> bool:
    """Whether a message carries a delay field (three attribute reads: the produce path's only cost)."""
    return (
        incoming.delay_level is not None
        or incoming.delay_ms is not None
        or incoming.deliver_at_ms is not None
    )


class DelayedDelivery:
    """The produce side of delayed delivery and the life cycle of its two services."""

    def __init__(self, settings: Settings, store: MessageStore, queue_count: Callable[[str], int]) -> None:
        self.store = store
        self.max_delay_ms = settings.max_delay_ms
        redeliverer = Redeliverer(store, queue_count)
        config_dir = store.config.config_dir
        persist_ms = settings.delay_offset_persist_interval_ms
        self.schedule = ScheduleMessageService(
            store, redeliverer, config_dir / "delayOffset.json", persist_ms
        )
        self.timer = TimerMessageService(
            store,
            redeliverer,
            store.config.store_dir / "timerlog",
            config_dir / "timerCheckpoint.json",
            persist_ms,
            settings.timer_roll_window_ms,
        )
        self.started = False

    # -- life cycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Load the progress and start delivering: a message that fell due while the broker was
        down goes out in the first pass. Reads the disk: call it off the event loop."""
        self.schedule.load()
        self.timer.load()
        self.schedule.start()
        self.timer.start()
        self.started = True

    def stop(self) -> None:
        """Deliver what is due, save the progress, stop. Before the store closes."""
        if not self.started:
            return
        self.started = False
        self.schedule.stop()
        self.timer.stop()
        self.timer.close()

    def wakeup(self) -> None:
        """A produce stored delayed messages: let the services look at them."""
        self.schedule.wakeup()
        self.timer.wakeup()

    # -- produce ---------------------------------------------------------------------------------

    def schedule_message(self, message: Message, incoming: IncomingMessage, now_ms: int) -> bool:
        """Check the message's delay and move it to the topic where it waits, its real topic and
        queue in its properties. False when it is not delayed after all (a time already past)."""
        level, delay_ms, deliver_at_ms = incoming.delay_level, incoming.delay_ms, incoming.deliver_at_ms
        if (level is not None) + (delay_ms is not None) + (deliver_at_ms is not None) > 1:
            raise InvalidParameterError(
                "a message takes at most one of delay_level, delay_ms and deliver_at_ms"
            )
        properties = message.properties
        if level is not None:
            if not 1 <= level <= MAX_LEVEL:
                raise InvalidParameterError(
                    f"delay_level must be 1 to {MAX_LEVEL} ({LEVEL_NAMES}), not {level}"
                )
            properties[PROPERTY_DELAY_TIME_LEVEL] = str(level)
            self._move(message, SCHEDULE_TOPIC, level - 1)
            return True
        if delay_ms is not None:
            if not 0 <= delay_ms <= self.max_delay_ms:
                raise InvalidParameterError(
                    f"delay_ms must be 0 to {self.max_delay_ms} (WHARF_MAX_DELAY_MS), not {delay_ms}"
                )
            deliver_at_ms = now_ms + delay_ms
        assert deliver_at_ms is not None
        if deliver_at_ms < 0:
            raise InvalidParameterError(f"deliver_at_ms must be a time in epoch ms, not {deliver_at_ms}")
        if deliver_at_ms - now_ms > self.max_delay_ms:
            raise InvalidParameterError(
                f"deliver_at_ms is {deliver_at_ms - now_ms} ms ahead, more than the {self.max_delay_ms} ms "
                "a message may wait (WHARF_MAX_DELAY_MS)"
            )
        if deliver_at_ms <= now_ms:
            return False
        properties[PROPERTY_TIMER_OUT_MS] = str(deliver_at_ms)
        self._move(message, TIMER_TOPIC, 0)
        return True

    def schedule_at_level(self, message: Message, level: int) -> None:
        """Make ``message`` wait ``level``'s delay (clamped to 1..18) before it reaches its topic."""
        level = min(max(level, 1), MAX_LEVEL)
        message.properties[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        self._move(message, SCHEDULE_TOPIC, level - 1)

    @staticmethod
    def _move(message: Message, topic: str, queue_id: int) -> None:
        message.properties[PROPERTY_REAL_TOPIC] = message.topic
        message.properties[PROPERTY_REAL_QUEUE_ID] = str(message.queue_id)
        message.topic, message.queue_id = topic, queue_id

    @staticmethod
    def answer(message: Message, result: AppendResult) -> dict[str, Any]:
        """The fields of a produce answer that differ for a scheduled message."""
        properties = message.properties
        due = properties.get(PROPERTY_TIMER_OUT_MS)
        return {
            "queue_id": int(properties[PROPERTY_REAL_QUEUE_ID]),
            "queue_offset": None,
            "deliver_at_ms": int(due)
            if due is not None
            else level_due_ms(int(properties[PROPERTY_DELAY_TIME_LEVEL]), result.store_timestamp),
        }

    # -- the idempotency window: a scheduled message is remembered under its real topic ----------

    def scheduled_first(self, topic: str, unique_id: str, physical_offset: int) -> StoredMessage | None:
        """The scheduled message of ``topic`` with ``unique_id`` at ``physical_offset``, or None."""
        for internal in INTERNAL_TOPICS:
            found = self.store.query_message_by_unique_id_at(internal, unique_id, physical_offset)
            if found is not None and found.properties.get(PROPERTY_REAL_TOPIC) == topic:
                return found
        return None

    @staticmethod
    def answer_from_log(first: StoredMessage) -> dict[str, Any]:
        """As :meth:`answer`, for a repeat answered from a scheduled message."""
        return {
            "queue_id": real_placement(first)[1],
            "queue_offset": None,
            "deliver_at_ms": scheduled_due_ms(first),
        }

    def idempotency_topic(self, physical_offset: int, topic: str) -> str:
        """The topic a stored message is remembered under: its real topic if it is scheduled."""
        if topic not in INTERNAL_TOPICS:
            return topic
        stored = self.store.look_message(physical_offset)
        return stored.properties.get(PROPERTY_REAL_TOPIC, topic) if stored is not None else topic
