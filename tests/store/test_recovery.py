"""Recovery (SPEC 1.8) from damage made by hand: torn and corrupt records, garbage after the end of
the log, crash windows at roll-over, lost or damaged ConsumeQueues, ConsumeQueues that run past the
log, where the recovery walk starts, and segments of the wrong size.

A store is written and closed, its files are damaged the way a crash or a power failure leaves them,
and the store is reopened. "Unclean" states are made honestly: either by copying the directory of a
store that is still open (:func:`crash_image`, exactly what a killed process leaves behind) or by
leaving an abort file next to data that all reached the disk (a crash right after the last flush).
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.store import (
    AppendResult,
    GetMessageStatus,
    Message,
    MessageStore,
    StoreConfig,
    StoreConfigError,
    StoredMessage,
    decode_record,
)
from app.store import commit_log as commit_log_module
from app.store.checkpoint import NO_CLEAN_END, RECOVERY_MARGIN_MS, Checkpoint
from app.store.consume_queue import UNIT
from app.store.mapped_file import MappedFile, segment_name
from app.store.record_format import (
    BLANK_MAGIC,
    BLANK_MIN_SIZE,
    MESSAGE_MAGIC,
    OFFSETS,
    POS_BODY,
    POS_QUEUEOFFSET,
    SCHEDULE_TOPIC,
    SIZE_MAGIC,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    tags_hash,
)

FILE_SIZE = 4096
CQ_ENTRIES = 8
TOPIC = "orders"
OTHER_TOPIC = "audit"
QUEUES = 3
HOUR_MS = 3_600_000


def config(store_dir: Path, **overrides: Any) -> StoreConfig:
    values: dict[str, Any] = {
        "store_dir": store_dir,
        "commitlog_file_size": FILE_SIZE,
        "consumequeue_file_entries": CQ_ENTRIES,
        # A small message index: the default one takes 420 MB of disk.
        "max_hash_slots": 64,
        "max_index_count": 512,
        # No background checkpoint while a test runs: recovery starts where the test says.
        "flush_interval_consumequeue_ms": HOUR_MS,
    }
    values.update(overrides)
    return StoreConfig(**values)


@pytest.fixture
def open_store() -> Iterator[Callable[..., MessageStore]]:
    """``open_store(store_dir, **config_overrides)``: open a store; stores left open are closed."""
    stores: list[MessageStore] = []

    def opener(store_dir: Path, **overrides: Any) -> MessageStore:
        store = MessageStore(config(store_dir, **overrides))
        stores.append(store)
        return store.open()

    yield opener
    for store in reversed(stores):
        store.close()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@dataclass(frozen=True, slots=True)
class Written:
    message: Message
    result: AppendResult


def make_message(n: int, *, properties: bool = True, topic: str = TOPIC) -> Message:
    size = 20 + (n * 37) % 180
    body = b"m%05d-" % n + bytes((n * 7 + i) % 251 for i in range(size))
    props = {"UNIQ_KEY": f"u{n}", "TAGS": f"Tag{n % 2}"} if properties else {}
    return Message(topic, body, queue_id=n % QUEUES, properties=props)


def write(store: MessageStore, count: int, start: int = 0, **kwargs: Any) -> list[Written]:
    written = []
    for n in range(start, start + count):
        message = make_message(n, **kwargs)
        (result,) = store.put([message])
        written.append(Written(message, result))
    return written


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[StoredMessage]:
    messages: list[StoredMessage] = []
    offset, max_offset = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    while offset < max_offset:
        result = store.get_message(topic, queue_id, offset)
        assert result.status is GetMessageStatus.FOUND, f"{topic}/{queue_id} at {offset}: {result.status}"
        messages.extend(decode_record(raw, check_crc=True) for raw in result.records)
        offset = result.next_offset
    return messages


def assert_holds_exactly(store: MessageStore, written: list[Written]) -> None:
    """Every queue holds exactly ``written``, in order, from offset 0, readable by physical offset too."""
    topics = {w.message.topic for w in written} | {TOPIC}
    for topic in topics:
        for queue_id in range(QUEUES):
            expected = [w for w in written if (w.message.topic, w.message.queue_id) == (topic, queue_id)]
            stored = read_queue(store, topic, queue_id)
            assert store.max_offset(topic, queue_id) == len(expected)
            assert [m.body for m in stored] == [w.message.body for w in expected]
            assert [m.queue_offset for m in stored] == list(range(len(expected)))
            assert [m.physical_offset for m in stored] == [w.result.physical_offset for w in expected]
            assert [m.properties for m in stored] == [w.message.properties for w in expected]
    for w in written:
        found = store.look_message(w.result.physical_offset)
        assert found is not None and found.body == w.message.body


def assert_appends_continue(store: MessageStore, written: list[Written], start: int) -> list[Written]:
    """Append one message per queue: each gets its queue's next offset and lands at the log's end."""
    counts = {
        q: sum(1 for w in written if w.message.queue_id == q and w.message.topic == TOPIC)
        for q in range(QUEUES)
    }
    end = store.commitlog.max_offset
    added = write(store, QUEUES, start=start)
    for w in added:
        assert w.result.queue_offset == counts[w.message.queue_id]
        position = end % FILE_SIZE
        if position + w.result.size + BLANK_MIN_SIZE > FILE_SIZE:
            end += FILE_SIZE - position
        assert w.result.physical_offset == end
        end += w.result.size
    return added


def segment_path(store_dir: Path, physical_offset: int) -> Path:
    return store_dir / "commitlog" / segment_name(physical_offset - physical_offset % FILE_SIZE)


def read_at(store_dir: Path, physical_offset: int, size: int) -> bytes:
    with segment_path(store_dir, physical_offset).open("rb") as f:
        f.seek(physical_offset % FILE_SIZE)
        return f.read(size)


def write_at(store_dir: Path, physical_offset: int, data: bytes) -> None:
    assert physical_offset % FILE_SIZE + len(data) <= FILE_SIZE, "damage must stay inside one segment"
    with segment_path(store_dir, physical_offset).open("r+b") as f:
        f.seek(physical_offset % FILE_SIZE)
        f.write(data)


def zero_from(store_dir: Path, physical_offset: int) -> None:
    """Zero the log from ``physical_offset`` to the end of its segment and delete every later segment."""
    write_at(store_dir, physical_offset, bytes(FILE_SIZE - physical_offset % FILE_SIZE))
    for path in (store_dir / "commitlog").iterdir():
        if int(path.name.split(".")[0]) > physical_offset:  # a spare allocated ahead goes too
            path.unlink()


def tail_is_zero(store_dir: Path, end: int) -> bool:
    path = segment_path(store_dir, end)
    if not path.exists():
        return True
    return read_at(store_dir, end, FILE_SIZE - end % FILE_SIZE) == bytes(FILE_SIZE - end % FILE_SIZE)


def lose_abort_file(store_dir: Path) -> None:
    """A crash whose abort file is gone: the checkpoint still says the store was running (a start
    clears the clean stop's end from it before it creates the abort file)."""
    checkpoint = Checkpoint(store_dir / "checkpoint")
    checkpoint.clean_last_record = NO_CLEAN_END
    checkpoint.flush()


def leave_abort_file(store_dir: Path) -> None:
    """A crash: the data of a clean stop (or damaged by the test), plus the abort file, and the
    checkpoint of a run that was still going: no clean end, and no record boundary known to be on
    disk (the damage a test makes is past the last one the run had forced)."""
    (store_dir / "abort").touch()
    checkpoint = Checkpoint(store_dir / "checkpoint")
    checkpoint.clean_last_record = NO_CLEAN_END
    checkpoint.commitlog_offset = checkpoint.consumequeue_offset = 0
    checkpoint.flush()


def crash_image(store: MessageStore, destination: Path) -> Path:
    """Copy the directory of an open store: what a process killed at this moment leaves behind.

    The segments are shared mappings, so reading the files sees every byte the process wrote,
    flushed or not, as the page cache holds them after SIGKILL; the abort file is there because
    the store is open.
    """
    shutil.copytree(store.config.store_dir, destination)
    return destination


def consume_queue_entries(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    queue = store.queue(topic, queue_id)
    assert queue is not None
    return [entry[1:] for entry in queue.iter_entries(queue.min_offset)]


def cq_segments(store_dir: Path, topic: str, queue_id: int) -> list[Path]:
    directory = store_dir / "consumequeue" / topic / str(queue_id)
    return sorted(directory.iterdir()) if directory.is_dir() else []


def commitlog_segments(store_dir: Path) -> list[Path]:
    return sorted((store_dir / "commitlog").iterdir())


def fill_segments(store: MessageStore, segments: int, **kwargs: Any) -> list[Written]:
    """Write until the log spans ``segments`` segments and the last one holds a few records."""
    written: list[Written] = []
    while True:
        written += write(store, 1, start=len(written), **kwargs)
        if written[-1].result.physical_offset >= (segments - 1) * FILE_SIZE + 3 * 250:
            return written


# -- 1. a damaged record near the end of the log ------------------------------------------------


def flip_body_byte(store_dir: Path, victim: AppendResult) -> None:
    at = victim.physical_offset + POS_BODY + 2
    write_at(store_dir, at, bytes([read_at(store_dir, at, 1)[0] ^ 0xFF]))


def unpatched_offsets(store_dir: Path, victim: AppendResult) -> None:
    # The record was copied in, but the process died before its offsets were patched.
    write_at(store_dir, victim.physical_offset + POS_QUEUEOFFSET, OFFSETS.pack(-1, -1))


def torn_tail(count: int) -> Callable[[Path, AppendResult], None]:
    def damage(store_dir: Path, victim: AppendResult) -> None:
        at = victim.physical_offset + victim.size - count
        assert read_at(store_dir, at, count) != bytes(count), "the damage must change the record"
        write_at(store_dir, at, bytes(count))

    return damage


def torn_second_half(store_dir: Path, victim: AppendResult) -> None:
    half = victim.size // 2
    write_at(store_dir, victim.physical_offset + half, bytes(victim.size - half))


DAMAGE = {
    "flipped body byte": (flip_body_byte, True),
    "offsets never patched": (unpatched_offsets, True),
    "last byte torn": (torn_tail(1), True),
    "last 7 bytes torn": (torn_tail(7), True),
    "second half torn": (torn_second_half, True),
    # Without properties the record ends in its topic and a zero properties length: tearing the last
    # 4 bytes zeroes the end of the topic name.
    "topic tail torn, no properties": (torn_tail(4), False),
}


@pytest.mark.parametrize("shutdown", ["abort file lost", "crash"])
@pytest.mark.parametrize("damage_name", list(DAMAGE))
def test_damaged_record_and_everything_after_it_are_cut(
    open_store: Callable[..., MessageStore], store_dir: Path, damage_name: str, shutdown: str
) -> None:
    damage, properties = DAMAGE[damage_name]
    store = open_store(store_dir)
    written = fill_segments(store, 4, properties=properties)
    store.close()
    victim = written[-3].result
    damage(store_dir, victim)
    if shutdown == "crash":
        leave_abort_file(store_dir)
    else:
        lose_abort_file(store_dir)

    store = open_store(store_dir)
    assert store.recovery is not None
    assert store.recovery.clean is (shutdown != "crash")
    assert store.recovery.end_offset == store.commitlog.max_offset == victim.physical_offset
    assert tail_is_zero(store_dir, victim.physical_offset), "the cut-off bytes were not zeroed"
    survivors = written[:-3]
    assert_holds_exactly(store, survivors)
    for w in written[-3:]:
        assert store.look_message(w.result.physical_offset) is None
    added = assert_appends_continue(store, survivors, start=len(written))
    assert_holds_exactly(store, survivors + added)
    end = store.commitlog.max_offset
    store.close()

    store = open_store(store_dir)
    assert store.recovery is not None and store.recovery.clean
    assert store.recovery.end_offset == end
    assert_holds_exactly(store, survivors + added)


def test_garbage_after_the_end_is_ignored_and_zeroed(
    open_store: Callable[..., MessageStore], store_dir: Path
) -> None:
    store = open_store(store_dir)
    written = fill_segments(store, 2)
    end = store.commitlog.max_offset
    store.close()
    garbage = random.Random(7).randbytes(300)
    assert SIZE_MAGIC.unpack_from(garbage)[1] not in (BLANK_MAGIC, MESSAGE_MAGIC)
    write_at(store_dir, end, garbage)

    store = open_store(store_dir)
    assert store.recovery is not None and store.recovery.end_offset == end
    assert tail_is_zero(store_dir, end)
    assert_holds_exactly(store, written)
    added = assert_appends_continue(store, written, start=len(written))
    store.close()

    store = open_store(store_dir)
    assert_holds_exactly(store, written + added)


def test_stale_copy_of_an_earlier_record_after_the_end_is_not_revived(
    open_store: Callable[..., MessageStore], store_dir: Path
) -> None:
    # A valid-looking record in the wrong place: its physical offset field names where it came from.
    store = open_store(store_dir)
    written = fill_segments(store, 2)
    end = store.commitlog.max_offset
    store.close()
    stale = written[-1].result
    write_at(store_dir, end, read_at(store_dir, stale.physical_offset, stale.size))

    store = open_store(store_dir)
    assert store.recovery is not None and store.recovery.end_offset == end
    assert_holds_exactly(store, written)
    assert store.look_message(end) is None


# -- crash windows at roll-over --------------------------------------------------------------------


def roll_over_window(store_dir: Path, end: int, next_segment_bytes: int | None) -> int:
    """Leave what a crash during roll-over leaves: the blank filler, and maybe the next segment file."""
    remaining = FILE_SIZE - end % FILE_SIZE
    write_at(store_dir, end, SIZE_MAGIC.pack(remaining, BLANK_MAGIC))
    next_start = end + remaining
    if next_segment_bytes is not None:
        path = store_dir / "commitlog" / segment_name(next_start)
        with path.open("wb") as f:
            f.truncate(next_segment_bytes)
    return next_start


@pytest.mark.parametrize(
    "next_segment_bytes",
    [None, FILE_SIZE, 0],
    ids=["blank written, no next segment", "next segment created", "next segment not yet sized"],
)
def test_crash_during_roll_over_recovers_at_the_next_segment(
    open_store: Callable[..., MessageStore], store_dir: Path, next_segment_bytes: int | None
) -> None:
    store = open_store(store_dir)
    written = fill_segments(store, 2)
    end = store.commitlog.max_offset
    store.close()
    next_start = roll_over_window(store_dir, end, next_segment_bytes)
    leave_abort_file(store_dir)

    store = open_store(store_dir)
    assert store.recovery is not None and store.recovery.end_offset == next_start
    assert_holds_exactly(store, written)
    added = assert_appends_continue(store, written, start=len(written))
    assert added[0].result.physical_offset == next_start
    store.close()

    store = open_store(store_dir)
    assert_holds_exactly(store, written + added)


# -- 2. unclean recovery rebuilds the ConsumeQueues -------------------------------------------------


def write_two_topics(store: MessageStore) -> list[Written]:
    written = []
    for n in range(90):
        topic = OTHER_TOPIC if n % 5 == 0 else TOPIC
        written += write(store, 1, start=n, topic=topic)
    return written


def all_entries(store: MessageStore) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    return {key: consume_queue_entries(store, *key) for key in sorted(store.consume_queues)}


def test_crash_image_is_recovered_uncleanly(
    open_store: Callable[..., MessageStore], tmp_path: Path, store_dir: Path
) -> None:
    store = open_store(store_dir)
    written = write_two_topics(store)
    image = crash_image(store, tmp_path / "image")
    store.close()
    assert (image / "abort").exists()

    recovered = open_store(image)
    report = recovered.recovery
    assert report is not None and not report.clean
    assert report.start_offset == 0  # no checkpoint yet: the whole log is walked
    assert report.records_checked == len(written)
    assert report.records_redispatched == 0  # the ConsumeQueues held every entry already
    assert report.end_offset == written[-1].result.end_offset
    assert_holds_exactly(recovered, written)
    assert_appends_continue(recovered, written, start=len(written))


def test_lost_consume_queues_are_rebuilt_from_the_commitlog(
    open_store: Callable[..., MessageStore], tmp_path: Path, store_dir: Path
) -> None:
    store = open_store(store_dir)
    written = write_two_topics(store)
    entries = all_entries(store)
    image = crash_image(store, tmp_path / "image")
    store.close()
    shutil.rmtree(image / "consumequeue" / TOPIC / "1")
    shutil.rmtree(image / "consumequeue" / OTHER_TOPIC)

    recovered = open_store(image)
    assert all_entries(recovered) == entries
    assert_holds_exactly(recovered, written)
    assert_appends_continue(recovered, written, start=len(written))


def test_damaged_consume_queue_entries_are_rebuilt_from_the_commitlog(
    open_store: Callable[..., MessageStore], tmp_path: Path, store_dir: Path
) -> None:
    store = open_store(store_dir)
    written = write_two_topics(store)
    entries = all_entries(store)
    image = crash_image(store, tmp_path / "image")
    store.close()
    # Queue 0: an entry in the middle of its last segment never reached the disk.
    last = cq_segments(image, TOPIC, 0)[-1]
    with last.open("r+b") as f:
        f.seek(UNIT.size)
        f.write(bytes(UNIT.size))
    # Queue 2: its last segment file is gone.
    segments = cq_segments(image, TOPIC, 2)
    assert len(segments) > 1
    segments[-1].unlink()

    recovered = open_store(image)
    assert all_entries(recovered) == entries
    assert_holds_exactly(recovered, written)
    added = assert_appends_continue(recovered, written, start=len(written))
    recovered.close()

    again = open_store(image)
    assert again.recovery is not None and again.recovery.clean
    assert_holds_exactly(again, written + added)


@pytest.mark.parametrize("sysflag", [SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK])
def test_unclean_recovery_keeps_half_messages_out_of_the_consume_queues(
    open_store: Callable[..., MessageStore], tmp_path: Path, store_dir: Path, sysflag: int
) -> None:
    store = open_store(store_dir)
    written = write(store, 12)
    halves = [
        Message(TOPIC, b"half in a busy queue", queue_id=0, sysflag=sysflag),
        Message("txn-only", b"half in a queue of its own", queue_id=0, sysflag=sysflag),
    ]
    half_results = store.put(halves)
    written += write(store, 6, start=12)
    entries = all_entries(store)
    image = crash_image(store, tmp_path / "image")
    store.close()
    shutil.rmtree(image / "consumequeue")  # every queue is rebuilt from the log

    recovered = open_store(image)
    report = recovered.recovery
    assert report is not None and not report.clean
    assert report.records_checked == len(written) + len(halves)
    assert report.records_redispatched == len(written)
    assert all_entries(recovered) == entries
    assert recovered.max_offset("txn-only", 0) == 0
    assert_holds_exactly(recovered, written)
    for half, result in zip(halves, half_results, strict=True):
        found = recovered.look_message(result.physical_offset)
        assert found is not None and found.body == half.body


@pytest.mark.parametrize("lost_segment", [0, 2, 4])
def test_a_consume_queue_segment_whose_content_never_reached_the_disk_is_rebuilt(
    open_store: Callable[..., MessageStore], tmp_path: Path, store_dir: Path, lost_segment: int
) -> None:
    """The segment's name was synced with its directory, its pages were not: all zeros, followed by
    later segments that did reach the disk. Its slots must not pass for entries."""
    store = open_store(store_dir)
    written = fill_segments(store, 14)
    image = crash_image(store, tmp_path / "image")
    store.close()
    segments = cq_segments(image, TOPIC, 0)
    assert len(segments) >= lost_segment + 4  # not among the last three, which are always walked
    segments[lost_segment].write_bytes(bytes(CQ_ENTRIES * UNIT.size))
    Checkpoint(image / "checkpoint").path.unlink(missing_ok=True)

    recovered = open_store(image)
    assert_holds_exactly(recovered, written)
    assert_appends_continue(recovered, written, start=len(written))


def test_entries_past_the_end_after_segments_whose_content_was_lost_are_cut(
    open_store: Callable[..., MessageStore], tmp_path: Path, store_dir: Path
) -> None:
    """Queue segments lost their content (zeros), a later one reached the disk with entries that
    point past the end of a log that lost its tail: the walk finds no entry where it starts, and
    the end of the queue's last entry must still be known to cut what points past the log."""
    store = open_store(store_dir)
    written = fill_segments(store, 14)
    image = crash_image(store, tmp_path / "image")
    store.close()
    segments = cq_segments(image, TOPIC, 0)
    # The log ends inside what the last full segment before the lost ones points at.
    mine = [w for w in written if w.message.queue_id == 0]
    cut_at = mine[int(segments[-4].name) // UNIT.size + CQ_ENTRIES // 2].result.physical_offset
    for segment in segments[-3:-1]:
        segment.write_bytes(bytes(CQ_ENTRIES * UNIT.size))
    zero_from(image, cut_at)
    Checkpoint(image / "checkpoint").path.unlink(missing_ok=True)

    recovered = open_store(image)
    survivors = [w for w in written if w.result.end_offset <= cut_at]
    assert recovered.commitlog.max_offset == cut_at
    assert_holds_exactly(recovered, survivors)
    assert_appends_continue(recovered, survivors, start=len(written))


def test_a_torn_consume_queue_segment_with_a_hole_before_its_full_last_slot_is_walked(
    open_store: Callable[..., MessageStore], tmp_path: Path, store_dir: Path
) -> None:
    """Pages written after the last forced ConsumeQueue flush can be torn anywhere: a segment whose
    last slot reached the disk but whose first entries did not is not taken for full."""
    store = open_store(store_dir)
    written = fill_segments(store, 14)
    image = crash_image(store, tmp_path / "image")
    store.close()
    segments = cq_segments(image, TOPIC, 0)
    torn = segments[-5]  # not among the last three, which are always walked
    data = bytearray(torn.read_bytes())
    first_entry = UNIT.unpack_from(data, 0)
    data[: UNIT.size * 3] = bytes(UNIT.size * 3)
    torn.write_bytes(bytes(data))
    assert UNIT.unpack_from(data, len(data) - UNIT.size)[1] > 0
    checkpoint = Checkpoint(image / "checkpoint")
    # The last forced flush covered the log up to the torn segment's first record.
    checkpoint.commitlog_offset = checkpoint.consumequeue_offset = first_entry[0]
    checkpoint.commitlog_timestamp = checkpoint.consumequeue_timestamp = 0
    checkpoint.clean_last_record = NO_CLEAN_END
    checkpoint.flush()

    recovered = open_store(image)
    assert_holds_exactly(recovered, written)
    assert_appends_continue(recovered, written, start=len(written))


def test_lost_first_entries_of_a_queue_are_rebuilt_after_a_crash(
    open_store: Callable[..., MessageStore], tmp_path: Path, store_dir: Path
) -> None:
    """After a crash, empty slots at the start of a queue are lost pages, not a queue that began
    later: the queue is rebuilt from the log rather than served with holes."""
    store = open_store(store_dir)
    written = write(store, 20)
    image = crash_image(store, tmp_path / "image")
    store.close()
    (first,) = cq_segments(image, TOPIC, 0)[:1]
    data = bytearray(first.read_bytes())
    data[: UNIT.size * 2] = bytes(UNIT.size * 2)
    first.write_bytes(bytes(data))

    recovered = open_store(image)
    assert_holds_exactly(recovered, written)
    assert_appends_continue(recovered, written, start=len(written))


# -- 3. ConsumeQueues that run past the end of the log ---------------------------------------------


@pytest.mark.parametrize("shutdown", ["abort file lost", "crash"])
@pytest.mark.parametrize("cut", ["inside a segment", "whole last segment"])
def test_consume_queue_entries_past_the_end_of_the_log_are_truncated(
    open_store: Callable[..., MessageStore], store_dir: Path, cut: str, shutdown: str
) -> None:
    store = open_store(store_dir)
    written = fill_segments(store, 5)
    max_before = {q: store.max_offset(TOPIC, q) for q in range(QUEUES)}
    store.close()
    # The ConsumeQueues reached the disk, the end of the log did not.
    if cut == "inside a segment":
        index = len(written) // 2
        cut_at = written[index].result.physical_offset
    else:
        cut_at = written[-1].result.physical_offset // FILE_SIZE * FILE_SIZE
        index = next(i for i, w in enumerate(written) if w.result.physical_offset >= cut_at)
    zero_from(store_dir, cut_at)
    if shutdown == "crash":
        leave_abort_file(store_dir)
    else:
        lose_abort_file(store_dir)
    survivors = written[:index]

    store = open_store(store_dir)
    assert store.recovery is not None and store.recovery.end_offset == cut_at
    for q in range(QUEUES):
        kept = sum(1 for w in survivors if w.message.queue_id == q)
        assert kept < max_before[q]
        assert store.max_offset(TOPIC, q) == kept
        # No segment of the queue starts past its new end.
        assert all(int(p.name) <= kept * UNIT.size for p in cq_segments(store_dir, TOPIC, q))
        for gone in range(kept, max_before[q]):
            status = store.get_message(TOPIC, q, gone).status
            expected = (
                GetMessageStatus.OFFSET_OVERFLOW_ONE
                if gone == kept
                else GetMessageStatus.OFFSET_OVERFLOW_BADLY
            )
            assert status is expected
    assert_holds_exactly(store, survivors)
    added = assert_appends_continue(store, survivors, start=len(written))
    store.close()

    store = open_store(store_dir)
    assert_holds_exactly(store, survivors + added)


# -- 4. where the recovery walk starts -------------------------------------------------------------


def test_a_clean_stop_is_trusted_without_a_walk(
    open_store: Callable[..., MessageStore], store_dir: Path
) -> None:
    store = open_store(store_dir)
    written = fill_segments(store, 4)
    end = store.commitlog.max_offset
    store.close()

    store = open_store(store_dir)
    report = store.recovery
    assert report is not None and report.clean
    assert report.records_checked == 0 and report.end_offset == end == store.commitlog.max_offset
    assert_holds_exactly(store, written)
    added = assert_appends_continue(store, written, start=len(written))
    store.close()
    store = open_store(store_dir)
    assert store.recovery is not None and store.recovery.records_checked == 0
    assert_holds_exactly(store, written + added)


def test_a_clean_stop_whose_last_record_is_torn_is_walked(
    open_store: Callable[..., MessageStore], store_dir: Path
) -> None:
    store = open_store(store_dir)
    written = fill_segments(store, 4)
    store.close()
    torn_second_half(store_dir, written[-1].result)

    store = open_store(store_dir)
    report = store.recovery
    assert report is not None and report.clean and report.records_checked > 0
    assert report.end_offset == written[-1].result.physical_offset
    assert_holds_exactly(store, written[:-1])


def test_a_running_store_is_never_taken_for_a_clean_stop(
    open_store: Callable[..., MessageStore], tmp_path: Path, store_dir: Path
) -> None:
    """A crash image without its abort file still walks: the start cleared the clean end."""
    store = open_store(store_dir)
    written = fill_segments(store, 3)
    store.close()
    store = open_store(store_dir)
    written += write(store, 5, start=len(written))
    image = crash_image(store, tmp_path / "image")
    (image / "abort").unlink()
    torn_second_half(image, written[-1].result)

    recovered = open_store(image)
    assert recovered.recovery is not None and recovered.recovery.records_checked > 0
    assert_holds_exactly(recovered, written[:-1])


@pytest.mark.parametrize("written_after", [7, 0])
def test_unclean_recovery_walks_from_the_checkpoint_boundary(
    open_store: Callable[..., MessageStore], tmp_path: Path, store_dir: Path, written_after: int
) -> None:
    """The checkpoint names a record boundary below which the log and the queues were on disk: the
    walk starts there (a crash right after the checkpoint walks nothing)."""
    store = open_store(store_dir, flush_interval_consumequeue_ms=HOUR_MS)
    written = fill_segments(store, 3)
    assert store.consumequeue_flush is not None
    store.flusher.flush_all()
    store.consumequeue_flush.flush_all(0)
    boundary = store.checkpoint.min_offset()
    assert boundary == store.commitlog.max_offset > 0
    written += write(store, written_after, start=len(written))
    image = crash_image(store, tmp_path / "image")

    recovered = open_store(image)
    report = recovered.recovery
    assert report is not None and not report.clean
    assert report.start_offset == boundary
    assert report.end_offset == written[-1].result.end_offset
    assert report.records_checked == written_after
    assert_holds_exactly(recovered, written)
    assert_appends_continue(recovered, written, start=len(written))


@pytest.mark.parametrize("segments_walked", [3, 1])
def test_normal_recovery_walks_only_the_last_segments(
    open_store: Callable[..., MessageStore], store_dir: Path, segments_walked: int
) -> None:
    store = open_store(store_dir)
    written = fill_segments(store, 6)
    store.close()
    lose_abort_file(store_dir)  # no clean end to trust: the normal walk
    starts = [int(p.name) for p in commitlog_segments(store_dir)]
    assert len(starts) == 6

    store = open_store(store_dir, recover_segments_normal=segments_walked)
    report = store.recovery
    assert report is not None and report.clean
    start = starts[-segments_walked]
    assert report.start_offset == start
    assert report.records_checked == sum(1 for w in written if w.result.physical_offset >= start)
    assert report.records_redispatched == 0
    assert report.end_offset == written[-1].result.end_offset


def test_normal_recovery_of_a_short_log_walks_it_all(
    open_store: Callable[..., MessageStore], store_dir: Path
) -> None:
    store = open_store(store_dir)
    written = fill_segments(store, 2)
    store.close()
    lose_abort_file(store_dir)
    store = open_store(store_dir)
    assert store.recovery is not None
    assert store.recovery.start_offset == 0
    assert store.recovery.records_checked == len(written)


class SteppingClock:
    """Stands in for the CommitLog's ``time`` module: every append is stored one second later."""

    def __init__(self, start_s: float) -> None:
        self.now_s = start_s

    def time(self) -> float:
        self.now_s += 1.0
        return self.now_s


def first_timestamps(written: list[Written]) -> dict[int, int]:
    """Store timestamp of the first record of every segment, by segment start."""
    firsts: dict[int, int] = {}
    for w in written:
        start = w.result.physical_offset // FILE_SIZE * FILE_SIZE
        firsts.setdefault(start, w.result.store_timestamp)
    return firsts


@pytest.mark.parametrize(
    ("segment", "after_first_ms", "older_timestamp"),
    [
        (0, 0, "commitlog"),
        (2, 0, "commitlog"),
        (2, 500, "consumequeue"),
        (4, 0, "consumequeue"),
        (5, 999_999, "commitlog"),
    ],
)
def test_unclean_recovery_starts_at_the_segment_the_checkpoint_names(
    open_store: Callable[..., MessageStore],
    store_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    segment: int,
    after_first_ms: int,
    older_timestamp: str,
) -> None:
    """The walk starts at the last segment whose first record is no newer than the older of the two
    checkpoint timestamps, less the recovery margin."""
    monkeypatch.setattr(commit_log_module, "time", SteppingClock(1_700_000_000.0))
    store = open_store(store_dir)
    written = fill_segments(store, 6)
    store.close()
    firsts = first_timestamps(written)
    starts = sorted(firsts)
    assert len(starts) == 6
    start = starts[segment]

    checkpoint = Checkpoint(store_dir / "checkpoint")
    older = firsts[start] + RECOVERY_MARGIN_MS + after_first_ms
    newer = older + HOUR_MS
    if older_timestamp == "commitlog":
        checkpoint.commitlog_timestamp, checkpoint.consumequeue_timestamp = older, newer
    else:
        checkpoint.commitlog_timestamp, checkpoint.consumequeue_timestamp = newer, older
    checkpoint.flush()
    leave_abort_file(store_dir)

    store = open_store(store_dir)
    report = store.recovery
    assert report is not None and not report.clean
    assert report.start_offset == start
    later = sum(1 for w in written if w.result.physical_offset >= start)
    assert report.records_checked == later
    assert_holds_exactly(store, written)


def test_unclean_recovery_with_a_checkpoint_older_than_the_log_walks_it_all(
    open_store: Callable[..., MessageStore], store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit_log_module, "time", SteppingClock(1_700_000_000.0))
    store = open_store(store_dir)
    written = fill_segments(store, 4)
    store.close()
    checkpoint = Checkpoint(store_dir / "checkpoint")
    checkpoint.commitlog_timestamp = checkpoint.consumequeue_timestamp = written[0].result.store_timestamp
    checkpoint.flush()
    leave_abort_file(store_dir)

    store = open_store(store_dir)
    assert store.recovery is not None
    assert store.recovery.start_offset == 0
    assert store.recovery.records_checked == len(written)


# -- 5. segments of the wrong size ---------------------------------------------------------------


@pytest.mark.parametrize("actual_size", [FILE_SIZE - 1, FILE_SIZE + 4096])
def test_commitlog_segment_of_the_wrong_size_is_refused(
    open_store: Callable[..., MessageStore], store_dir: Path, actual_size: int
) -> None:
    store = open_store(store_dir)
    fill_segments(store, 3)
    store.close()
    wrong = commitlog_segments(store_dir)[1]
    os.truncate(wrong, actual_size)

    with pytest.raises(StoreConfigError) as refused:
        open_store(store_dir)
    message = str(refused.value)
    assert wrong.name in message
    assert str(actual_size) in message and str(FILE_SIZE) in message


def test_consume_queue_segment_of_the_wrong_size_is_refused(
    open_store: Callable[..., MessageStore], store_dir: Path
) -> None:
    store = open_store(store_dir)
    write(store, 30)
    store.close()
    wrong = cq_segments(store_dir, TOPIC, 1)[0]
    os.truncate(wrong, CQ_ENTRIES * UNIT.size - 20)

    with pytest.raises(StoreConfigError, match=rf"{wrong.name}.*{CQ_ENTRIES * UNIT.size - 20}"):
        open_store(store_dir)


def test_opening_with_another_segment_size_is_refused_and_changes_nothing(
    open_store: Callable[..., MessageStore], store_dir: Path
) -> None:
    store = open_store(store_dir)
    written = fill_segments(store, 3)
    store.close()
    before = {p: p.read_bytes() for p in sorted(store_dir.rglob("*")) if p.is_file()}

    with pytest.raises(StoreConfigError, match=f"configured as {2 * FILE_SIZE} bytes"):
        open_store(store_dir, commitlog_file_size=2 * FILE_SIZE)
    assert not (store_dir / "abort").exists()
    assert {p: p.read_bytes() for p in sorted(store_dir.rglob("*")) if p.is_file()} == before

    store = open_store(store_dir)
    assert store.recovery is not None and store.recovery.clean
    assert_holds_exactly(store, written)


@pytest.mark.parametrize("wrong", ["commitlog", "consumequeue"])
def test_a_refused_open_leaves_no_file_open(
    open_store: Callable[..., MessageStore], store_dir: Path, wrong: str
) -> None:
    store = open_store(store_dir)
    fill_segments(store, 3)
    store.close()
    if wrong == "commitlog":
        os.truncate(commitlog_segments(store_dir)[-1], FILE_SIZE - 1)
    else:
        os.truncate(cq_segments(store_dir, TOPIC, 2)[-1], UNIT.size)
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.is_dir():
        pytest.skip("needs /proc/self/fd")
    before = len(list(fd_dir.iterdir()))

    with pytest.raises(StoreConfigError):
        open_store(store_dir)
    assert len(list(fd_dir.iterdir())) == before


# -- a crash during recovery itself ----------------------------------------------------------------


class ProcessKilled(BaseException):
    """Stands for the process dying at this point."""


def test_recovery_killed_while_deleting_later_segments_leaves_an_openable_store(
    open_store: Callable[..., MessageStore], store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(store_dir)
    written = fill_segments(store, 6)
    store.close()
    # A corrupt record in the third-last segment: recovery must delete the two segments after it.
    victim = next(w.result for w in written if w.result.physical_offset > 3 * FILE_SIZE + 200)
    flip_body_byte(store_dir, victim)
    lose_abort_file(store_dir)
    assert len(commitlog_segments(store_dir)) == 6

    destroyed: list[str] = []
    real_destroy = MappedFile.destroy

    def destroy_then_die(self: MappedFile) -> None:
        if destroyed:
            raise ProcessKilled
        destroyed.append(self.path.name)
        real_destroy(self)

    monkeypatch.setattr(MappedFile, "destroy", destroy_then_die)
    interrupted = MessageStore(config(store_dir))
    with pytest.raises(ProcessKilled):
        interrupted.open()
    monkeypatch.undo()
    for mapped in interrupted.commitlog.files.files:
        mapped.close()
    assert len(destroyed) == 1

    store = open_store(store_dir)
    assert store.recovery is not None and store.recovery.end_offset == victim.physical_offset
    survivors = [w for w in written if w.result.physical_offset < victim.physical_offset]
    assert_holds_exactly(store, survivors)


def test_a_delay_levels_entries_hold_the_due_time_as_rocketmqs_schedule_service_reads_it(
    open_store: Callable[..., MessageStore], tmp_path: Path, store_dir: Path
) -> None:
    # RocketMQ's timer reads a SCHEDULE_TOPIC_XXXX entry's tag code as the message's due time:
    # store timestamp + the level's delay (queue 2 is level 3, 10 s). So does a rebuilt queue.
    store = open_store(store_dir)
    results = store.append(
        [Message(SCHEDULE_TOPIC, f"d{i}".encode(), 2, {"TAGS": "TagA", "DELAY": "3"}) for i in range(3)]
    )
    store.append([Message(TOPIC, b"plain", 0, {"TAGS": "TagA"})])

    def codes(opened: MessageStore, topic: str, queue_id: int) -> list[int]:
        queue = opened.queue(topic, queue_id)
        assert queue is not None
        return [tags_code for _, _, _, tags_code in queue.iter_entries(0)]

    assert codes(store, SCHEDULE_TOPIC, 2) == [result.store_timestamp + 10_000 for result in results]
    assert codes(store, TOPIC, 0) == [tags_hash("TagA")]
    image = crash_image(store, tmp_path / "image")
    store.close()
    shutil.rmtree(image / "consumequeue" / SCHEDULE_TOPIC)
    recovered = open_store(image)
    assert codes(recovered, SCHEDULE_TOPIC, 2) == [result.store_timestamp + 10_000 for result in results]
