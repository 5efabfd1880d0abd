"""Flush services: SYNC_FLUSH group commit, ASYNC_FLUSH for the CommitLog, and ConsumeQueue flush.

Group commit (SPEC 1.7): a producer that needs durability puts a request for its end offset; the
flush thread swaps the write list and the read list under a short lock, forces the CommitLog once
(twice if the data spans two segments) and completes every request whose bytes are now on disk.
One ``fdatasync`` thus acknowledges every producer that arrived while the previous one ran.
A thread waits on a ``concurrent.futures.Future``'s ``result()``. Asyncio code asks with
:meth:`GroupCommitService.request_async` for a future of its own loop instead, and no thread
future is made for it: the flush thread answers every waiter of a loop that one flush covered in a
single hand-over to that loop, rather than one wake-up of the loop per producer (what
``asyncio.wrap_future`` would cost).

Every request is answered by its deadline (``sync_flush_timeout_ms``), whatever the disk does: the
flush thread answers False for a request it could not bring to disk in time, and a watchdog thread
answers False for requests the flush thread cannot reach because it is stuck inside ``fdatasync``.
A request is answered once; the later answer is dropped.

The thorough ConsumeQueue flush (and the last one at a stop) forces many dirty queues with a single
``syncfs`` of their file system instead of one ``fdatasync`` per segment (:func:`flush_together`):
a store with tens of thousands of queues written a little each would otherwise wait for the disk
tens of thousands of times in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

from app.store.atomic_file import sync_file_system
from app.store.checkpoint import Checkpoint
from app.store.mapped_file import MappedFile
from app.store.mapped_file_queue import MappedFileQueue
from app.store.service import ServiceThread


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class FlushRequest:
    """A wait for the CommitLog to be on disk up to ``next_offset``: a blocking caller's ``future``,
    or an event loop's ``waiter``. Answered once: the flush thread and the watchdog race for it."""

    __slots__ = ("next_offset", "deadline_ms", "future", "waiter", "latch", "outcome", "_unanswered")

    def __init__(
        self,
        next_offset: int,
        deadline_ms: int,
        waiter: asyncio.Future[bool] | None = None,
        latch: threading.Lock | None = None,
    ) -> None:
        self.next_offset = next_offset
        self.deadline_ms = deadline_ms
        self.waiter = waiter  # an event loop's future, handed its answer by the loop's own thread
        # A thread blocked in GroupCommitService.wait: a held lock, released with ``outcome`` set.
        self.latch = latch
        self.outcome = False
        # A thread's future (with its lock and condition) only for a caller that asked for one.
        self.future: Future[bool] | None = Future() if waiter is None and latch is None else None
        self._unanswered = [True]  # popped by the one answer: list.pop is atomic

    @property
    def answered(self) -> bool:
        return not self._unanswered

    def claim(self) -> bool:
        """True for the first caller only: the one that answers the request."""
        try:
            self._unanswered.pop()
        except IndexError:
            return False
        return True


class Answers:
    """Answers given by one thread in one pass: each blocking caller's future now, the event
    loops' waiters in one hand-over per loop (:meth:`send`)."""

    __slots__ = ("_loops",)

    def __init__(self) -> None:
        self._loops: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[bool], bool]]] = {}

    def answer(self, request: FlushRequest, done: bool) -> None:
        if not request.claim():  # the watchdog or the flush thread answered it first
            return
        if request.future is not None:
            request.future.set_result(done)
        if request.latch is not None:
            request.outcome = done
            request.latch.release()
        waiter = request.waiter
        if waiter is not None:
            self._loops.setdefault(waiter.get_loop(), []).append((waiter, done))

    def send(self) -> None:
        loops, self._loops = self._loops, {}
        for loop, answers in loops.items():
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_settle, answers)


def _settle(answers: list[tuple[asyncio.Future[bool], bool]]) -> None:
    for waiter, done in answers:
        if not waiter.done():  # cancelled when its producer went away
            waiter.set_result(done)


