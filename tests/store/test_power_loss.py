"""Power loss (SPEC 1.7, 1.8): what a broker acknowledged survives losing the page cache, not only a SIGKILL.

A SIGKILL leaves the kernel's page cache behind, so a crash test cannot tell a SEND_OK that waited
for ``fdatasync`` from one that did not. This test makes the difference visible, ALICE-style (chosen
over a fault-injecting file system such as LazyFS because it needs no FUSE mount, no root and no
extra service, and because it can enumerate many crash states from one run):

1. A real broker process runs under :mod:`tests.store.sync_journal`, which journals the content of
   every file at every ``fsync``/``fdatasync`` and the listing of every directory synced.
2. Producer threads POST single messages and batches with unique bodies through the HTTP API and note
   each SEND_OK with its queue offset and the monotonic time the answer arrived. Segments are tiny,
   so CommitLog, ConsumeQueue and index files roll over many times. The first run stops cleanly
   after a second (so the checkpoint is on disk and the second run's recovery starts from it; under
   ASYNC_FLUSH it trickles for two, see :data:`ASYNC_TRICKLE_PAUSE_S`); the second adds a topic (new
   ConsumeQueue directories) and is SIGKILLed under the producers.
3. :mod:`tests.store.crash_states` builds crash states from the journal: the disk as it would be
   after a power loss just before a random sync (only synced names and synced content), half of
   them torn (unsynced pages and directory entries that reached the disk anyway), plus the last one.
4. Every state is recovered in-process by a :class:`MessageStore` and checked:

   * recovery was unclean (the abort file survived) once anything was acknowledged;
   * every message acknowledged before the power loss reads back at its queue offset with its body,
     and by its message id (under ASYNC_FLUSH: every message acknowledged before a sync of its
     CommitLog segment that the state keeps began; exact, whatever the timing);
   * every ConsumeQueue entry resolves to the record of its topic, queue and queue offset, and every
     record of the log is in its ConsumeQueue; every offset of every queue pulls;
   * no body is stored twice, and every stored body is one a producer sent;
   * a new append to every queue gets the next queue offset and reads back.

5. Under ASYNC_FLUSH the journal also shows whether the flush thread kept the README's promise (a
   power loss takes the last flush interval, never more than the thorough interval). The first sync
   whose content holds an acknowledged message's record whole began at most the thorough interval
   and one pass (:data:`ASYNC_FLUSH_BOUND_MS`) after the acknowledgement, counted in the flush
   thread's own time: the time it spent inside syncs (the disk's) and waiting for a CPU (the
   kernel's schedstat, journaled with each sync) is taken off exactly, and
   :data:`SCHEDULING_SLACK_MS` is left for the rest of a loaded machine (the GIL, the passes' own
   work). The first run trickles, so that the thorough flush is timed, not only the passes. A clean
   stop leaves every message of its run in a sync of that run; what was acknowledged after the
   flush thread's last sync before the SIGKILL is what ASYNC_FLUSH may lose, and is not timed.

The choice of crash states comes from a printed seed; ``WHARF_POWERLOSS_SEED=<seed>`` repeats it
for a journal (thread timing makes each run's journal differ). A longer hunt::

    WHARF_POWERLOSS_STATES=400 WHARF_POWERLOSS_SECONDS=20 python -m pytest tests/store/test_power_loss.py
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.store import FlushMode, GetMessageStatus, Message, MessageStore, StoreConfig, parse_message_id
from app.store.flush import AsyncFlushService
from app.store.log_walk import records_from
from app.store.record import HEAD_SIZE, CheckedRecord, check_record, message_size
from app.store.record_format import PROPERTY_UNIQ_KEY
from tests.api.server import BrokerProcess
from tests.store.crash_states import CrashState, CrashStates
from tests.store.sync_journal import (
    JOURNAL_ENV,
    FileSync,
    SyncEvent,
    SyncWait,
    journaled_processes,
    path_identity,
    read_journal,
    sync_wait,
)

STATES = int(os.environ.get("WHARF_POWERLOSS_STATES") or 24)
SECONDS = float(os.environ.get("WHARF_POWERLOSS_SECONDS") or 5)
FIRST_RUN_SECONDS = 1.0
SEED = int(os.environ.get("WHARF_POWERLOSS_SEED") or random.randrange(1 << 32))

pytestmark = [pytest.mark.crash, pytest.mark.timeout(120 + 2 * STATES + 4 * SECONDS)]

COMMITLOG_FILE_SIZE = 64 * 1024
CONSUMEQUEUE_FILE_ENTRIES = 32
MAX_HASH_SLOTS = 64
MAX_INDEX_COUNT = 512
TOPICS = ("power-a", "power-b", "power-c")  # the second run adds the third
QUEUES = 2
PRODUCERS = 3
MAX_BATCH = 8
# ASYNC_FLUSH: a CommitLog flush pass every 50 ms, everything at least every 200 ms.
ASYNC_FLUSH_INTERVAL_MS = 50
ASYNC_THOROUGH_INTERVAL_MS = 200
ASYNC_LEAST_PAGES = 4  # a pass between two thorough ones flushes only this many dirty 4 KiB pages
# The first ASYNC run trickles for two seconds: three producers 0.3 s apart write about 15 KB/s, so
# a pass finds the four pages it needs about once a second and the thorough flush is what brings
# most of their messages to disk. (The second run writes hundreds of KB/s: nearly every pass flushes.)
ASYNC_TRICKLE_PAUSE_S = 0.3
ASYNC_TRICKLE_SECONDS = 2.0
# The promise: an acknowledged message is on disk within the thorough interval. A pass decides
# whether it is thorough, so the sync that brings a message to disk begins at most one pass later.
ASYNC_FLUSH_BOUND_MS = ASYNC_THOROUGH_INTERVAL_MS + ASYNC_FLUSH_INTERVAL_MS
# What the flush thread may lose beyond the disk's time and its waits for a CPU, both taken off
# exactly: waiting for the GIL (the HTTP threads hold it, and a holder may itself wait for a CPU)
# and running its passes. On a loaded 2-core machine (load average 5-17, up to eight busy loops
# added) the longest wait was 278 ms of the thread's own time, most runs' under 210 ms. A flush
# interval ten times longer sleeps 500 ms between two passes.
SCHEDULING_SLACK_MS = 100
FLUSH_THREAD = f"wharf-{AsyncFlushService.name}"
MAX_REPORTED_FAILURES = 8


@dataclass(frozen=True, slots=True)
class Ack:
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    msg_id: str
    acked_at: float


@dataclass(slots=True)
class Workload:
    acks: list[Ack]
    sent: set[bytes]


def broker_settings(flush_mode: FlushMode, database: Path) -> dict[str, object]:
    settings: dict[str, object] = {
        "flush_mode": flush_mode.value,
        "database_url": f"sqlite:///{database}",
        "commitlog_file_size": COMMITLOG_FILE_SIZE,
        "consumequeue_file_entries": CONSUMEQUEUE_FILE_ENTRIES,
        "max_hash_slots": MAX_HASH_SLOTS,
        "max_index_count": MAX_INDEX_COUNT,
        "flush_interval_consumequeue_ms": 100,
        "flush_consumequeue_thorough_interval_ms": 500,
        "flush_interval_index_ms": 100,
        "idempotency_window_s": 0,
    }
    if flush_mode is FlushMode.ASYNC:
        settings["flush_interval_commitlog_ms"] = ASYNC_FLUSH_INTERVAL_MS
        settings["flush_commitlog_thorough_interval_ms"] = ASYNC_THOROUGH_INTERVAL_MS
        settings["flush_commitlog_least_pages"] = ASYNC_LEAST_PAGES
    return settings


def store_config(store_dir: Path, flush_mode: FlushMode) -> StoreConfig:
    return StoreConfig(
        store_dir=store_dir,
        flush_mode=flush_mode,
        commitlog_file_size=COMMITLOG_FILE_SIZE,
        consumequeue_file_entries=CONSUMEQUEUE_FILE_ENTRIES,
        max_hash_slots=MAX_HASH_SLOTS,
        max_index_count=MAX_INDEX_COUNT,
    )


def produce(
    url: str,
    name: str,
    topics: tuple[str, ...],
    seed: int,
    stop: threading.Event,
    workload: Workload,
    pause_s: float,
) -> None:
    """POST batches of unique bodies, ``pause_s`` apart, until ``stop`` or until the broker is gone."""
    rng = random.Random(seed)
    number = 0
    with httpx.Client(base_url=url, timeout=30.0) as client:
        while not stop.wait(pause_s):
            topic = rng.choice(topics)
            bodies = []
            for _ in range(1 if rng.random() < 0.5 else rng.randint(2, MAX_BATCH)):
                bodies.append(f"{name}-{number}-".ljust(rng.randint(24, 900), "x").encode())
                number += 1
            workload.sent.update(bodies)
            messages = [{"body": body.decode(), "unique_id": unique_id(body)} for body in bodies]
            try:
                response = client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
            except httpx.TransportError:
                return  # the broker was killed
            acked_at = time.monotonic()
            assert response.status_code == 200, response.text
            for body, result in zip(bodies, response.json()["results"], strict=True):
                if result["status"] == "SEND_OK":
                    workload.acks.append(
                        Ack(
                            topic,
                            result["queue_id"],
                            result["queue_offset"],
                            body,
                            result["msg_id"],
                            acked_at,
                        )
                    )


def unique_id(body: bytes) -> str:
    return body.split(b"-x")[0].decode()


def run_producers(
    broker: BrokerProcess,
    run: int,
    topics: tuple[str, ...],
    workload: Workload,
    kill: bool,
    seconds: float,
    pause_s: float = 0.0,
) -> None:
    """Create ``topics``, produce for ``seconds`` (each producer ``pause_s`` between two requests),
    then SIGKILL the broker under the producers or, when ``kill`` is false, stop the producers and
    the broker cleanly."""
    with httpx.Client(base_url=broker.url, timeout=30.0) as client:
        for topic in topics:
            response = client.post("/v1/topics", json={"name": topic, "queues": QUEUES})
            assert response.status_code in (200, 201), response.text
    stop = threading.Event()
    threads = [
        threading.Thread(
            target=produce,
            args=(broker.url, f"r{run}p{index}", topics, SEED + 100 * run + index, stop, workload, pause_s),
            daemon=True,
        )
        for index in range(PRODUCERS)
    ]
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    if kill:
        broker.kill()  # while the producers still send: some requests die unanswered
    stop.set()
    for thread in threads:
        thread.join(30)
    if not kill:
        # uvicorn shuts down cleanly on SIGTERM, then re-raises it: -SIGTERM is a clean exit.
        assert broker.stop() in (0, -signal.SIGTERM), broker.log()[-3000:]


def record_run(tmp_path: Path, flush_mode: FlushMode) -> tuple[Workload, CrashStates]:
    """Run a journaled broker twice on one store: a first run that stops cleanly (so the second
    recovers from a checkpoint that is on disk), a second that adds a topic and is SIGKILLed."""
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    journal_dir = tmp_path / "journal"
    broker = BrokerProcess(
        store_dir, module="tests.store.sync_journal", **broker_settings(flush_mode, tmp_path / "wharf.db")
    )
    broker.env[JOURNAL_ENV] = str(journal_dir)
    workload = Workload([], set())
    try:
        if flush_mode is FlushMode.ASYNC:
            first_run = {"seconds": ASYNC_TRICKLE_SECONDS, "pause_s": ASYNC_TRICKLE_PAUSE_S}
        else:
            first_run = {"seconds": FIRST_RUN_SECONDS}
        run_producers(broker.start(), 1, TOPICS[:2], workload, kill=False, **first_run)
        run_producers(broker.start(), 2, TOPICS, workload, kill=True, seconds=SECONDS)
        killed_at = time.monotonic()
    finally:
        broker.kill()
    assert workload.acks, f"the broker acknowledged nothing:\n{broker.log()[-3000:]}"
    return workload, CrashStates(read_journal(journal_dir), path_identity(store_dir), killed_at)


# -- ASYNC_FLUSH: which sync brought each acknowledged message to disk, and when ----------------


def commitlog_segment(event: SyncEvent) -> int | None:
    """The first offset of the CommitLog segment that ``event`` synced; None for any other sync."""
    path = Path(event.path)
    if not isinstance(event, FileSync) or path.parent.name != "commitlog" or not path.name.isdigit():
        return None
    return int(path.name)


def offset_of(ack: Ack) -> int:
    """The CommitLog offset of ``ack``'s record, from its message id."""
    return parse_message_id(ack.msg_id)[2]


