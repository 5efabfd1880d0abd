"""Retention and the disk guard (SPEC 1.9), driven pass by pass with a fake clock and a fake disk.

The clock stands at 04:30 or 10:30 local time on a fixed day; segments are aged by setting their
modification time relative to it. The clean thread itself never runs here (its first pass is an
hour away) except in the last test; passes are run with ``store.clean_service.clean()``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.store import DiskFullError, GetMessageStatus, MessageStore, StoreConfigError, decode_record
from app.store.mapped_file import MappedFile
from app.store.results import AppendResult
from app.store.retention import parse_delete_when
from tests.store.conftest import TINY_COMMITLOG_FILE_SIZE, message, tiny_config, wait_until

HOUR_S = 3600
HOUR_MS = 3_600_000
RESERVED_H = 72
SEGMENT = TINY_COMMITLOG_FILE_SIZE
BODY = 400  # seven messages per CommitLog segment


def local_time(hour: int, minute: int = 30) -> float:
    """A fixed day (1 March 2030) at ``hour``:``minute`` local time, in seconds."""
    return time.mktime((2030, 3, 1, hour, minute, 0, 0, 0, -1))


class FakeClock:
    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


class FakeDisk:
    """Disk usage in percent, as the store's probe reports it."""

    def __init__(self, percent: float = 50.0) -> None:
        self.percent = percent

    def __call__(self) -> float:
        return self.percent


class Fixture:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.clock = FakeClock(local_time(4))
        self.disk = FakeDisk()
        self.sleeps: list[float] = []
        self.stores: list[MessageStore] = []

    def store(self, **overrides: Any) -> MessageStore:
        values: dict[str, Any] = {
            "clean_first_delay_ms": HOUR_MS,
            "clean_resource_interval_ms": HOUR_MS,
            "max_hash_slots": 4,
            "max_index_count": 31,  # ten messages with a unique id and two keys per file
        }
        values.update(overrides)
        store = MessageStore(
            tiny_config(self.tmp_path / "store", **values),
            clock=self.clock,
            disk_usage=self.disk,
            sleep=self.sleeps.append,
        )
        self.stores.append(store)
        return store.open()


@pytest.fixture
def fx(tmp_path: Path) -> Iterator[Fixture]:
    fixture = Fixture(tmp_path)
    yield fixture
    for store in fixture.stores:
        store.close()


def fill(store: MessageStore, segments: int) -> list[AppendResult]:
    """Messages 0, 1, ... (seven per CommitLog segment) until ``segments`` segments exist."""
    results: list[AppendResult] = []
    while len(store.commitlog.files.files) < segments:
        i = len(results)
        results += store.append([message(body=bytes([i % 256]) * BODY, KEYS=f"k{i} all", UNIQ_KEY=f"u{i}")])
    return results


def segment_names(store: MessageStore) -> list[int]:
    """Start offsets of the CommitLog segments in the queue."""
    return [mapped.file_from_offset for mapped in store.commitlog.files.files]


def on_disk(directory: Path) -> list[int]:
    return sorted(int(path.name) for path in directory.iterdir() if path.name.isdigit())  # not spares


def age(store: MessageStore, clock: FakeClock, hours_by_segment: dict[int, float]) -> None:
    """Set segment ``k``'s modification time to ``hours`` before the fake clock; segments not
    named were modified an hour ago."""
    for k, mapped in enumerate(store.commitlog.files.files):
        stamp = clock.now_s - hours_by_segment.get(k, 1) * HOUR_S
        os.utime(mapped.path, (stamp, stamp))


def age_all(store: MessageStore, clock: FakeClock, hours: float) -> None:
    age(store, clock, dict.fromkeys(range(len(store.commitlog.files.files)), hours))


# -- when segments go -------------------------------------------------------------------------------


def test_nothing_goes_outside_delete_when_while_the_disk_has_room(fx: Fixture) -> None:
    fx.clock.now_s = local_time(10)
    store = fx.store()
    fill(store, 4)
    age_all(store, fx.clock, 100)
    report = store.clean_service.clean()
    assert report.reasons == () and report.commitlog_segments == 0
    assert segment_names(store) == [0, SEGMENT, 2 * SEGMENT, 3 * SEGMENT]