class FlushDeadlineWatchdog(ServiceThread):
    """Answers False, at its deadline, every request still unanswered: it never touches the disk,
    so a flush thread stuck inside ``fdatasync`` cannot keep a producer waiting past the timeout."""

    name = "group-commit-watchdog"

    def __init__(self, timeout_ms: int) -> None:
        super().__init__(timeout_ms / 1000)
        self.timeout_ms = timeout_ms
        self._lock = threading.Lock()
        # Deadlines are now + one fixed timeout, so arrival order is deadline order.
        self._pending: deque[FlushRequest] = deque()

    def watch(self, request: FlushRequest) -> None:
        with self._lock:
            pending = self._pending
            while pending and pending[0].answered:  # answered by the flush thread in time
                pending.popleft()
            pending.append(request)

    def run_once(self) -> None:
        now = _now_ms()
        overdue: list[FlushRequest] = []
        with self._lock:
            pending = self._pending
            while pending and (pending[0].answered or pending[0].deadline_ms <= now):
                overdue.append(pending.popleft())
            next_deadline = pending[0].deadline_ms if pending else now + self.timeout_ms
        # Sleep until the oldest deadline; a request made meanwhile has a later one.
        self.interval_s = max(next_deadline - now, 1) / 1000
        answers = Answers()
        for request in overdue:
            answers.answer(request, False)
        answers.send()


# Told how long a flush took, in seconds, for every flush that brought bytes to disk.
FlushListener = Callable[[float], None]


class CommitLogFlusher:
    """Forces the CommitLog and records the store timestamp it reached in the checkpoint."""

    on_flush: FlushListener | None = None  # set by the store (its ``on_flush``)

    def __init__(self, files: MappedFileQueue, checkpoint: Checkpoint) -> None:
        self.files = files
        self.checkpoint = checkpoint

    def flush_all(self) -> None:
        """Flush segment after segment until everything appended so far is on disk."""
        for _ in range(len(self.files.files) + 1):
            self.flush()
            if self.files.flushed_where >= self.files.max_offset:
                return

    def flush(self, least_pages: int = 0) -> None:
        before = self.files.find(self.files.flushed_where)
        timestamp = before.last_store_timestamp if before is not None else 0
        flushed, started = self.files.flushed_where, time.perf_counter()
        self.files.flush(least_pages)
        if self.on_flush is not None and self.files.flushed_where > flushed:
            self.on_flush(time.perf_counter() - started)
        # A flush ends on a record boundary (or a segment's end): recovery may walk from there.
        self.checkpoint.commitlog_offset = max(self.checkpoint.commitlog_offset, self.files.flushed_where)
        if timestamp:
            self.checkpoint.commitlog_timestamp = max(self.checkpoint.commitlog_timestamp, timestamp)


class GroupCommitService(ServiceThread):
    name = "group-commit"

    def __init__(self, flusher: CommitLogFlusher, interval_ms: int, timeout_ms: int) -> None:
        super().__init__(interval_ms / 1000)
        self.flusher = flusher
        self.timeout_ms = timeout_ms
        self._lock = threading.Lock()
        self._write: list[FlushRequest] = []
        self._read: list[FlushRequest] = []
        self._drained = False
        self.watchdog = FlushDeadlineWatchdog(timeout_ms)

    def start(self) -> None:
        self.watchdog.start()
        super().start()

    def stop(self, timeout_s: float = 10.0) -> None:
        super().stop(timeout_s)
        # Last: it answers whoever the drain could not, should the disk hang during the drain.
        self.watchdog.stop(timeout_s)

    def request(self, next_offset: int) -> Future[bool]:
        """A future that becomes True when the CommitLog is on disk up to ``next_offset``,
        False when the flush timeout passed first."""
        future = self._put(FlushRequest(next_offset, _now_ms() + self.timeout_ms)).future
        assert future is not None  # a request without a waiter has its own
        return future

    def wait(self, next_offset: int) -> bool:
        """Block until the CommitLog is on disk up to ``next_offset`` (True) or the flush timeout
        passed (False): :meth:`request` without a future, for a thread that only waits."""
        latch = threading.Lock()
        latch.acquire()
        request = self._put(FlushRequest(next_offset, _now_ms() + self.timeout_ms, latch=latch))
        latch.acquire()  # released by the answer, which the watchdog gives by the deadline
        return request.outcome

    def request_async(self, next_offset: int) -> asyncio.Future[bool]:
        """As :meth:`request`, as a future of the running event loop (to be called from it)."""
        waiter = asyncio.get_running_loop().create_future()
        self._put(FlushRequest(next_offset, _now_ms() + self.timeout_ms, waiter))
        return waiter

    def _put(self, request: FlushRequest) -> FlushRequest:
        with self._lock:
            if not self._drained:
                self._write.append(request)
                self.watchdog.watch(request)
                self.wakeup()
                return request
        # The service has stopped: answer from the disk as it is, after one more flush.
        self.flusher.flush_all()
        answers = Answers()
        answers.answer(request, self.flusher.files.flushed_where >= request.next_offset)
        answers.send()
        return request

    def _swap(self) -> None:
        with self._lock:
            self._write, self._read = self._read, self._write

    def run_once(self) -> None:
        self._swap()
        requests = self._read
        if not requests:
            return
        files = self.flusher.files
        answers = Answers()
        for request in requests:
            if request.answered:  # timed out by the watchdog while the disk was stuck
                continue
            # A request can span two segments: at most two flushes bring it to disk.
            for _ in range(2):
                if files.flushed_where >= request.next_offset:
                    break
                self.flusher.flush()
            done = files.flushed_where >= request.next_offset
            if not done and _now_ms() < request.deadline_ms:
                with self._lock:  # not there yet: retry on the next pass
                    self._write.append(request)
                continue
            answers.answer(request, done)
        requests.clear()
        answers.send()

    def on_stop(self) -> None:
        # Drain: answer everyone still waiting, after one last flush of everything.
        self.flusher.flush_all()
        with self._lock:
            self._drained = True
            pending = self._write + self._read
            self._write, self._read = [], []
        answers = Answers()
        for request in pending:
            answers.answer(request, self.flusher.files.flushed_where >= request.next_offset)
        answers.send()