def segment_of(ack: Ack) -> int:
    offset = offset_of(ack)
    return offset - offset % COMMITLOG_FILE_SIZE


def due_from(acks: list[Ack], events: list[SyncEvent]) -> list[int]:
    """For each ack, the fewest syncs a crash state keeps for the ack to be due: up to the first sync
    of its CommitLog segment that began after the acknowledgement (the record was whole before, so
    that sync read it whole), ``len(events) + 1`` when none did."""
    syncs: dict[int, list[tuple[float, int]]] = defaultdict(list)  # segment -> (began, index)
    for index, event in enumerate(events):
        segment = commitlog_segment(event)
        if segment is not None:
            syncs[segment].append((event.started, index))
    return [
        min(
            (index + 1 for began, index in syncs[segment_of(ack)] if began > ack.acked_at),
            default=len(events) + 1,
        )
        for ack in acks
    ]


def holds(content: bytearray, segment: int, ack: Ack) -> bool:
    """Whether ``content``, a CommitLog segment's, holds ``ack``'s record whole (CRC and all)."""
    offset = offset_of(ack)
    position = offset - segment
    if position + HEAD_SIZE > len(content):
        return False
    size = message_size(content, position)
    if size is None or position + size > len(content):
        return False
    record = check_record(content, position, offset)
    return record is not None and record.uniq_key == unique_id(ack.body)


