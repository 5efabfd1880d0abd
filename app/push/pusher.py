"""One push subscription's delivery: a loop per queue of its topic on this broker (and, unordered,
per queue of its retry topic), reading from the group's committed offset and POSTing what it
reads.

Flow control. A request needs one of ``max_in_flight`` slots before anything is read for it, and
reads at most ``batch`` messages: nothing is read ahead of what is in flight, so a slow endpoint
holds at most ``max_in_flight * batch`` messages in memory. A failure sets the whole subscription
back: nothing more is read until an exponential back-off (WHARF_PUSH_BACKOFF_MIN_MS doubling up to
WHARF_PUSH_BACKOFF_MAX_MS) or a 429's or 503's Retry-After has passed; a 2xx resets it.

Offsets. A queue's committed offset is the lowest offset still in flight (or, with none, the next to
read), committed as each request ends and forced to disk before its slot is given back: a
SIGKILL delivers again only what was in flight.

Failures, unordered: each message of a failed request goes through
:func:`app.broker.retry.send_back`, as ``POST /v1/groups/{group}/retry`` sends it - to
``%RETRY%<group>`` after delay level 3 + its reconsume times, or to ``%DLQ%<group>`` after
``max_reconsume_times`` - and counts as consumed. Ordered: one request in flight per queue; a failed
request suspends its queue (WHARF_ORDERLY_SUSPEND_MS, or the back-off if longer) and is sent again,
its reconsume times one higher, until it is past ``max_reconsume_times`` and goes to the dead letters.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from app.broker import retry
from app.broker.dead_letter import send_to_dead_letter
from app.broker.errors import BrokerError
from app.broker.filters import SQL92, FilterExpression
from app.cloudevents import topic_source
from app.longpoll.hold import HoldOutcome, WakeEvent
from app.push.endpoint import EndpointGuard
from app.push.request import FailureKind, PushAnswer, PushTransport, build_request, retry_after_s
from app.push.signing import secret_key, signed_headers
from app.push.state import PushState
from app.push.subscription import PushSubscription
from app.store import MessageFilter
from app.store.errors import StoreError
from app.store.record import StoredMessage, decode_record

if TYPE_CHECKING:
    from app.broker.core import Broker

log = logging.getLogger(__name__)

HOLD_S = 30.0  # a read with nothing new waits this long for a message before it reads again
QUEUE_SCAN_S = 5.0  # how often the topic's queue count is looked at again
NOTHING_READ_WAIT_S = 0.05


@dataclasses.dataclass(frozen=True)
class Backoff:
    """The back-off of a failing endpoint (WHARF_PUSH_BACKOFF_*, WHARF_PUSH_RETRY_AFTER_MAX_S)."""

    min_ms: int
    max_ms: int
    retry_after_max_s: float
    suspend_ms: int  # an ordered queue's wait before it sends a failed request again

    def after(self, failures: int) -> float:
        return min(self.min_ms * 2 ** min(failures - 1, 40), self.max_ms) / 1000


@dataclasses.dataclass
class QueueCursor:
    topic: str
    queue_id: int
    next_read: int
    committed: int
    in_flight: set[int] = dataclasses.field(default_factory=set)

    def commit_point(self) -> int:
        return min(self.in_flight) if self.in_flight else self.next_read


def message_filter(subscription: PushSubscription) -> MessageFilter | None:
    """The subscription's filter, compiled as a pull's is (a bad expression: 40004 or 40015)."""
    if subscription.filter.sql92 is not None:
        return FilterExpression(SQL92, subscription.filter.sql92).compile()
    return FilterExpression.tags(subscription.filter.tags or "*").compile()


class Pusher:
    def __init__(
        self,
        broker: Broker,
        subscription: PushSubscription,
        transport: PushTransport,
        persist_offsets: Callable[[], Coroutine[Any, Any, None]],
        backoff: Backoff,
        guard: EndpointGuard,
    ) -> None:
        self.broker = broker
        self.subscription = subscription
        self.transport = transport
        self.persist_offsets = persist_offsets
        self.backoff = backoff
        self.guard = guard
        self.state = PushState()
        self.filter = message_filter(subscription)
        self._key = secret_key(subscription.secret)
        # A message not produced as a CloudEvent has its topic's URL on this broker as its source.
        self._cloudevents_source = (
            topic_source(broker.settings.resolved_advertised_url, subscription.topic)
            if subscription.format == "cloudevents"
            else None
        )
        self._slots = asyncio.Semaphore(subscription.max_in_flight)
        self._resume_at = 0.0  # monotonic: nothing is read before this (back-off, Retry-After)
        self._cursors: dict[tuple[str, int], QueueCursor] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._deliveries: set[asyncio.Task[None]] = set()
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = WakeEvent()

    @property
    def group(self) -> str:
        return self.subscription.group

    async def start(self) -> None:
        if self.subscription.paused:
            return
        if not self.subscription.ordered and not self.broker.is_slave:
            await retry.ensure_retry_topic(self.broker, self.group)
        self._supervisor = asyncio.create_task(self._supervise(), name=f"push {self.group}")

    async def stop(self, grace_s: float = 1.0) -> None:
        """Stop reading; give requests in flight ``grace_s`` to end, then cancel them (not committed,
        they are delivered again)."""
        self._stopping.set()
        if self._deliveries:
            await asyncio.wait(set(self._deliveries), timeout=grace_s)
        tasks = [*self._tasks, *self._deliveries, *([self._supervisor] if self._supervisor else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def log_cut(self) -> None:
        """The broker's log was cut under what this pusher read (a former master steps down to
        follow the new one, which stores other messages at those queue offsets): every queue loop
        and delivery in flight is cancelled, committing nothing (what they held is delivered again:
        at least once), and the cursors are dropped. The supervisor opens them again, from the
        committed offsets the cut lowered, once this broker is a master again."""
        for task in [*self._tasks, *self._deliveries]:
            task.cancel()
        self._cursors.clear()

    def held_messages(self) -> int:
        """Messages read from the queues and not yet done with: what the subscription holds in memory."""
        return sum(len(cursor.in_flight) for cursor in list(self._cursors.values()))

    def lag(self) -> int:
        """Messages of the subscription's queues past the group's committed offsets (paused too)."""
        store = self.broker.store
        offsets = store.consumer_offsets
        total = 0
        for topic, queue_id in self._queues():
            committed = offsets.query(self.group, topic, queue_id)
            base = committed if committed >= 0 else store.min_offset(topic, queue_id)
            total += max(0, store.max_offset(topic, queue_id) - base)
        return total

    # -- the queues ------------------------------------------------------------------------------

    def _queues(self) -> list[tuple[str, int]]:
        topic = self.subscription.topic
        queues = [(topic, queue_id) for queue_id in range(self.broker.read_queue_count(topic))]
        retry_topic = retry.retry_topic(self.group)
        if not self.subscription.ordered and self.broker.topics.get(retry_topic) is not None:
            queues.append((retry_topic, 0))
        return queues

    async def _supervise(self) -> None:
        """Start a loop for every queue, and for queues the topic gains later; on a slave none
        (a slave promoted to master starts them at its next look)."""
        while not self._stopping.is_set():
            if self.broker.is_slave:
                await self._sleep(QUEUE_SCAN_S)
                continue
            for topic, queue_id in self._queues():
                if (topic, queue_id) not in self._cursors:
                    cursor = self._cursors[topic, queue_id] = self._open_cursor(topic, queue_id)
                    task = asyncio.create_task(
                        self._run_queue(cursor), name=f"push {self.group} {topic}:{queue_id}"
                    )
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), QUEUE_SCAN_S)

    def _open_cursor(self, topic: str, queue_id: int) -> QueueCursor:
        store = self.broker.store
        committed = store.consumer_offsets.query(self.group, topic, queue_id)
        if committed < 0:
            committed = store.min_offset(topic, queue_id)
        return QueueCursor(topic, queue_id, committed, committed)

    def _commit(self, cursor: QueueCursor) -> None:
        point = cursor.commit_point()
        if point == cursor.committed:
            return
        store = self.broker.store
        if point > store.max_offset(cursor.topic, cursor.queue_id):
            # Past the queue's end: a cut of the log took what the cursor read (a delivery that
            # ended after the cut lowered the offsets, before log_cut ended the cursor).
            return
        store.consumer_offsets.commit(self.group, cursor.topic, cursor.queue_id, point)
        cursor.committed = point

    async def _run_queue(self, cursor: QueueCursor) -> None:
        """Read and deliver the queue until the pusher stops; after an unexpected error, again from
        where the cursor is (nothing it read and did not deliver is left behind) after the
        back-off."""
        failures = 0
        while not self._stopping.is_set():
            try:
                await self._read_and_deliver(cursor)
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                failures += 1
                log.exception(
                    "push subscription %s: reading %s:%d failed", self.group, cursor.topic, cursor.queue_id
                )
                self._note_error(f"reading {cursor.topic}:{cursor.queue_id} failed: {error!r}")
                await self._sleep(self.backoff.after(failures))

    async def _read_and_deliver(self, cursor: QueueCursor) -> None:
        """Wait (holding no slot) until the queue has something past the cursor, then take a slot,
        read at most ``batch`` messages and send them."""
        store, holds = self.broker.store, self.broker.holds
        codes = self.filter.codes if self.filter is not None else None
        while not self._stopping.is_set():
            if self.broker.is_slave:  # demoted: the new master pushes
                await self._sleep(QUEUE_SCAN_S)
                continue
            if store.max_offset(cursor.topic, cursor.queue_id) <= cursor.next_read:
                outcome = await holds.hold(
                    cursor.topic, cursor.queue_id, cursor.next_read, codes, HOLD_S, wake=self._stopping
                )
                if outcome is HoldOutcome.SHUTDOWN:
                    return
                continue
            await self._slots.acquire()
            # Looked at with the slot held: a request that ended while this waited for the slot
            # may have set the subscription back.
            if (wait_s := self._resume_at - time.monotonic()) > 0 or self._stopping.is_set():
                self._slots.release()
                await self._sleep(wait_s)
                continue
            try:
                result = store.get_message(
                    cursor.topic, cursor.queue_id, cursor.next_read, self.subscription.batch, self.filter
                )
                records = [bytes(record) for record in result.records]
                messages = [decode_record(record) for record in records]
            except BaseException:
                self._slots.release()
                raise
            if not records:
                self._slots.release()
                moved = result.next_offset != cursor.next_read
                cursor.next_read = result.next_offset
                self._commit(cursor)
                if not moved:  # nothing readable there yet (a gap being written): look again soon
                    await self._sleep(NOTHING_READ_WAIT_S)
                await asyncio.sleep(0)  # a long run of filtered-out messages yields between slices
                continue
            offsets = list(result.queue_offsets)
            cursor.next_read = result.next_offset
            cursor.in_flight.update(offsets)
            if self.subscription.ordered:
                try:
                    await self._deliver_in_order(messages, records)
                    await self._done(cursor, offsets)
                except Exception:
                    # Read again once the queue's loop goes on: an ordered queue skips nothing.
                    cursor.in_flight.difference_update(offsets)
                    cursor.next_read = offsets[0]
                    raise
                finally:
                    self._slots.release()
            else:
                task = asyncio.create_task(self._deliver(cursor, messages, records, offsets))
                self._deliveries.add(task)
                task.add_done_callback(self._deliveries.discard)

    async def _done(self, cursor: QueueCursor, offsets: Sequence[int]) -> None:
        """The messages at ``offsets`` are consumed: commit, and force the offsets to disk."""
        cursor.in_flight.difference_update(offsets)
        self._commit(cursor)
        await self.persist_offsets()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    # -- delivering ------------------------------------------------------------------------------

    async def _deliver(
        self, cursor: QueueCursor, messages: list[StoredMessage], records: list[bytes], offsets: list[int]
    ) -> None:
        """Send the messages (or, refused, send them back for a retry) and commit them. After an
        unexpected error the step that failed is tried again after the back-off: the messages stay
        in flight, holding the group's offset below them, until they are delivered (or, when the
        pusher stops first, delivered again after a restart)."""
        answered = False
        failures = 0
        try:
            while True:
                try:
                    if not answered:
                        answer = await self._send(messages, records, messages[0].reconsume_times)
                        if not answer.ok:
                            await self._send_back(messages)
                        answered = True
                    await self._done(cursor, offsets)
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    failures += 1
                    log.exception("push subscription %s: a delivery failed", self.group)
                    self._note_error(f"a delivery failed: {error!r}")
                    if self._stopping.is_set():
                        return
                    await self._sleep(self.backoff.after(failures))
        finally:
            self._slots.release()

    async def _deliver_in_order(self, messages: list[StoredMessage], records: list[bytes]) -> None:
        times = max(message.reconsume_times for message in messages)
        while True:
            answer = await self._send(messages, records, times)
            if answer.ok:
                return
            if times + 1 > self.subscription.max_reconsume_times:
                await self._keep_trying(self._dead_letter, messages, times)
                return
            times += 1
            self.state.retried += len(messages)
            wait_s = max(self.backoff.suspend_ms / 1000, self._resume_at - time.monotonic())
            await asyncio.sleep(wait_s)

    async def _dead_letter(self, messages: list[StoredMessage], times: int) -> None:
        for message in messages:
            await send_to_dead_letter(self.broker, self.group, message, times)
            self.state.dead_lettered += 1

    async def _send_back(self, messages: list[StoredMessage]) -> None:
        async def send_all(pending: list[StoredMessage], _: int) -> None:
            while pending:
                sent = await retry.send_back(self.broker, self.group, pending[0])
                pending.pop(0)
                if sent.status == "DEAD_LETTER":
                    self.state.dead_lettered += 1
                else:
                    self.state.retried += 1

        await self._keep_trying(send_all, list(messages), 0)

    async def _keep_trying(
        self,
        action: Callable[[list[StoredMessage], int], Coroutine[Any, Any, None]],
        messages: list[StoredMessage],
        times: int,
    ) -> None:
        """Run ``action`` until the store takes it (a full disk, a topic not writable: the
        messages stay in flight, not committed, and it is tried again after the back-off)."""
        failures = 0
        while True:
            try:
                await action(messages, times)
                return
            except (BrokerError, StoreError) as error:
                failures += 1
                self._note_error(f"sending back failed: {error}")
                await asyncio.sleep(self.backoff.after(failures))

    async def _send(
        self, messages: list[StoredMessage], records: list[bytes], reconsume_times: int
    ) -> PushAnswer:
        request = build_request(
            messages, records, reconsume_times, self._cloudevents_source, self.subscription.batch > 1
        )
        headers = request.headers | signed_headers(
            self._key, request.webhook_id, int(time.time()), request.body
        )
        self.state.in_flight += 1
        try:
            if (refused := await self.guard.refusal()) is not None:
                answer = PushAnswer(None, FailureKind.REFUSED, refused)
            else:
                answer = await self.transport.post(
                    self.subscription.url, request.body, headers, self.subscription.timeout_ms / 1000
                )
        finally:
            self.state.in_flight -= 1
        self._account(answer, messages)
        return answer

    def _account(self, answer: PushAnswer, messages: list[StoredMessage]) -> None:
        state = self.state
        now_ms = int(time.time() * 1000)
        if answer.ok:
            state.delivered += len(messages)
            state.last_success_ms = now_ms
            state.consecutive_failures = 0
            self._resume_at = 0.0
            for message in messages:
                state.latency.observe(max(0, now_ms - message.store_timestamp) / 1000)
            return
        assert answer.failure is not None
        state.failed[answer.failure] += len(messages)
        state.consecutive_failures += 1
        wait_s = self.backoff.after(state.consecutive_failures)
        if answer.status in (429, 503) and (asked := retry_after_s(answer.retry_after)) is not None:
            wait_s = max(wait_s, min(asked, self.backoff.retry_after_max_s))
        self._resume_at = max(self._resume_at, time.monotonic() + wait_s)
        self._note_error(
            f"HTTP {answer.status}"
            if answer.status is not None
            else f"{answer.failure.value}: {answer.detail}"
        )

    def _note_error(self, message: str) -> None:
        self.state.last_error = message[:500]
        self.state.last_error_ms = int(time.time() * 1000)
        log.info("push subscription %s: %s", self.group, self.state.last_error)