def test_expired_segments_go_oldest_first_at_delete_when_up_to_the_first_young_one(fx: Fixture) -> None:
    store = fx.store()
    fill(store, 5)
    age(store, fx.clock, {0: 100, 1: RESERVED_H + 0.01, 2: RESERVED_H - 0.01, 3: 100, 4: 100})
    report = store.clean_service.clean()
    assert report.reasons == ("time",) and report.commitlog_segments == 2
    assert segment_names(store) == [2 * SEGMENT, 3 * SEGMENT, 4 * SEGMENT]
    assert on_disk(store.config.commitlog_dir) == [2 * SEGMENT, 3 * SEGMENT, 4 * SEGMENT]
    assert store.commitlog.min_offset == report.commitlog_min_offset == 2 * SEGMENT


def test_the_segment_being_written_is_never_deleted(fx: Fixture) -> None:
    fx.disk.percent = 88  # everything may go, and writes are still accepted
    store = fx.store()
    fill(store, 3)
    age_all(store, fx.clock, 1000)
    store.clean_service.clean()
    store.clean_service.clean()
    assert segment_names(store) == [2 * SEGMENT]
    assert store.get_message("orders", 0, store.min_offset("orders", 0)).status is GetMessageStatus.FOUND
    store.append([message(body=b"more")])


def test_at_most_n_segments_go_per_pass_spaced_apart(fx: Fixture) -> None:
    store = fx.store(delete_files_max_per_pass=3, delete_files_interval_ms=250)
    fill(store, 8)
    age_all(store, fx.clock, 100)
    first = store.clean_service.clean()
    assert first.commitlog_segments == 3 and segment_names(store)[0] == 3 * SEGMENT
    assert fx.sleeps[:2] == [0.25, 0.25]  # between the three CommitLog deletions
    second = store.clean_service.clean()
    assert second.commitlog_segments == 3 and segment_names(store) == [6 * SEGMENT, 7 * SEGMENT]
    assert store.clean_service.clean().commitlog_segments == 1  # never the last one


def test_a_disk_over_75_percent_deletes_expired_files_at_any_hour(fx: Fixture) -> None:
    fx.clock.now_s = local_time(10)
    fx.disk.percent = 76
    store = fx.store()
    fill(store, 4)
    age(store, fx.clock, {0: 100, 1: 100, 2: 1, 3: 1})
    report = store.clean_service.clean()
    assert report.reasons == ("disk",) and not report.forced
    assert segment_names(store) == [2 * SEGMENT, 3 * SEGMENT]


def test_at_75_percent_exactly_nothing_goes(fx: Fixture) -> None:
    fx.clock.now_s = local_time(10)
    fx.disk.percent = 75
    store = fx.store()
    fill(store, 3)
    age_all(store, fx.clock, 100)
    assert store.clean_service.clean().commitlog_segments == 0


def test_a_disk_over_85_percent_deletes_even_young_files(fx: Fixture) -> None:
    fx.clock.now_s = local_time(10)
    fx.disk.percent = 86
    store = fx.store()
    fill(store, 4)
    age_all(store, fx.clock, 1)
    report = store.clean_service.clean()
    assert report.forced and report.commitlog_segments == 3
    assert segment_names(store) == [3 * SEGMENT]


def test_an_admin_can_run_a_pass_at_any_hour(fx: Fixture) -> None:
    fx.clock.now_s = local_time(10)
    store = fx.store()
    fill(store, 4)
    age(store, fx.clock, {0: 100, 1: 1, 2: 100, 3: 100})
    assert store.clean_service.clean().commitlog_segments == 0
    report = store.trigger_clean()
    assert report.reasons == ("manual",) and report.commitlog_segments == 1
    assert segment_names(store)[0] == SEGMENT