def held_by(acks: list[Ack], events: list[SyncEvent]) -> list[int | None]:
    """For each ack, the index in ``events`` of the first sync whose journaled content holds its
    record whole (it may have begun before the answer reached the producer); None for none."""
    pending: dict[int, list[int]] = defaultdict(list)  # segment -> acks not held yet
    for number, ack in enumerate(acks):
        pending[segment_of(ack)].append(number)
    contents: dict[str, bytearray] = defaultdict(bytearray)  # by identity, as the journal's pages
    found: list[int | None] = [None] * len(acks)
    for index, event in enumerate(events):
        segment = commitlog_segment(event)
        if segment is None or not pending[segment]:
            continue
        assert isinstance(event, FileSync)
        content = contents[event.identity]
        event.apply_to(content)
        waiting = []
        for number in pending[segment]:
            if holds(content, segment, acks[number]):
                found[number] = index
            else:
                waiting.append(number)
        pending[segment] = waiting
    return found


def flush_waits(acks: list[Ack], events: list[SyncEvent], held: list[int | None]) -> list[SyncWait]:
    """The wait of every ack that the flush thread brought to disk with a sync it began after the
    acknowledgement (:func:`held_by`), from the acknowledgement to that sync."""
    waits = []
    for process in journaled_processes(events):
        flusher = [events[index] for index in process if events[index].thread == FLUSH_THREAD]
        number_of = {id(sync): number for number, sync in enumerate(flusher)}
        for ack, index in zip(acks, held, strict=True):
            number = number_of.get(id(events[index])) if index is not None and index in process else None
            # Not the flush thread's, or it began before the answer reached the producer.
            if number is not None and ack.acked_at < flusher[number].started:
                waits.append(sync_wait(ack.acked_at, flusher, number))
    return waits


