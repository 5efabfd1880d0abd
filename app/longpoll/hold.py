"""The pull hold service (RocketMQ's PullRequestHoldService), for HTTP long polling.

A pull that finds nothing new is held in a table keyed (topic, queue id). It is answered:

* ``ARRIVED`` the moment a message past its offset is dispatched to that queue and matches its
  tag filter (a non-matching message does not wake it),
* ``TIMEOUT`` at its deadline,
* ``DISCONNECTED`` at once when its client goes away,
* ``SHUTDOWN`` when the broker stops,
* ``WOKEN`` when the holder's own ``wake`` event (a :class:`WakeEvent`) is set: a WebSocket
  subscriber's queue was kicked, a pusher is stopping. Setting it answers the holds waiting on it
  there and then, with no task per hold watching it.

The holder awaits its pull's future itself, with no task in between, so a pull an arrival
answers runs again in the event loop's next turn: a producer that yields once after its append
(:mod:`app.broker.plain`, ``Broker.produce``) lets the pulls it woke answer first.

A periodic check (5 s by default) answers any held pull whose queue moved past its offset, as a
fallback. Each held pull is a small state machine: WAITING -> ANSWERED, once; later answers are
ignored. Arrival notices may come from any thread: they reach the event loop through
``call_soon_threadsafe``, and a pull checks the queue once more right after it is registered, so
a message stored between the pull's read and its registration still wakes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


class HoldOutcome(enum.Enum):
    ARRIVED = "arrived"
    TIMEOUT = "timeout"
    DISCONNECTED = "disconnected"
    SHUTDOWN = "shutdown"
    WOKEN = "woken"  # the holder's own wake event was set (a subscriber's cursor was kicked)


class HeldPull:
    __slots__ = ("key", "offset", "codes", "future", "answered")

    def __init__(
        self, key: QueueKey, offset: int, codes: frozenset[int] | None, future: asyncio.Future[HoldOutcome]
    ) -> None:
        self.key = key
        self.offset = offset
        self.codes = codes
        self.future = future
        self.answered = False

    def answer(self, outcome: HoldOutcome) -> bool:
        """WAITING -> ANSWERED; False (and nothing happens) if it was answered already."""
        if self.answered:
            return False
        self.answered = True
        if not self.future.done():
            self.future.set_result(outcome)
        return True

    def wants(self, next_offset: int, tags_code: int) -> bool:
        return next_offset > self.offset and (self.codes is None or tags_code in self.codes)


class WakeEvent(asyncio.Event):
    """An :class:`asyncio.Event` that also answers, as it is set, every hold waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self.holds: set[HeldPull] = set()

    def set(self) -> None:
        super().set()
        for held in list(self.holds):
            held.answer(HoldOutcome.WOKEN)


class PullHoldService:
    def __init__(self, max_offset: Callable[[str, int], int], check_interval_s: float = 5.0) -> None:
        self.max_offset = max_offset
        self.check_interval_s = check_interval_s
        self._held: dict[QueueKey, set[HeldPull]] = {}
        self.woken = 0  # pulls answered by an arrival, ever: a producer looks whether it woke any
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._checker: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def held_count(self) -> int:
        return sum(len(pulls) for pulls in self._held.values())

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._stopping = False
        self._checker = asyncio.create_task(self._check_periodically(), name="wharf-pull-hold-check")

    async def stop(self) -> None:
        """Answer every held pull with SHUTDOWN and stop the periodic check."""
        self._stopping = True
        for pulls in list(self._held.values()):
            for held in list(pulls):
                held.answer(HoldOutcome.SHUTDOWN)
        self._held.clear()
        if self._checker is not None:
            self._checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checker
            self._checker = None

    async def hold(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        codes: frozenset[int] | None,
        timeout_s: float,
        receive: Receive | None = None,
        wake: WakeEvent | None = None,
    ) -> HoldOutcome:
        """Wait until a matching message passes ``offset``, the timeout, a disconnect, shutdown
        or ``wake``."""
        if self._stopping:
            return HoldOutcome.SHUTDOWN
        loop = asyncio.get_running_loop()
        key = (topic, queue_id)
        held = HeldPull(key, offset, codes, loop.create_future())
        self._held.setdefault(key, set()).add(held)
        if self.max_offset(topic, queue_id) > offset:
            # Something was stored between the caller's read and now: let it read again.
            held.answer(HoldOutcome.ARRIVED)
        timer = loop.call_later(timeout_s, held.answer, HoldOutcome.TIMEOUT)
        watcher = (
            asyncio.ensure_future(self._watch_disconnect(receive, held)) if receive is not None else None
        )
        if wake is not None:
            if wake.is_set():
                held.answer(HoldOutcome.WOKEN)
            wake.holds.add(held)
        try:
            return await held.future
        finally:
            held.answer(HoldOutcome.TIMEOUT)  # no-op unless cancelled
            timer.cancel()
            if watcher is not None:
                watcher.cancel()
            if wake is not None:
                wake.holds.discard(held)
            pulls = self._held.get(key)
            if pulls is not None:
                pulls.discard(held)
                if not pulls:
                    self._held.pop(key, None)

    def notify_arrival(self, topic: str, queue_id: int, next_offset: int, tags_code: int) -> None:
        """The store's arrival listener; callable from any thread."""
        if (topic, queue_id) not in self._held:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake(topic, queue_id, next_offset, tags_code)
        elif self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake, topic, queue_id, next_offset, tags_code)

    def _wake(self, topic: str, queue_id: int, next_offset: int, tags_code: int) -> None:
        pulls = self._held.get((topic, queue_id))
        if not pulls:
            return
        for held in list(pulls):
            if held.wants(next_offset, tags_code) and held.answer(HoldOutcome.ARRIVED):
                self.woken += 1

    def check_all(self) -> int:
        """Answer every held pull whose queue moved past its offset; returns how many."""
        woken = 0
        for (topic, queue_id), pulls in list(self._held.items()):
            max_offset = self.max_offset(topic, queue_id)
            for held in list(pulls):
                if max_offset > held.offset and held.answer(HoldOutcome.ARRIVED):
                    woken += 1
        return woken

    async def _check_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_s)
            try:
                self.check_all()
            except Exception:
                log.exception("held pull check failed")

    @staticmethod
    async def _watch_disconnect(receive: Receive, held: HeldPull) -> None:
        while True:
            message = await receive()
            if message.get("type") == "http.disconnect":
                held.answer(HoldOutcome.DISCONNECTED)
                return