class ThoroughEvery:
    """How many dirty pages a periodic flush waits for: ``least_pages``, but none (flush
    everything) once every ``thorough_ms`` (RocketMQ's flushPhysicQueueThoroughInterval)."""

    def __init__(self, least_pages: int, thorough_ms: int) -> None:
        self.least_pages = least_pages
        self.thorough_ms = thorough_ms
        self._last_thorough_ms = _now_ms()

    def least(self) -> int:
        now = _now_ms()
        if now - self._last_thorough_ms >= self.thorough_ms:
            self._last_thorough_ms = now
            return 0
        return self.least_pages


class AsyncFlushService(ServiceThread):
    """ASYNC_FLUSH: every interval, flush when enough pages are dirty; everything at a longer interval."""

    name = "commitlog-flush"

    def __init__(
        self, flusher: CommitLogFlusher, interval_ms: int, least_pages: int, thorough_ms: int
    ) -> None:
        super().__init__(interval_ms / 1000)
        self.flusher = flusher
        self.pages = ThoroughEvery(least_pages, thorough_ms)

    def run_once(self) -> None:
        """Flush from where the last pass ended, segment after segment: every segment filled since
        goes to disk whole, so a pass leaves nothing older than the interval behind however fast
        segments fill (one segment per pass fell behind a producer filling several per interval).
        The segment being filled waits for ``least_pages`` as before."""
        files = self.flusher.files
        least = self.pages.least()
        for _ in range(len(files.files) + 1):
            before = files.flushed_where
            self.flusher.flush(least)
            if files.flushed_where >= files.max_offset or files.flushed_where == before:
                return

    def on_stop(self) -> None:
        self.flusher.flush_all()


# How many dirty ConsumeQueues a flush of everything needs before it forces their whole file system
# with one ``syncfs`` rather than each of their segments with an ``fdatasync``. Below it the
# per-file syncs are cheaper: a ``syncfs`` also writes back every other dirty file of that file
# system (the CommitLog's unflushed tail, other programs' files), which a few queues do not repay.
SYNCFS_AT_QUEUES = 64


class UnflushedBytes:
    """What of a queue a file system sync is about to make durable, taken before the sync: each
    segment that has unflushed bytes or a name not yet forced, with how far it was written.

    Only what was written before the sync started can be counted as flushed after it: bytes a
    writer adds meanwhile may or may not have been written back, so they wait for the next flush.
    """

    __slots__ = ("files", "segments")

    def __init__(self, files: MappedFileQueue) -> None:
        self.files = files
        self.segments: list[tuple[MappedFile, int]] = []
        for mapped in files.files:
            wrote = mapped.wrote_position
            if mapped.flushed_position < wrote or not mapped.directory_synced:
                self.segments.append((mapped, wrote))

    def mark_flushed(self) -> None:
        """After the sync: record what it made durable as :meth:`MappedFileQueue.flush` would have.

        Each segment taken is flushed up to where it was written, and its name (and the directories
        made for it) is on disk: the sync wrote back every directory entry made before it. The
        queue's ``flushed_where`` then moves where :meth:`MappedFileQueue.flush_all` would have
        taken it, and no further: from where it is, across every segment flushed whole, to the
        flushed end of the first segment that is not (the last one taken, or one that began after
        the snapshot and still has everything to flush).
        """
        for mapped, wrote in self.segments:
            if mapped.flushed_position < wrote:
                mapped.flushed_position = wrote
            mapped.directory_synced = True
        files = self.files
        reached = files.flushed_where
        for mapped in files.files:
            start = mapped.file_from_offset
            if start + mapped.file_size <= reached:
                continue  # wholly below: flushed before
            if start > reached:
                break  # flush would not find a segment at ``reached`` either
            reached = max(reached, start + mapped.flushed_position)
            if mapped.flushed_position < mapped.file_size:
                break
        if reached > files.flushed_where:
            files.flushed_where = reached