def check_flush_timing(acks: list[Ack], events: list[SyncEvent], held: list[int | None]) -> str:
    """Step 5 of the module doc: every run but the last stopped cleanly with its acks on disk, and
    every timed ack waited at most the bound. A line for the log."""
    runs = journaled_processes(events)
    for number, run in enumerate(runs[:-1]):
        ended = events[runs[number + 1].start].started
        lost = [
            ack
            for ack, index in zip(acks, held, strict=True)
            if ack.acked_at < ended and (index is None or index >= run.stop)
        ]
        assert not lost, (
            f"{len(lost)} messages acknowledged in run {number + 1} are in no sync of that run, which "
            f"stopped cleanly: {lost[0].body[:20]!r} ..."
        )
    waits = flush_waits(acks, events, held)
    assert waits, "the flush thread brought nothing to disk after an acknowledgement"
    bound_s = (ASYNC_FLUSH_BOUND_MS + SCHEDULING_SLACK_MS) / 1000
    late = sum(wait.own_s > bound_s for wait in waits)
    worst = max(waits, key=lambda wait: wait.own_s)
    assert not late, (
        f"{late} of {len(waits)} timed acknowledgements waited longer than {ASYNC_FLUSH_BOUND_MS} + "
        f"{SCHEDULING_SLACK_MS} ms for their flush; the longest {worst.describe()}"
    )
    return f"{len(waits)} acknowledgements timed; the longest waited {worst.describe()}"


