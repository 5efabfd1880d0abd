"""Recovery as a property: whatever state a crash leaves, the ConsumeQueues agree with the log.

Hypothesis builds store states the way crashes and lost pages leave them: the CommitLog's tail cut,
zeroed or overwritten with garbage (later segments gone), ConsumeQueues ahead of the log (their pages
reached the disk, the log's did not) or behind it (theirs did not, and the checkpoint says so), a
stale or missing checkpoint, the abort file present or lost (a crashed run has cleared the clean
stop's end from the checkpoint, so it still walks), or a clean stop (which flushed everything, so only
the checkpoint may be stale or missing). After recovery:

* every message whose record survived is served at its queue offset, byte for byte, and nothing else
  is: no entry resolves to another record, no read fails;
* new messages get the queue offsets that follow, and are read back;
* a lost message is not found by its unique id.

``WHARF_RECOVERY_EXAMPLES`` sets how many states are tried (default 60, derandomized so that CI
runs the same states every time; with ``WHARF_RECOVERY_RANDOM=1`` each run draws new ones).
"""

from __future__ import annotations

import os
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.store import AppendResult, GetMessageStatus, Message, MessageStore, StoreConfig, decode_record
from app.store.checkpoint import NO_CLEAN_END, Checkpoint
from app.store.consume_queue import UNIT
from app.store.mapped_file import segment_name

FILE_SIZE = 4096
CQ_ENTRIES = 8
TOPICS = ("orders", "audit")
QUEUES = 3
HOUR_MS = 3_600_000

EXAMPLES = int(os.environ.get("WHARF_RECOVERY_EXAMPLES", "60"))
RANDOM = os.environ.get("WHARF_RECOVERY_RANDOM") == "1"


def config(store_dir: Path) -> StoreConfig:
    return StoreConfig(
        store_dir=store_dir,
        commitlog_file_size=FILE_SIZE,
        consumequeue_file_entries=CQ_ENTRIES,
        max_hash_slots=64,
        max_index_count=512,
        flush_interval_consumequeue_ms=HOUR_MS,
    )


@dataclass(frozen=True, slots=True)
class Written:
    message: Message
    result: AppendResult

    @property
    def key(self) -> tuple[str, int]:
        return self.message.topic, self.message.queue_id


@dataclass(frozen=True, slots=True)
class CrashState:
    """What to do to a closed store's files before it is opened again."""

    messages: int
    seed: int
    batch: int
    tail: str  # "none", "zero", "garbage"
    cut_at: float  # where in the log the tail damage starts, as a share of its length
    queues_behind: dict[int, int]  # queue number (topic x queue) -> entries lost from its tail
    checkpoint: str  # "kept", "stale", "missing"
    shutdown: str  # "clean", "crash", "crash, abort file lost"

    @property
    def crashed(self) -> bool:
        return self.shutdown != "clean"


crash_states = st.builds(
    CrashState,
    messages=st.integers(1, 90),
    seed=st.integers(0, 2**16),
    batch=st.integers(1, 5),
    tail=st.sampled_from(["none", "zero", "garbage"]),
    cut_at=st.floats(0.0, 1.0),
    queues_behind=st.dictionaries(st.integers(0, len(TOPICS) * QUEUES - 1), st.integers(1, 12), max_size=3),
    checkpoint=st.sampled_from(["kept", "stale", "missing"]),
    shutdown=st.sampled_from(["clean", "crash", "crash, abort file lost"]),
)


def make_messages(state: CrashState) -> list[Message]:
    rng = random.Random(state.seed)
    messages = []
    for n in range(state.messages):
        body = b"m%05d-" % n + rng.randbytes(rng.randrange(1, 300))
        messages.append(
            Message(
                rng.choice(TOPICS),
                body,
                queue_id=rng.randrange(QUEUES),
                properties={"UNIQ_KEY": f"u{state.seed}-{n}", "TAGS": f"Tag{n % 2}"},
            )
        )
    return messages


def write_store(store_dir: Path, state: CrashState) -> list[Written]:
    messages = make_messages(state)
    written: list[Written] = []
    with MessageStore(config(store_dir)) as store:
        for start in range(0, len(messages), state.batch):
            batch = messages[start : start + state.batch]
            written += [Written(m, r) for m, r in zip(batch, store.put(batch), strict=True)]
    return written