def flush_together(queues: Sequence[MappedFileQueue], sync_root: Path) -> None:
    """Bring every queue of ``queues`` to disk up to what was written when the call began, with one
    ``syncfs`` of the file system holding ``sync_root`` (where the queues are), then mark them
    flushed. Bytes written during the call stay unflushed; OSError when the sync failed, and then
    nothing is marked."""
    taken = [UnflushedBytes(files) for files in queues]
    sync_file_system(sync_root)
    for unflushed in taken:
        unflushed.mark_flushed()


class DirtyQueues:
    """The ConsumeQueues written since they were last flushed whole: the flush visits only these,
    not every queue the store has."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: set[MappedFileQueue] = set()

    def mark(self, files: MappedFileQueue) -> None:
        if files in self._queues:
            # Marked already (a queue written again before the flush took it): the flush that takes
            # this set flushes the queue after this write, so no lock is needed to leave it.
            return
        with self._lock:
            self._queues.add(files)

    def take(self) -> list[MappedFileQueue]:
        """Every dirty queue; they are clean from here on until marked again."""
        with self._lock:
            queues, self._queues = self._queues, set()
        return list(queues)

    def __len__(self) -> int:
        return len(self._queues)


class ConsumeQueueFlushService(ServiceThread):
    """Flushes the dirty ConsumeQueues, then the checkpoint that says how far they are on disk.

    Given ``sync_root`` (the directory the queues are under), a flush of everything that finds at
    least :data:`SYNCFS_AT_QUEUES` dirty queues forces them with one ``syncfs`` of that file system
    (:func:`flush_together`); without it every queue is flushed segment by segment.
    """

    name = "consumequeue-flush"

    def __init__(
        self,
        dirty: DirtyQueues,
        checkpoint: Checkpoint,
        interval_ms: int,
        least_pages: int,
        thorough_ms: int,
        before_checkpoint: Callable[[], None] = lambda: None,
        covered_timestamp: Callable[[], int] = lambda: 0,
        covered_offset: Callable[[], int] = lambda: 0,
        sync_root: Path | None = None,
    ) -> None:
        super().__init__(interval_ms / 1000)
        self.dirty = dirty
        self.sync_root = sync_root
        self.checkpoint = checkpoint
        self.pages = ThoroughEvery(least_pages, thorough_ms)
        self.before_checkpoint = before_checkpoint
        # The store timestamp and the CommitLog offset (a record boundary) that the ConsumeQueues
        # cover once flushed.
        self.covered_timestamp = covered_timestamp
        self.covered_offset = covered_offset

    def flush_all(self, least_pages: int) -> None:
        # Read before the dirty queues are taken: every entry below these is in a queue taken now.
        covered = self.covered_timestamp()
        covered_offset = self.covered_offset()
        queues = self.dirty.take()
        try:
            if least_pages == 0 and self.sync_root is not None and len(queues) >= SYNCFS_AT_QUEUES:
                flush_together(queues, self.sync_root)
                flushed, queues = queues, []
                for files in flushed:
                    if files.flushed_where < files.max_offset:
                        self.dirty.mark(files)  # written during the sync: left for a later pass
            while queues:
                files = queues[-1]
                if least_pages == 0:
                    files.flush_all()
                else:
                    files.flush(least_pages)
                queues.pop()
                if files.flushed_where < files.max_offset:
                    self.dirty.mark(files)  # left for a later pass
        finally:
            for files in queues:  # a flush failed: the rest stays dirty
                self.dirty.mark(files)
        if least_pages == 0 and covered:
            self.checkpoint.consumequeue_timestamp = max(self.checkpoint.consumequeue_timestamp, covered)
        if least_pages == 0:
            self.checkpoint.consumequeue_offset = max(self.checkpoint.consumequeue_offset, covered_offset)
        self.before_checkpoint()
        self.checkpoint.flush()

    def run_once(self) -> None:
        self.flush_all(self.pages.least())

    def on_stop(self) -> None:
        self.flush_all(0)
