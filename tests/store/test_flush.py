"""Flushing (SPEC 1.7): ASYNC_FLUSH in the background, SYNC_FLUSH group commit, the flush timeout,
the asyncio entry point and draining at close. The disk is injected through the CommitLog flusher."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from app.store import FlushMode, MessageStore, PutStatus
from app.store.flush import AsyncFlushService
from app.store.mapped_file import PAGE_SIZE
from tests.store.conftest import (
    CountingFlusher,
    GatedFlusher,
    StalledFlusher,
    StoreFactory,
    message,
    wait_until,
)

# A flush bug tends to hang a producer: fail fast instead of stalling the whole run.
pytestmark = pytest.mark.timeout(60)

HOUR_MS = 3_600_000


def flushed_where(store: MessageStore) -> int:
    return store.commitlog.files.flushed_where


counting = CountingFlusher
gated = GatedFlusher
stalled = StalledFlusher


def sync_store(make_store: StoreFactory, **overrides: Any) -> MessageStore:
    return make_store(flush_mode=FlushMode.SYNC, **overrides)


# -- ASYNC_FLUSH ----------------------------------------------------------------------------------


def test_async_durable_is_done_at_once(make_store: StoreFactory) -> None:
    # The background flush never runs during this test: durability is not what ASYNC promises.
    store = make_store(flush_interval_commitlog_ms=HOUR_MS, flush_commitlog_thorough_interval_ms=HOUR_MS)
    results = store.put([message()])
    assert results[0].status is PutStatus.PUT_OK
    future = store.durable(results)
    assert future.done() and future.result() is True
    assert flushed_where(store) < results[0].end_offset


def test_async_flush_service_eventually_flushes_everything(make_store: StoreFactory) -> None:
    store = make_store(
        flush_interval_commitlog_ms=5,
        flush_commitlog_least_pages=4,
        flush_commitlog_thorough_interval_ms=20,
    )
    results = []
    for i in range(60):  # many tiny segments; the last one far from 4 dirty pages
        results += store.append([message(body=bytes([i]) * 300)])
    end = results[-1].end_offset

    wait_until(lambda: flushed_where(store) >= end, what="the async flush to reach the end of the log")

    assert all(mapped.flushed_position == mapped.wrote_position for mapped in store.commitlog.files.files)


def test_async_flush_waits_for_enough_dirty_pages_between_thorough_flushes(make_store: StoreFactory) -> None:
    store = make_store(
        commitlog_file_size=16 * PAGE_SIZE,
        flush_interval_commitlog_ms=HOUR_MS,  # the store's own service stays idle
        flush_commitlog_thorough_interval_ms=HOUR_MS,
    )
    service = AsyncFlushService(store.flusher, interval_ms=HOUR_MS, least_pages=4, thorough_ms=HOUR_MS)

    store.append([message(body=b"x" * 1000)])
    service.run_once()
    assert flushed_where(store) == 0  # under 4 dirty pages

    results = store.append([message(body=b"x" * 1000) for _ in range(4 * PAGE_SIZE // 1000)])
    service.run_once()
    assert flushed_where(store) == results[-1].end_offset

    [last] = store.append([message(body=b"small")])
    thorough = AsyncFlushService(store.flusher, interval_ms=HOUR_MS, least_pages=4, thorough_ms=0)
    thorough.run_once()
    assert flushed_where(store) == last.end_offset  # a thorough flush takes whatever is dirty


def test_consume_queues_are_flushed_in_the_background(make_store: StoreFactory) -> None:
    store = make_store(flush_interval_consumequeue_ms=5, flush_consumequeue_thorough_interval_ms=20)
    for queue_id in range(3):
        store.append([message(queue_id=queue_id, body=b"x") for _ in range(20)])
    queues = [store.queue("orders", queue_id) for queue_id in range(3)]

    wait_until(
        lambda: all(q is not None and q.files.flushed_where == q.files.max_offset for q in queues),
        what="the consume queue flush",
    )


# -- SYNC_FLUSH -----------------------------------------------------------------------------------


def test_sync_put_returns_only_after_its_bytes_are_flushed(make_store: StoreFactory) -> None:
    store = sync_store(make_store)
    for i in range(30):  # crossing many segment boundaries, single messages and batches
        batch = [message(body=bytes([i]) * 200) for _ in range(1 + i % 4)]
        results = store.put(batch)
        assert {r.status for r in results} == {PutStatus.PUT_OK}
        assert flushed_where(store) >= results[-1].end_offset


def test_a_sync_batch_spanning_many_segments_is_flushed_entirely(make_store: StoreFactory) -> None:
    store = sync_store(make_store)
    results = store.put([message(body=b"b" * 900) for _ in range(25)])  # about six segments
    assert {r.status for r in results} == {PutStatus.PUT_OK}
    assert flushed_where(store) >= results[-1].end_offset
    assert all(mapped.flushed_position == mapped.wrote_position for mapped in store.commitlog.files.files)


def test_sync_put_waits_for_the_disk(make_store: StoreFactory) -> None:
    store = sync_store(make_store, flusher=gated)
    flusher = store.flusher
    assert isinstance(flusher, GatedFlusher)
    events: list[str] = []

    def producer() -> None:
        results = store.put([message()])
        events.append(f"put returned {results[0].status}")

    thread = threading.Thread(target=producer)
    thread.start()
    assert flusher.entered.wait(10), "the group commit never started a flush"
    assert thread.is_alive()
    events.append("disk finished")
    flusher.gate.set()
    thread.join(10)

    assert events == ["disk finished", "put returned PUT_OK"]
    assert not flusher.timed_out


def test_sync_durable_completes_when_the_bytes_are_on_disk(make_store: StoreFactory) -> None:
    store = sync_store(make_store)
    results = store.append([message(body=b"d" * 500) for _ in range(3)])
    assert store.durable(results).result(timeout=10) is True
    assert flushed_where(store) >= results[-1].end_offset


def test_group_commit_serves_many_producers_with_few_flushes(make_store: StoreFactory) -> None:
    producers = 64
    appended = threading.Semaphore(0)
    store = sync_store(
        make_store,
        commitlog_file_size=1 << 20,  # every message in one segment: one flush can cover them all
        flusher=gated,
        on_arrival=lambda *_: appended.release(),
    )
    flusher = store.flusher
    assert isinstance(flusher, GatedFlusher)

    def open_the_gate_once_everyone_appended() -> None:
        for _ in range(producers):
            appended.acquire(timeout=10)
        flusher.gate.set()

    barrier = threading.Barrier(producers)

    def produce(i: int) -> PutStatus:
        barrier.wait(10)
        return store.put([message(body=f"producer-{i}".encode())])[0].status

    opener = threading.Thread(target=open_the_gate_once_everyone_appended)
    opener.start()
    with ThreadPoolExecutor(max_workers=producers) as pool:
        statuses = list(pool.map(produce, range(producers)))
    opener.join(10)

    assert statuses == [PutStatus.PUT_OK] * producers
    assert not flusher.timed_out
    assert flusher.calls <= 2, f"{flusher.calls} flushes for {producers} producers"
    assert store.max_offset("orders", 0) == producers


def test_a_disk_that_makes_no_progress_times_out(make_store: StoreFactory) -> None:
    store = sync_store(make_store, flusher=stalled, sync_flush_timeout_ms=100)

    results = store.put([message(body=b"a"), message(body=b"b")])

    assert [r.status for r in results] == [PutStatus.FLUSH_DISK_TIMEOUT] * 2
    assert store.durable(results).result(timeout=10) is False
    # The messages were appended all the same: the timeout is about durability, not storage.
    assert [m.body for m in store.read_messages("orders", 0, 0)] == [b"a", b"b"]


def test_a_flush_stuck_in_the_disk_still_answers_at_the_deadline(make_store: StoreFactory) -> None:
    """The flush thread hangs inside the disk call: every waiting producer, the one whose flush hangs
    and the ones queued behind it, is answered False at its deadline, before the disk returns."""
    store = sync_store(make_store, flusher=gated, sync_flush_timeout_ms=200)
    flusher = store.flusher
    assert isinstance(flusher, GatedFlusher)
    flusher.gate_timeout_s = 60  # longer than the test may take: only the deadline can answer

    try:
        in_flight = store.durable(store.append([message(body=b"first")]))
        assert flusher.entered.wait(10), "the group commit never started a flush"
        queued = [store.durable(store.append([message(body=f"queued-{i}".encode())])) for i in range(3)]

        assert [future.result(timeout=10) for future in [in_flight, *queued]] == [False] * 4
        assert [r.status for r in store.put([message(body=b"put")])] == [PutStatus.FLUSH_DISK_TIMEOUT]
        assert not flusher.timed_out  # the disk is still stuck
    finally:
        # The disk comes back: the flush thread survives the requests answered without it.
        flusher.gate.set()
    assert [r.status for r in store.put([message(body=b"after")])] == [PutStatus.PUT_OK]
    assert flushed_where(store) == store.commitlog.max_offset


def test_put_async_times_out_too(make_store: StoreFactory) -> None:
    store = sync_store(make_store, flusher=stalled, sync_flush_timeout_ms=100)
    results = asyncio.run(store.put_async([message()]))
    assert results[0].status is PutStatus.FLUSH_DISK_TIMEOUT


# -- asyncio --------------------------------------------------------------------------------------


def test_put_async_does_not_block_the_event_loop(make_store: StoreFactory) -> None:
    store = sync_store(make_store, flusher=gated)
    flusher = store.flusher
    assert isinstance(flusher, GatedFlusher)

    async def scenario() -> tuple[list[PutStatus], int]:
        ticks = 0
        put = asyncio.create_task(store.put_async([message(), message()]))

        async def ticker() -> None:
            nonlocal ticks
            while not put.done():
                ticks += 1
                if ticks == 10:
                    # Only a loop that keeps running while the put waits can open the gate.
                    flusher.gate.set()
                await asyncio.sleep(0.001)

        await asyncio.gather(put, ticker())
        return [r.status for r in put.result()], ticks

    statuses, ticks = asyncio.run(scenario())

    assert statuses == [PutStatus.PUT_OK] * 2
    assert ticks >= 10
    assert not flusher.timed_out, "the flush only finished when the gate timed out: the loop was blocked"


def test_put_async_under_async_flush_returns_at_once(make_store: StoreFactory) -> None:
    store = make_store(flush_interval_commitlog_ms=HOUR_MS, flush_commitlog_thorough_interval_ms=HOUR_MS)
    results = asyncio.run(store.put_async([message(body=b"async")]))
    assert results[0].status is PutStatus.PUT_OK
    assert [m.body for m in store.read_messages("orders", 0, 0)] == [b"async"]


class CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts the hand-overs other threads make to it."""

    handovers = 0

    def call_soon_threadsafe(self, *args: Any, **kwargs: Any) -> Any:
        self.handovers += 1
        return super().call_soon_threadsafe(*args, **kwargs)