def test_delete_when_may_name_several_hours(fx: Fixture) -> None:
    assert parse_delete_when("04;16") == {4, 16}
    assert parse_delete_when("4") == {4}
    for bad in ("", "25", "four", "04;x"):
        with pytest.raises(StoreConfigError):
            parse_delete_when(bad)
    fx.clock.now_s = local_time(16)
    store = fx.store(delete_when="04;16")
    fill(store, 2)
    age_all(store, fx.clock, 100)
    assert store.clean_service.clean().commitlog_segments == 1


# -- what goes with the CommitLog -------------------------------------------------------------------


def test_consume_queue_segments_that_point_below_the_commitlog_go_and_min_offsets_follow(fx: Fixture) -> None:
    store = fx.store()
    results = fill(store, 5)  # 8 entries per ConsumeQueue segment
    age(store, fx.clock, {0: 100, 1: 100})
    report = store.clean_service.clean()
    new_min = store.commitlog.min_offset
    first_kept = next(r.queue_offset for r in results if r.physical_offset >= new_min)
    last_entry_of = [
        max(r.physical_offset for r in results[k * 8 : k * 8 + 8]) for k in range(len(results) // 8)
    ]
    gone = sum(1 for physical in last_entry_of if physical < new_min)
    assert gone > 0 and report.consumequeue_segments == gone
    queue_dir = store.config.consumequeue_dir / "orders" / "0"
    assert on_disk(queue_dir)[0] == gone * 8 * 20
    assert store.min_offset("orders", 0) == first_kept
    old = store.get_message("orders", 0, 0)
    assert (old.status, old.next_offset, old.min_offset) == (
        GetMessageStatus.OFFSET_TOO_SMALL,
        first_kept,
        first_kept,
    )
    kept = store.get_message("orders", 0, first_kept, max_messages=1)
    assert kept.status is GetMessageStatus.FOUND
    assert decode_record(kept.records[0]).body == bytes([first_kept % 256]) * BODY


def test_index_files_that_point_below_the_commitlog_go_too(fx: Fixture) -> None:
    store = fx.store()
    fill(store, 5)
    index = store.index_service
    assert index is not None and index.wait_indexed()
    before = [(f.name, f.end_offset) for f in index.files]
    age(store, fx.clock, {0: 100, 1: 100})
    report = store.clean_service.clean()
    expired = [name for name, end in before if end <= 2 * SEGMENT]
    assert expired and report.index_files == len(expired)
    assert [f.name for f in index.files] == [name for name, _ in before if name not in expired]
    assert not any((store.config.index_dir / name).exists() for name in expired)
    assert store.query_message_by_key("orders", "k0") == []
    assert [m.unique_id for m in store.query_message_by_key("orders", "k25")] == ["u25"]


def test_reads_of_deleted_data_answer_offset_too_small_never_garbage(fx: Fixture) -> None:
    store = fx.store()
    results = fill(store, 3)
    # Retention took the first segment, and a reader comes before the queue's min was corrected.
    first = store.commitlog.files.files[0]
    with store.commitlog.lock:
        store.commitlog.files.detach([first])
    store.commitlog.files.destroy_doomed(0, 0)
    new_min = next(r.queue_offset for r in results if r.physical_offset >= SEGMENT)
    for offset in (0, 3, new_min - 1):
        result = store.get_message("orders", 0, offset)
        assert (result.status, result.next_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, new_min)
        assert result.records == []
    assert store.look_message(results[0].physical_offset) is None
    assert store.query_message_by_id(results[0].msg_id) is None
    assert store.get_message("orders", 0, new_min).status is GetMessageStatus.FOUND


# -- readers holding segments -----------------------------------------------------------------------


def hold_first_record(store: MessageStore) -> tuple[MappedFile, memoryview]:
    """A reader holding the first CommitLog segment, with a slice of its first record."""
    mapped = store.commitlog.files.files[0]
    assert mapped.hold()
    record = store.read_record(0)
    assert record is not None
    return mapped, record


def test_a_segment_held_by_a_reader_goes_once_the_reader_lets_go(fx: Fixture) -> None:
    store = fx.store()
    results = fill(store, 3)
    age_all(store, fx.clock, 100)
    mapped, record = hold_first_record(store)
    report = store.clean_service.clean()
    assert report.commitlog_segments == 1  # the second segment; the first waits for its reader
    assert segment_names(store) == [2 * SEGMENT]
    assert mapped.path.exists() and not mapped.hold()  # no new reader gets it
    assert decode_record(record).body == bytes([0]) * BODY  # the reader still reads its bytes
    assert store.get_message("orders", 0, 0).status is GetMessageStatus.OFFSET_TOO_SMALL
    assert store.look_message(results[0].physical_offset) is None
    mapped.release()
    assert store.clean_service.clean().commitlog_segments == 1
    assert not mapped.path.exists()


def test_a_stuck_reader_is_overruled_after_the_forced_interval(fx: Fixture) -> None:
    store = fx.store(destroy_forcibly_interval_ms=120_000)
    fill(store, 2)
    age_all(store, fx.clock, 100)
    mapped, record = hold_first_record(store)
    store.clean_service.clean()
    fx.clock.advance(119)
    assert store.clean_service.clean().commitlog_segments == 0 and mapped.path.exists()
    fx.clock.advance(1)
    assert store.clean_service.clean().commitlog_segments == 1 and not mapped.path.exists()
    assert decode_record(record).body == bytes([0]) * BODY  # its pages stay mapped for the slice
    mapped.release()


def test_closing_the_store_deletes_segments_still_waiting_for_readers(fx: Fixture) -> None:
    store = fx.store()
    fill(store, 2)
    age_all(store, fx.clock, 100)
    mapped, _ = hold_first_record(store)
    store.clean_service.clean()
    mapped.release()
    store.close()
    assert not mapped.path.exists()


# -- the disk guard ---------------------------------------------------------------------------------


def refused(append: Callable[[], object]) -> bool:
    try:
        append()
    except DiskFullError:
        return True
    return False


def test_writes_are_refused_over_90_percent_and_accepted_again_at_85(fx: Fixture) -> None:
    store = fx.store()
    store.append([message(body=b"before")])

    def append() -> object:
        return store.append([message(body=b"more")])

    for percent, expected in ((90, False), (90.5, True), (88, True), (85.1, True), (85, False), (89, False)):
        fx.disk.percent = percent
        store.clean_service.clean()
        assert refused(append) is expected, f"at {percent} %"
    fx.disk.percent = 91
    store.clean_service.clean()
    with pytest.raises(DiskFullError, match=r"91\.0 % full.*90 % limit.*85 %"):
        append()
    assert store.get_message("orders", 0, 0).status is GetMessageStatus.FOUND  # reads keep working


def test_an_append_probes_the_disk_itself_when_the_last_probe_is_old(fx: Fixture) -> None:
    store = fx.store(disk_check_interval_ms=1_000)
    store.append([message()])  # probes: 50 %
    fx.disk.percent = 95
    store.append([message()])  # the last probe is fresh
    fx.clock.advance(1)
    with pytest.raises(DiskFullError):
        store.append([message()])
    fx.disk.percent = 80
    fx.clock.advance(1)
    store.append([message()])


def test_a_failing_probe_keeps_the_last_known_state(fx: Fixture) -> None:
    store = fx.store()

    def broken() -> float:
        raise OSError("statvfs failed")

    fx.disk.percent = 95
    store.clean_service.clean()
    store.disk_guard.probe = broken
    store.clean_service.clean()
    assert not store.disk_guard.writable and store.disk_guard.used_percent == 95


# -- the clean thread -----------------------------------------------------------------------------


def test_the_clean_thread_runs_passes_by_itself_after_its_first_delay(fx: Fixture) -> None:
    fx.clock.now_s = local_time(10)
    store = fx.store(clean_first_delay_ms=0, clean_resource_interval_ms=10)
    fill(store, 3)
    fx.disk.percent = 95
    wait_until(lambda: len(store.commitlog.files.files) == 1, what="the clean thread to delete segments")
    with pytest.raises(DiskFullError):
        store.append([message()])