def damage_tail(store_dir: Path, state: CrashState, end: int) -> int:
    """Damage the log from a point on; returns the new end of valid data (records before it)."""
    if state.tail == "none" or end == 0 or not state.crashed:
        return end
    cut = min(int(end * state.cut_at), end - 1)
    rng = random.Random(state.seed ^ 0x5A5A)
    segments = sorted((store_dir / "commitlog").iterdir())
    for path in segments:
        base = int(path.name)
        if base > cut:
            path.unlink()  # whole later segments never reached the disk
            continue
        if base + FILE_SIZE <= cut:
            continue
        data = bytearray(path.read_bytes())
        local = cut - base
        if state.tail == "zero":
            data[local:] = bytes(FILE_SIZE - local)
        else:
            garbage_end = min(FILE_SIZE, local + rng.randrange(1, 600))
            data[local:garbage_end] = rng.randbytes(garbage_end - local)
            data[garbage_end:] = bytes(FILE_SIZE - garbage_end)
        path.write_bytes(bytes(data))
    return cut


def queue_keys() -> list[tuple[str, int]]:
    return [(topic, queue_id) for topic in TOPICS for queue_id in range(QUEUES)]


def drop_queue_tails(store_dir: Path, state: CrashState, written: list[Written]) -> Written | None:
    """Zero the last entries of some ConsumeQueues (their pages never reached the disk); returns the
    oldest message whose entry was lost, which the checkpoint must not pass."""
    oldest: Written | None = None
    if not state.crashed:
        return None
    for number, lost in state.queues_behind.items():
        key = queue_keys()[number]
        mine = [w for w in written if w.key == key]
        if not mine:
            continue
        kept = max(0, len(mine) - lost)
        if state.shutdown == "crash, abort file lost":
            # Without the abort file the checkpoint's timestamps are not consulted: only entries of
            # the last segments, the ones normal recovery walks, are taken to be missing.
            segments = sorted(int(p.name) for p in (store_dir / "commitlog").iterdir())
            walked_from = segments[max(0, len(segments) - 3)] if segments else 0
            while kept < len(mine) and mine[kept].result.physical_offset < walked_from:
                kept += 1
        if kept == len(mine):
            continue
        directory = store_dir / "consumequeue" / key[0] / str(key[1])
        for path in sorted(directory.iterdir()):
            base = int(path.name) // UNIT.size
            data = bytearray(path.read_bytes())
            start = max(0, kept - base) * UNIT.size
            if start < len(data):
                data[start:] = bytes(len(data) - start)
                path.write_bytes(bytes(data))
        first_lost = mine[kept]
        if oldest is None or first_lost.result.physical_offset < oldest.result.physical_offset:
            oldest = first_lost
    return oldest


def set_checkpoint(
    store_dir: Path, state: CrashState, written: list[Written], valid_end: int, lost: Written | None
) -> None:
    path = store_dir / "checkpoint"
    if state.checkpoint == "missing":
        path.unlink(missing_ok=True)
        return
    checkpoint = Checkpoint(path)
    if state.checkpoint == "stale":
        checkpoint.commitlog_timestamp = checkpoint.consumequeue_timestamp = written[0].result.store_timestamp
        checkpoint.commitlog_offset = checkpoint.consumequeue_offset = 0
    if state.crashed:
        # The run that crashed cleared the clean stop's end when it started, and its checkpoints
        # named a record boundary that had reached the disk: some boundary before the lost tail.
        checkpoint.clean_last_record = NO_CLEAN_END
        if state.checkpoint == "kept":
            boundaries = [0] + [w.result.end_offset for w in written if w.result.end_offset <= valid_end]
            boundary = random.Random(state.seed).choice(boundaries)
            checkpoint.commitlog_offset = checkpoint.consumequeue_offset = boundary
            checkpoint.commitlog_timestamp = checkpoint.consumequeue_timestamp = max(
                [w.result.store_timestamp for w in written if w.result.end_offset <= boundary], default=0
            )
    if lost is not None:
        # The ConsumeQueue flush that would have covered the lost entries never finished.
        checkpoint.consumequeue_timestamp = min(
            checkpoint.consumequeue_timestamp, lost.result.store_timestamp - 1
        )
        checkpoint.consumequeue_offset = min(checkpoint.consumequeue_offset, lost.result.physical_offset)
    checkpoint.flush()