def run_counting(scenario: Any) -> tuple[Any, int]:
    loop = CountingLoop()
    try:
        return loop.run_until_complete(scenario()), loop.handovers
    finally:
        loop.close()


def test_one_flush_answers_a_loops_waiters_in_one_handover(make_store: StoreFactory) -> None:
    """Twenty producers queued behind a flush are answered together: one hand-over to their loop,
    not one wake-up each (what waiting through ``asyncio.wrap_future`` costs)."""
    store = sync_store(make_store, flusher=gated)
    flusher = store.flusher
    assert isinstance(flusher, GatedFlusher)

    async def scenario() -> list[bool]:
        first = asyncio.ensure_future(store.wait_durable(store.append([message(body=b"first")])))
        await asyncio.sleep(0)  # its request is in
        assert await asyncio.to_thread(flusher.entered.wait, 10), "the group commit never started a flush"
        queued = [
            asyncio.ensure_future(store.wait_durable(store.append([message(body=f"queued-{i}".encode())])))
            for i in range(20)
        ]
        await asyncio.sleep(0)
        flusher.gate.set()
        return await asyncio.gather(first, *queued)

    answers, handovers = run_counting(scenario)

    assert answers == [True] * 21
    # One for the flush the first producer waited on, one for the pass that answered the twenty
    # (and one for asyncio.to_thread's own answer).
    assert handovers <= 3