# -- checks ----------------------------------------------------------------------------------------


def check_state(store: MessageStore, state: CrashState, workload: Workload, required: list[Ack]) -> None:
    if required:
        assert store.recovery is not None and not store.recovery.clean, (
            "recovery took the clean path: the abort file did not survive the power loss"
        )
    records = check_log(store, workload)
    check_acknowledged(store, required)
    check_consume_queues(store, records)
    check_new_appends(store)


def check_log(store: MessageStore, workload: Workload) -> dict[int, CheckedRecord]:
    """Every record of the log reads back by its offset, was sent, and is stored once."""
    commitlog = store.commitlog
    records: dict[int, CheckedRecord] = {}
    bodies: dict[bytes, int] = {}
    for physical_offset, record in records_from(commitlog, commitlog.min_offset):
        message = store.look_message(physical_offset)
        assert message is not None, f"the record at {physical_offset} is not readable by its offset"
        assert message.body in workload.sent, f"the record at {physical_offset} holds a body nobody sent"
        assert message.body not in bodies, (
            f"{message.body[:20]!r} is stored twice: at {bodies[message.body]} and {physical_offset}"
        )
        bodies[message.body] = physical_offset
        records[physical_offset] = record
    return records


def check_acknowledged(store: MessageStore, required: list[Ack]) -> None:
    for ack in required:
        messages = store.read_messages(ack.topic, ack.queue_id, ack.queue_offset, 1)
        assert messages and messages[0].body == ack.body, (
            f"acknowledged {ack.body[:20]!r} ({ack.topic}/{ack.queue_id} offset {ack.queue_offset}) is "
            f"lost: the queue holds {store.min_offset(ack.topic, ack.queue_id)}.."
            f"{store.max_offset(ack.topic, ack.queue_id)}"
        )
        # The id names the broker that stored it: the runs listened on other ports than this store's
        # configuration names, so the record is looked up at the id's offset.
        _, _, physical_offset = parse_message_id(ack.msg_id)
        by_id = store.look_message(physical_offset)
        assert by_id is not None and by_id.body == ack.body, f"{ack.msg_id} does not name {ack.body[:20]!r}"
        assert messages[0].properties.get(PROPERTY_UNIQ_KEY) == unique_id(ack.body)


def check_consume_queues(store: MessageStore, records: dict[int, CheckedRecord]) -> None:
    """Every entry resolves to its own record, every record is in its queue, every offset pulls."""
    indexed: set[int] = set()
    for (topic, queue_id), queue in store.consume_queues.items():
        count = 0
        for queue_offset, physical_offset, size, _ in queue.iter_entries(queue.min_offset):
            record = records.get(physical_offset)
            if record is None:
                raise AssertionError(
                    f"{topic}/{queue_id} entry {queue_offset} points at {physical_offset}, which is not a "
                    f"valid record of the log (the log ends at {store.commitlog.max_offset})"
                )
            if (record.topic, record.queue_id, record.queue_offset, record.size) != (
                topic,
                queue_id,
                queue_offset,
                size,
            ):
                raise AssertionError(
                    f"{topic}/{queue_id} entry {queue_offset} ({physical_offset}, {size} B) does not match the "
                    f"record there"
                )
            indexed.add(physical_offset)
            count += 1
        assert count == queue.max_offset - queue.min_offset, (
            f"{topic}/{queue_id} has {count} entries between {queue.min_offset} and {queue.max_offset}"
        )
        offset = queue.min_offset
        while offset < queue.max_offset:
            result = store.get_message(topic, queue_id, offset, max_messages=32)
            assert result.status is GetMessageStatus.FOUND, f"{topic}/{queue_id} at {offset}: {result.status}"
            assert result.queue_offsets == list(range(offset, offset + len(result.records)))
            offset = result.next_offset
    unindexed = sorted(set(records) - indexed)
    assert not unindexed, f"records of the log that no ConsumeQueue points at: {unindexed[:10]}"


