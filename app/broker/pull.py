"""Read or hold: the one loop behind HTTP long polling and the WebSocket subscriber.

Read from an offset; with nothing new and time left, register with the pull hold service (which
checks the queue once more after registering, so nothing stored in between is missed), wait, and
read again. Messages that do not match the filter move the offset on while the loop goes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import NamedTuple

from app.longpoll.hold import HoldOutcome, PullHoldService, Receive, WakeEvent
from app.store import GetMessageResult, GetMessageStatus, MessageFilter, MessageStore

# A pull is held again only while at least this much of its wait is left.
MIN_HOLD_S = 0.001

# A filtered pull over a long run of messages that do not match reads the ConsumeQueue in
# slices of WHARF_MAX_SCAN_BYTES_PER_PULL, yielding to the event loop between two, and answers
# NO_MATCHED_MESSAGE with the offset past what it scanned after this many slices.
MAX_SCAN_SLICES_PER_PULL = 32

_WAIT_STATUSES = (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE)


class Read(NamedTuple):
    """What a read-or-hold ended with: the last read, and whether the broker is shutting down."""

    result: GetMessageResult
    shutdown: bool = False


async def read_or_hold(
    store: MessageStore,
    holds: PullHoldService,
    topic: str,
    queue_id: int,
    offset: int,
    max_messages: int | Callable[[], int],
    message_filter: MessageFilter | None,
    wait_s: float,
    receive: Receive | None = None,
    wake: WakeEvent | None = None,
    at_end: bool = False,
) -> Read:
    """Read up to ``max_messages`` (a number, or asked again before every read) from ``offset``;
    with nothing new, hold up to ``wait_s`` until a matching message arrives, then read again.

    Ends with the first read that finds messages or cannot be held (an offset out of the queue's
    range), when the wait is over, when the client goes away (``receive``), when ``wake`` is set,
    after MAX_SCAN_SLICES_PER_PULL slices of non-matching messages, or when ``max_messages`` comes
    back as 0 after a wait (the last read is answered then).

    ``at_end``: the caller's last read ended at the queue's end, so the first read would most
    likely find nothing: hold at once, and read when something arrives (an offset the queue has
    passed already answers the hold at once). A hold that ends otherwise answers an
    OFFSET_OVERFLOW_ONE read at ``offset`` that was not made.
    """
    limit = max_messages if callable(max_messages) else lambda: max_messages
    deadline = time.monotonic() + wait_s
    codes = message_filter.codes if message_filter is not None else None
    slices = 0
    if at_end:
        result = GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, offset, offset)
    else:
        result = store.get_message(topic, queue_id, offset, limit(), message_filter)
    while True:
        status = result.status
        if status is GetMessageStatus.FOUND:
            return Read(result)
        if status is GetMessageStatus.NO_MATCHED_MESSAGE:
            offset = result.next_offset
            if offset < result.max_offset:
                slices += 1
                if slices >= MAX_SCAN_SLICES_PER_PULL:
                    return Read(result)  # the client goes on from next_offset
                await asyncio.sleep(0)  # one slice at a time: others are served in between
                if (room := limit()) <= 0:
                    return Read(result)
                result = store.get_message(topic, queue_id, offset, room, message_filter)
                continue
        elif status not in _WAIT_STATUSES:
            return Read(result)
        remaining = deadline - time.monotonic()
        if remaining < MIN_HOLD_S:
            return Read(result)
        # An empty queue wakes its pulls with its first message, whatever offset they asked for.
        hold_offset = 0 if status is GetMessageStatus.NO_MESSAGE_IN_QUEUE else offset
        outcome = await _hold(holds, topic, queue_id, hold_offset, codes, remaining, receive, wake)
        if outcome is not HoldOutcome.ARRIVED:
            return Read(result, shutdown=outcome is HoldOutcome.SHUTDOWN)
        if (room := limit()) <= 0:
            return Read(result)
        result = store.get_message(topic, queue_id, offset, room, message_filter)


async def _hold(
    holds: PullHoldService,
    topic: str,
    queue_id: int,
    offset: int,
    codes: frozenset[int] | None,
    wait_s: float,
    receive: Receive | None,
    wake: WakeEvent | None,
) -> HoldOutcome | None:
    """The hold's outcome, or None when ``wake`` was set first."""
    outcome = await holds.hold(topic, queue_id, offset, codes, wait_s, receive, wake)
    return None if outcome is HoldOutcome.WOKEN else outcome