def test_the_watchdog_answers_a_loops_waiters_at_their_deadline(make_store: StoreFactory) -> None:
    store = sync_store(make_store, flusher=gated, sync_flush_timeout_ms=200)
    flusher = store.flusher
    assert isinstance(flusher, GatedFlusher)
    flusher.gate_timeout_s = 60  # only the deadline can answer

    async def scenario() -> list[bool]:
        waits = [store.wait_durable(store.append([message(body=f"m-{i}".encode())])) for i in range(5)]
        return await asyncio.wait_for(asyncio.gather(*waits), 10)

    try:
        answers, _ = run_counting(scenario)
    finally:
        flusher.gate.set()
    assert answers == [False] * 5


def test_a_cancelled_waiter_leaves_the_others_answered(make_store: StoreFactory) -> None:
    store = sync_store(make_store, flusher=gated)
    flusher = store.flusher
    assert isinstance(flusher, GatedFlusher)

    async def scenario() -> tuple[bool, bool]:
        gone = asyncio.ensure_future(store.wait_durable(store.append([message(body=b"gone")])))
        kept = asyncio.ensure_future(store.wait_durable(store.append([message(body=b"kept")])))
        await asyncio.sleep(0)
        gone.cancel()  # its producer went away: the answer finds its waiter cancelled
        with contextlib.suppress(asyncio.CancelledError):
            await gone
        flusher.gate.set()
        return gone.cancelled(), await asyncio.wait_for(kept, 10)

    (cancelled, kept), _ = run_counting(scenario)
    assert cancelled and kept is True