def read_all(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, bytes]]:
    """(queue offset, body) of every message served from the queue's min to its max offset."""
    served: list[tuple[int, bytes]] = []
    offset, max_offset = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    while offset < max_offset:
        result = store.get_message(topic, queue_id, offset, 32)
        assert result.status in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE), result.status
        assert result.next_offset > offset, "a read must make progress"
        for queue_offset, raw in zip(result.queue_offsets, result.records, strict=True):
            message = decode_record(raw, check_crc=True)
            assert (message.topic, message.queue_id, message.queue_offset) == (topic, queue_id, queue_offset)
            served.append((queue_offset, bytes(message.body)))
        offset = result.next_offset
    return served


def assert_entries_resolve(store: MessageStore) -> None:
    """Every entry of every queue names a whole record of that queue and offset."""
    for (topic, queue_id), queue in store.consume_queues.items():
        for queue_offset, physical_offset, size, _ in queue.iter_entries(queue.min_offset):
            raw = store.commitlog.read(physical_offset, size)
            assert raw is not None, f"{topic}/{queue_id}@{queue_offset} points past the log"
            message = decode_record(raw, check_crc=True)
            assert (message.topic, message.queue_id, message.queue_offset) == (topic, queue_id, queue_offset)


def check_recovered(store_dir: Path, written: list[Written], valid_end: int) -> None:
    survivors = [w for w in written if w.result.end_offset <= valid_end]
    lost = [w for w in written if w.result.end_offset > valid_end]
    with MessageStore(config(store_dir)) as store:
        assert store.commitlog.max_offset == (survivors[-1].result.end_offset if survivors else 0) or (
            # A log whose last surviving record is followed by a blank ends at its segment's end.
            survivors and store.commitlog.max_offset % FILE_SIZE == 0
        )
        assert_entries_resolve(store)
        for topic, queue_id in queue_keys():
            expected = [
                (w.result.queue_offset, w.message.body) for w in survivors if w.key == (topic, queue_id)
            ]
            assert read_all(store, topic, queue_id) == expected, f"{topic}/{queue_id}"
        for w in lost:
            found = store.query_message_by_unique_id(w.message.topic, w.message.properties["UNIQ_KEY"])
            assert found is None, f"lost message {w.message.properties['UNIQ_KEY']} found by its unique id"
        # New messages continue every queue's offsets and are served.
        fresh = [
            Message(topic, b"after-%s-%d" % (topic.encode(), q), queue_id=q) for topic, q in queue_keys()
        ]
        for message, result in zip(fresh, store.put(fresh), strict=True):
            count = sum(1 for w in survivors if w.key == (message.topic, message.queue_id))
            assert result.queue_offset == count, f"{message.topic}/{message.queue_id} did not continue"
            served = read_all(store, message.topic, message.queue_id)
            assert served[-1] == (count, message.body)
        assert_entries_resolve(store)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not RANDOM,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(state=crash_states)
def test_recovery_serves_exactly_what_survived(state: CrashState) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store_dir = Path(tmp) / "store"
        written = write_store(store_dir, state)
        end = written[-1].result.end_offset
        valid_end = damage_tail(store_dir, state, end)
        lost = drop_queue_tails(store_dir, state, written)
        set_checkpoint(store_dir, state, written, valid_end, lost)
        if state.shutdown == "crash":
            (store_dir / "abort").touch()
        check_recovered(store_dir, written, valid_end)


def test_the_states_include_queues_ahead_of_and_behind_the_log() -> None:
    """A guard on the generator itself: the interesting states are reachable."""
    kinds: dict[str, Any] = {}
    state = CrashState(60, 7, 2, "zero", 0.5, {0: 5}, "kept", "crash")
    with tempfile.TemporaryDirectory() as tmp:
        store_dir = Path(tmp) / "store"
        written = write_store(store_dir, state)
        end = written[-1].result.end_offset
        valid_end = damage_tail(store_dir, state, end)
        kinds["ahead"] = any(w.result.end_offset > valid_end for w in written)
        kinds["behind"] = drop_queue_tails(store_dir, state, written) is not None
        assert (store_dir / "commitlog" / segment_name(0)).exists()
    assert kinds == {"ahead": True, "behind": True}