def check_new_appends(store: MessageStore) -> None:
    """A message appended to any queue after recovery gets the next offset and reads back."""
    for topic in TOPICS:
        for queue_id in range(QUEUES):
            before = store.max_offset(topic, queue_id)
            body = f"after-recovery-{topic}-{queue_id}".encode()
            (result,) = store.put([Message(topic, body, queue_id)])
            assert result.queue_offset == before, (
                f"{topic}/{queue_id}: a new message got offset {result.queue_offset}, the queue ended at {before}"
            )
            again = store.read_messages(topic, queue_id, before, 1)
            assert again and again[0].body == body, f"{topic}/{queue_id}: the new message does not read back"


def check_every_state(
    tmp_path: Path,
    flush_mode: FlushMode,
    workload: Workload,
    states: CrashStates,
    required: Callable[[CrashState], list[Ack]],
) -> int:
    """Build, recover and check the crash states; fail with every broken one. Returns how many ran."""
    rng = random.Random(SEED)
    cuts = sorted(rng.randrange(1, len(states) + 1) for _ in range(STATES))
    plan = [(cut, rng.random() < 0.5) for cut in cuts] + [(len(states), False), (len(states), True)]
    failures: list[str] = []
    for number, (cut, torn) in enumerate(plan):
        # Recovery changes the files: it runs on a copy, and a failing state keeps what was built.
        built = tmp_path / "states" / f"{number:04d}"
        recovered = built.with_name(f"{built.name}-recovered")
        state = states.build(cut, built, random.Random(rng.random()) if torn else None)
        shutil.copytree(built, recovered)
        needed = required(state)
        try:
            store = MessageStore(store_config(recovered, flush_mode)).open()
            try:
                check_state(store, state, workload, needed)
            finally:
                store.close()
        except Exception as exc:  # every broken state is reported, not only the first
            reason = (str(exc).splitlines() or [""])[0]
            failures.append(
                f"state {number} ({state.describe()}; {len(needed)} acks due) built in {built}:\n"
                f"  {type(exc).__name__}: {reason}"
            )
            continue
        shutil.rmtree(built)
        shutil.rmtree(recovered)
    assert not failures, (
        f"{len(failures)} of {len(plan)} crash states failed (WHARF_POWERLOSS_SEED={SEED}, {len(states)} syncs, "
        f"{len(workload.acks)} acks):\n" + "\n".join(failures[:MAX_REPORTED_FAILURES])
    )
    return len(plan)


def test_every_send_ok_under_sync_flush_survives_a_power_loss(tmp_path: Path) -> None:
    print(f"WHARF_POWERLOSS_SEED={SEED}")
    workload, states = record_run(tmp_path, FlushMode.SYNC)
    checked = check_every_state(
        tmp_path,
        FlushMode.SYNC,
        workload,
        states,
        lambda state: [ack for ack in workload.acks if ack.acked_at < state.lost_at],
    )
    print(f"{checked} crash states of {len(states)} syncs, {len(workload.acks)} acks: all recovered")


def test_async_flush_loses_at_most_the_flush_interval(tmp_path: Path) -> None:
    print(f"WHARF_POWERLOSS_SEED={SEED}")
    workload, states = record_run(tmp_path, FlushMode.ASYNC)
    print(check_flush_timing(workload.acks, states.events, held_by(workload.acks, states.events)))
    due = due_from(workload.acks, states.events)
    checked = check_every_state(
        tmp_path,
        FlushMode.ASYNC,
        workload,
        states,
        lambda state: [ack for ack, cut in zip(workload.acks, due, strict=True) if cut <= state.cut],
    )
    print(f"{checked} crash states of {len(states)} syncs, {len(workload.acks)} acks: all recovered")