def test_wait_durable_after_close_does_not_hang(make_store: StoreFactory) -> None:
    store = sync_store(make_store)
    results = store.append([message()])
    store.close()

    assert asyncio.run(asyncio.wait_for(store.wait_durable(results), 2)) is True


# -- closing --------------------------------------------------------------------------------------


def test_close_drains_pending_group_commits(make_store: StoreFactory) -> None:
    store = sync_store(make_store, flusher=gated)
    flusher = store.flusher
    assert isinstance(flusher, GatedFlusher)
    group_commit = store.group_commit
    assert group_commit is not None

    first = store.append([message(body=b"first")])
    futures = [store.durable(first)]
    assert flusher.entered.wait(10), "the group commit never started a flush"
    # The flush thread is stuck on the disk; more producers queue up behind it.
    for i in range(10):
        futures.append(store.durable(store.append([message(body=f"later-{i}".encode())])))
    assert not any(future.done() for future in futures)

    closer = threading.Thread(target=store.close)
    closer.start()
    wait_until(lambda: group_commit.stopping, what="close to stop the group commit")
    flusher.gate.set()
    closer.join(10)

    assert not closer.is_alive()
    assert all(future.done() for future in futures)
    assert [future.result() for future in futures] == [True] * len(futures)


def test_close_answers_requests_a_stalled_disk_never_served(make_store: StoreFactory) -> None:
    store = sync_store(make_store, flusher=stalled, sync_flush_timeout_ms=60_000)
    futures = [store.durable(store.append([message()])) for _ in range(5)]

    store.close()

    assert all(future.done() for future in futures)
    assert [future.result() for future in futures] == [False] * 5  # nothing reached the disk


def test_durable_after_close_does_not_hang(make_store: StoreFactory) -> None:
    """A producer that appended just before the store closed must still get an answer."""
    store = sync_store(make_store)
    results = store.append([message()])
    store.close()

    future = store.durable(results)

    assert future.result(timeout=2) is True  # close flushed everything


@pytest.mark.parametrize("mode", [FlushMode.ASYNC, FlushMode.SYNC])
def test_close_leaves_everything_flushed(make_store: StoreFactory, mode: FlushMode) -> None:
    store = make_store(
        flush_mode=mode, flush_interval_commitlog_ms=HOUR_MS, flush_commitlog_thorough_interval_ms=HOUR_MS
    )
    results = store.append([message(body=b"c" * 700) for _ in range(40)])  # about eight segments

    store.close()

    assert flushed_where(store) >= results[-1].end_offset
    assert not store.config.abort_path.exists()
