"""The message index (SPEC 1.6): lookups by unique id, by key and by message id, across many index
files, through restarts and crashes; and the search of a queue offset by time.

Index files are tiny here (4 slots, 10 entries: 9 usable, entry 0 is never used), so a few dozen
messages spread over many files and every slot holds a long chain of colliding keys.
"""

from __future__ import annotations

import shutil
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from app.store import Message, MessageStore, StoreConfigError, index_file
from app.store.checkpoint import Checkpoint
from app.store.index_file import (
    ENTRY,
    HEADER,
    HEADER_SIZE,
    SLOT,
    IndexFile,
    index_file_name,
    index_file_size,
    index_file_time,
    key_hash,
)
from app.store.index_service import Placed
from app.store.record_format import POS_BODYCRC, SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK
from app.store.results import AppendResult
from tests.store.conftest import StoreFactory, message


class Keyed(NamedTuple):
    topic: str
    keys: str
    uniq_key: str
    sysflag: int


SLOTS = 4
ENTRIES = 10  # 9 usable per file
HOUR_MS = 3_600_000
# No background flush of the index or the checkpoint during a test that stages a crash.
QUIET = {"flush_interval_index_ms": HOUR_MS, "flush_interval_consumequeue_ms": HOUR_MS}


@pytest.fixture
def make_indexed(make_store: StoreFactory) -> StoreFactory:
    """``make_store`` with tiny index files."""

    def factory(store_dir: Path | None = None, **overrides: Any) -> MessageStore:
        values: dict[str, Any] = {"max_hash_slots": SLOTS, "max_index_count": ENTRIES}
        values.update(overrides)
        return make_store(store_dir, **values)

    return factory  # type: ignore[return-value]


@pytest.fixture
def store(make_indexed: StoreFactory) -> MessageStore:
    return make_indexed()


def keyed(i: int, topic: str = "orders", keys: str | None = None) -> Message:
    """Message ``i``: unique id u<i>, keys "k<i mod 3> all", body b"m<i>"."""
    return message(
        topic, f"m{i}".encode(), KEYS=keys if keys is not None else f"k{i % 3} all", UNIQ_KEY=f"u{i}"
    )


def bodies(messages: list[Any]) -> list[bytes]:
    return [m.body for m in messages]


def put_keyed(store: MessageStore, count: int, start: int = 0, topic: str = "orders") -> list[AppendResult]:
    return store.append([keyed(i, topic) for i in range(start, start + count)])


def index_names(store: MessageStore) -> list[str]:
    """The index files on disk once everything appended so far is indexed."""
    if store.index_service is not None and store.is_open:
        assert store.index_service.wait_indexed()
    return sorted(path.name for path in store.config.index_dir.iterdir())


def next_millisecond() -> None:
    """Wait for the wall clock's next millisecond, so the next append gets a later store time."""
    start = int(time.time() * 1000)
    while int(time.time() * 1000) <= start:
        pass


def crash_copy(store: MessageStore, destination: Path) -> Path:
    """What a SIGKILL would leave: the files as the page cache holds them, abort file included."""
    shutil.copytree(store.config.store_dir, destination)
    assert (destination / "abort").exists()
    return destination


# -- lookups ----------------------------------------------------------------------------------------


def test_a_message_is_found_by_its_unique_id_and_by_each_word_of_its_keys(store: MessageStore) -> None:
    store.append([message(body=b"hello", KEYS="order-1 customer-7", UNIQ_KEY="U-1")])
    found = store.query_message_by_unique_id("orders", "U-1")
    assert found is not None and found.body == b"hello"
    assert bodies(store.query_message_by_key("orders", "order-1")) == [b"hello"]
    assert bodies(store.query_message_by_key("orders", "customer-7")) == [b"hello"]
    assert store.query_message_by_key("orders", "order-1 customer-7") == []
    assert store.query_message_by_key("orders", "order") == []


def test_a_query_by_key_also_matches_unique_ids_as_rocketmq_does(store: MessageStore) -> None:
    store.append([message(body=b"a", UNIQ_KEY="U-1")])
    assert bodies(store.query_message_by_key("orders", "U-1")) == [b"a"]


def test_lookups_span_many_index_files_newest_first(store: MessageStore) -> None:
    put_keyed(store, 30)  # 3 entries each, 3 messages per file: 10 files
    assert len(index_names(store)) == 10
    assert bodies(store.query_message_by_key("orders", "k1")) == [f"m{i}".encode() for i in range(28, 0, -3)]
    for i in range(30):
        found = store.query_message_by_unique_id("orders", f"u{i}")
        assert found is not None and found.body == f"m{i}".encode()


def test_keys_are_scoped_by_topic(store: MessageStore) -> None:
    store.append([message("orders", b"o", KEYS="shared"), message("payments", b"p", KEYS="shared")])
    assert bodies(store.query_message_by_key("orders", "shared")) == [b"o"]
    assert bodies(store.query_message_by_key("payments", "shared")) == [b"p"]
    assert store.query_message_by_unique_id("refunds", "shared") is None


def test_colliding_keys_are_told_apart_by_the_message_itself(make_indexed: StoreFactory) -> None:
    store = make_indexed(max_hash_slots=1)  # every key in one chain
    store.append([message(body=f"m{i}".encode(), KEYS=f"key-{i}") for i in range(7)])
    for i in range(7):
        assert bodies(store.query_message_by_key("orders", f"key-{i}")) == [f"m{i}".encode()]


def test_max_messages_caps_the_answer_and_so_does_the_configured_limit(make_indexed: StoreFactory) -> None:
    store = make_indexed(max_index_query_results=4)
    put_keyed(store, 30)
    assert bodies(store.query_message_by_key("orders", "all", max_messages=2)) == [b"m29", b"m28"]
    assert len(store.query_message_by_key("orders", "all")) == 4
    assert len(store.query_message_by_key("orders", "all", max_messages=100)) == 4


def test_the_time_range_is_exact_to_the_millisecond_at_both_ends(store: MessageStore) -> None:
    stamps = []
    for i in range(4):
        stamps.append(store.append([message(body=f"m{i}".encode(), KEYS="k")])[0].store_timestamp)
        next_millisecond()
    assert bodies(store.query_message_by_key("orders", "k", begin_ms=stamps[1], end_ms=stamps[2])) == [
        b"m2",
        b"m1",
    ]
    assert bodies(store.query_message_by_key("orders", "k", begin_ms=stamps[3] + 1)) == []
    assert bodies(store.query_message_by_key("orders", "k", end_ms=stamps[0])) == [b"m0"]


def test_a_message_appended_just_before_a_query_is_found(store: MessageStore) -> None:
    for i in range(50):
        store.append([message(body=f"m{i}".encode(), UNIQ_KEY=f"u{i}")])
        found = store.query_message_by_unique_id("orders", f"u{i}")
        assert found is not None and found.body == f"m{i}".encode()


def test_batches_queued_behind_each_other_are_indexed_in_one_call(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Single appends queue one record each for the index thread: those waiting when it drains are
    indexed together, and each still counts as indexed for a query that waits."""
    service = store.index_service
    assert service is not None
    calls: list[int] = []
    entered, release = threading.Event(), threading.Event()
    index = service.index

    def held_index(records: Any, placements: Any) -> None:
        calls.append(len(records))
        entered.set()
        release.wait(10)
        index(records, placements)

    monkeypatch.setattr(service, "index", held_index)
    store.append([keyed(0)])
    service.wakeup()
    assert entered.wait(10), "the index thread did not take the first batch"
    for i in range(1, 6):
        store.append([keyed(i)])
    put_keyed(store, 3, start=6)
    release.set()
    assert service.wait_indexed()
    assert calls == [1, 8]
    assert sorted(bodies(store.query_message_by_key("orders", "all", max_messages=20))) == sorted(
        f"m{i}".encode() for i in range(9)
    )


def test_rolled_back_transaction_messages_are_not_indexed_but_prepared_ones_are(store: MessageStore) -> None:
    store.append(
        [
            Message("orders", b"half", properties={"KEYS": "txn"}, sysflag=SYSFLAG_TRANSACTION_PREPARED),
            Message(
                "orders", b"rolled back", properties={"KEYS": "txn"}, sysflag=SYSFLAG_TRANSACTION_ROLLBACK
            ),
        ]
    )
    assert bodies(store.query_message_by_key("orders", "txn")) == [b"half"]


def test_a_message_id_names_the_message_without_the_index(store: MessageStore) -> None:
    results = store.append([message(body=f"m{i}".encode()) for i in range(5)])  # no keys at all
    for i, result in enumerate(results):
        found = store.query_message_by_id(result.msg_id)
        assert found is not None and found.body == f"m{i}".encode() and found.msg_id == result.msg_id
    other_host = "7F000002" + results[0].msg_id[8:]
    assert store.query_message_by_id(other_host) is None
    assert store.query_message_by_id(results[0].msg_id[:-1]) is None
    assert store.query_message_by_id("not hex at all, but 32 long....") is None
    past_the_end = results[0].msg_id[:16] + f"{results[-1].end_offset:016X}"
    assert store.query_message_by_id(past_the_end) is None


def test_without_the_index_queries_by_key_find_nothing(make_indexed: StoreFactory) -> None:
    store = make_indexed(message_index_enable=False)
    put_keyed(store, 3)
    assert store.query_message_by_key("orders", "k1") == []
    assert store.query_message_by_unique_id("orders", "u1") is None
    assert not store.config.index_dir.exists()


# -- the file format -----------------------------------------------------------------------------


def test_the_file_has_rocketmqs_layout(tmp_path: Path) -> None:
    index = IndexFile.create(tmp_path, index_file_name(1_700_000_000_000), 4, 10, 100, 1_700_000_000_000)
    hashes = [key_hash("orders#a"), key_hash("orders#b"), key_hash("orders#a")]
    records = [Keyed("orders", "a", "", 0), Keyed("orders", "b", "", 0), Keyed("orders", "a", "", 0)]
    placements = [Placed(100, 100, 1_700_000_000_000), Placed(200, 100, 1_700_000_002_500)]
    assert index.index_messages(records[:2], placements, 0, {}) == 2
    assert index.index_messages(records, [*placements, Placed(300, 100, 1_700_000_005_000)], 2, {}) == 3
    index.flush()
    raw = (tmp_path / index.name).read_bytes()
    assert len(raw) == 40 + 4 * 4 + 10 * 20 == index_file_size(4, 10)
    assert HEADER.unpack_from(raw, 0) == (1_700_000_000_000, 1_700_000_005_000, 100, 400, 2, 4)

    def slot(key: int) -> int:
        return int(SLOT.unpack_from(raw, HEADER_SIZE + (key % 4) * 4)[0])

    def entry(number: int) -> tuple[int, int, int, int]:
        return ENTRY.unpack_from(raw, HEADER_SIZE + 4 * 4 + number * 20)  # type: ignore[return-value]

    assert entry(0) == (0, 0, 0, 0)  # entry 0 is never used: 0 means "none"
    assert slot(hashes[0]) == 3 and slot(hashes[1]) == 2
    assert entry(3) == (hashes[0], 300, 5, 1)  # seconds since begin, previous entry of the same slot
    assert entry(2) == (hashes[1], 200, 2, 0)
    assert entry(1) == (hashes[0], 100, 0, 0)
    index.close()


@pytest.mark.parametrize("key_hash", [index_file.key_hash, index_file.python_key_hash])
def test_key_hashes_are_rocketmqs_absolute_java_string_hash(key_hash: Callable[[str], int]) -> None:
    # Known answers of Java's String.hashCode: "hello" 99162322; "order-1" -1207111310 (abs taken);
    # "Aa" and "BB" collide at 2112; "polygenelubricants" is Integer.MIN_VALUE, which RocketMQ's
    # indexKeyHashMethod turns into 0 (Math.abs leaves it negative).
    assert key_hash("hello") == 99162322
    assert key_hash("order-1") == 1207111310
    assert key_hash("Aa") == key_hash("BB") == 2112
    assert key_hash("polygenelubricants") == 0
    assert key_hash("\U0001f600") == abs(31 * 0xD83D + 0xDE00)  # one code point, two UTF-16 units
    assert all(0 <= key_hash(f"t#{i}") < 2**31 for i in range(1000))


def rocketmq_select(raw: bytes, slots: int, key: str, begin_ms: int, end_ms: int) -> list[int]:
    """RocketMQ 4.9's IndexFile.selectPhyOffset over an index file's bytes, as its source lays it
    out: the key's slot, then the chain of entries back from it, keeping those whose hash matches
    and whose time falls in [begin, end]."""
    begin_timestamp, _, _, _, _, index_count = HEADER.unpack_from(raw, 0)
    key_hash_value = abs(java_hash(key)) if java_hash(key) != -(2**31) else 0
    slot_at = HEADER_SIZE + (key_hash_value % slots) * 4
    (slot_value,) = struct.unpack_from(">i", raw, slot_at)
    found: list[int] = []
    if slot_value <= 0 or slot_value > index_count or index_count <= 1:
        return found
    next_to_read = slot_value
    while True:
        at = HEADER_SIZE + slots * 4 + next_to_read * 20
        hash_read, offset, time_diff, previous = struct.unpack_from(">iqii", raw, at)
        if time_diff < 0:
            break
        time_read = begin_timestamp + time_diff * 1000
        if hash_read == key_hash_value and begin_ms <= time_read <= end_ms:
            found.append(offset)
        if previous <= 0 or previous > index_count or previous == next_to_read or time_read < begin_ms:
            break
        next_to_read = previous
    return found


def java_hash(text: str) -> int:
    """Java's String.hashCode, written out independently of the store's."""
    h = 0
    for unit in struct.unpack(f">{len(text.encode('utf-16-be')) // 2}H", text.encode("utf-16-be")):
        h = (h * 31 + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


def test_rocketmqs_lookup_finds_every_key_and_unique_id_in_wharfs_index(make_indexed: StoreFactory) -> None:
    store = make_indexed(max_hash_slots=64, max_index_count=400)
    results = store.append(
        [
            message(
                "orders", f"m{i}".encode(), KEYS=f"order-{i} customer-{i % 4} 顧客{i}", UNIQ_KEY=f"U{i:04d}"
            )
            for i in range(40)
        ]
    )
    assert store.index_service is not None and store.index_service.wait_indexed()
    store.index_service.flush()
    (name,) = index_names(store)
    raw = (store.config.index_dir / name).read_bytes()
    offsets = [result.physical_offset for result in results]
    for i, offset in enumerate(offsets):
        for key in (f"order-{i}", f"顧客{i}", f"U{i:04d}"):
            assert rocketmq_select(raw, 64, f"orders#{key}", 0, 2**62) == [offset], key
    assert sorted(rocketmq_select(raw, 64, "orders#customer-1", 0, 2**62)) == offsets[1::4]


def test_an_index_hashed_by_an_older_wharf_is_rebuilt_with_rocketmqs_hash(make_indexed: StoreFactory) -> None:
    store = make_indexed()
    put_keyed(store, 12)
    store.close()
    (store.config.config_dir / "indexFormat.json").unlink()  # as a store of the older Wharf has none
    store = make_indexed()
    assert store.index_service is not None and store.index_service.wait_indexed()
    assert store.index_service.rebuilt_messages == 12
    assert len(store.index_service.dropped_files) == 4
    assert bodies(store.query_message_by_key("orders", "k0")) == [b"m9", b"m6", b"m3", b"m0"]
    assert (store.config.config_dir / "indexFormat.json").exists()
    store.close()
    store = make_indexed()
    assert store.index_service is not None and store.index_service.dropped_files == []


def test_file_names_are_utc_milliseconds_and_increase_within_one_millisecond(store: MessageStore) -> None:
    assert index_file_name(0) == "19700101000000000"
    assert index_file_time(index_file_name(1_700_000_123_456)) == 1_700_000_123_456
    put_keyed(store, 30)  # ten files, created within a few milliseconds
    names = index_names(store)
    assert len(set(names)) == len(names) == 10
    assert [index_file_time(n) for n in names] == sorted({index_file_time(n) for n in names})


def test_a_file_built_with_other_sizes_is_refused(make_indexed: StoreFactory, tmp_path: Path) -> None:
    store = make_indexed(tmp_path / "s")
    put_keyed(store, 3)
    store.close()
    with pytest.raises(StoreConfigError, match="bytes"):
        make_indexed(tmp_path / "s", max_index_count=ENTRIES * 2)


# -- restarts and recovery ---------------------------------------------------------------------------


def test_a_clean_restart_keeps_every_file_and_indexes_nothing_again(make_indexed: StoreFactory) -> None:
    store = make_indexed()
    put_keyed(store, 20)
    store.close()
    names = index_names(store)
    store = make_indexed()
    assert store.index_service is not None
    assert index_names(store) == names
    assert store.index_service.wait_indexed()
    assert store.index_service.dropped_files == [] and store.index_service.rebuilt_messages == 0
    assert bodies(store.query_message_by_key("orders", "k2")) == [f"m{i}".encode() for i in range(17, 0, -3)]
    put_keyed(store, 3, start=20)  # appending goes on in the last file
    assert bodies(store.query_message_by_key("orders", "k2", max_messages=2)) == [b"m20", b"m17"]


def test_after_a_crash_files_newer_than_the_checkpoint_are_dropped_and_rebuilt(
    make_indexed: StoreFactory, tmp_path: Path
) -> None:
    store = make_indexed(tmp_path / "live", **QUIET)
    put_keyed(store, 9)  # three full files
    index = store.index_service
    assert index is not None and index.wait_indexed()
    next_millisecond()
    put_keyed(store, 9, start=9)  # three more, stored later
    assert index.wait_indexed()
    files = list(index.files)
    # The checkpoint on disk knows the first three files only; the later ones were never flushed.
    store.checkpoint.index_timestamp = files[2].end_timestamp
    store.checkpoint.flush()
    crashed = make_indexed(crash_copy(store, tmp_path / "crashed"), **QUIET)
    assert crashed.index_service is not None
    assert crashed.index_service.dropped_files == [f.name for f in files[3:]]
    assert crashed.index_service.wait_indexed() and crashed.index_service.rebuilt_messages == 9
    for i in range(18):
        assert bodies(crashed.query_message_by_key("orders", f"u{i}")) == [f"m{i}".encode()]
    assert len(crashed.query_message_by_key("orders", "all", max_messages=64)) == 18


def crash_after_a_flush(make_indexed: StoreFactory, tmp_path: Path) -> tuple[MessageStore, Path]:
    """Messages 0-4 indexed and flushed, 5-9 indexed since; then a SIGKILL. Returns the live store
    (one index file) and the crashed copy."""
    store = make_indexed(tmp_path / "live", max_index_count=1000, **QUIET)  # one file for everything
    put_keyed(store, 5)
    index = store.index_service
    assert index is not None and index.wait_indexed()
    index.flush()  # the header on disk says 5 messages, and so does the checkpoint
    put_keyed(store, 5, start=5)  # indexed in memory (and in the page cache), header not flushed
    assert index.wait_indexed()
    return store, crash_copy(store, tmp_path / "crashed")


def test_after_a_crash_the_last_file_is_rolled_back_to_its_last_flush(
    make_indexed: StoreFactory, tmp_path: Path
) -> None:
    store, copy = crash_after_a_flush(make_indexed, tmp_path)
    crashed = make_indexed(copy, max_index_count=1000, **QUIET)
    assert crashed.index_service is not None
    assert crashed.index_service.dropped_files == []
    assert crashed.index_service.wait_indexed()
    assert crashed.index_service.rebuilt_messages == 5  # only what came after the flush
    assert bodies(crashed.query_message_by_key("orders", "k0")) == [b"m9", b"m6", b"m3", b"m0"]
    assert len(crashed.query_message_by_key("orders", "all")) == 10  # each message once


def test_after_a_power_loss_a_file_missing_entries_its_slots_need_is_rebuilt(
    make_indexed: StoreFactory, tmp_path: Path
) -> None:
    store, copy = crash_after_a_flush(make_indexed, tmp_path)
    assert store.index_service is not None
    name = store.index_service.files[0].name
    # The slot pages reached the disk, the pages of the entries they point at did not.
    path = copy / "index" / name
    data = bytearray(path.read_bytes())
    counted = HEADER.unpack_from(data, 0)[5]
    entries_at = HEADER_SIZE + SLOTS * 4
    data[entries_at + counted * 20 : entries_at + (counted + 15) * 20] = bytes(15 * 20)
    path.write_bytes(bytes(data))
    crashed = make_indexed(copy, max_index_count=1000, **QUIET)
    assert crashed.index_service is not None
    assert crashed.index_service.dropped_files == [name]
    assert crashed.index_service.wait_indexed() and crashed.index_service.rebuilt_messages == 10
    assert bodies(crashed.query_message_by_key("orders", "k0")) == [b"m9", b"m6", b"m3", b"m0"]


def test_index_entries_past_a_cut_commitlog_are_trimmed(make_indexed: StoreFactory) -> None:
    store = make_indexed()
    first, torn = store.append([message(body=b"kept", KEYS="a"), message(body=b"torn", KEYS="b")])
    store.close()
    # The second record is corrupt on disk: recovery cuts the log before it.
    path = store.config.commitlog_dir / "0".zfill(20)
    data = bytearray(path.read_bytes())
    struct.pack_into(">i", data, torn.physical_offset + POS_BODYCRC, 12345)
    path.write_bytes(bytes(data))
    store = make_indexed()
    assert store.commitlog.max_offset == torn.physical_offset
    assert store.query_message_by_key("orders", "b") == []
    replacement = store.append([message(body=b"new", KEYS="c")])[0]
    assert replacement.physical_offset == torn.physical_offset  # the same bytes, another message
    assert store.query_message_by_key("orders", "b") == []
    assert bodies(store.query_message_by_key("orders", "c")) == [b"new"]
    assert bodies(store.query_message_by_key("orders", "a")) == [b"kept"]


def test_a_lost_index_directory_is_rebuilt_from_the_commitlog(make_indexed: StoreFactory) -> None:
    store = make_indexed()
    put_keyed(store, 12)
    store.close()
    shutil.rmtree(store.config.index_dir)
    store = make_indexed()
    assert store.index_service is not None and store.index_service.wait_indexed()
    assert store.index_service.rebuilt_messages == 12
    assert bodies(store.query_message_by_key("orders", "k0")) == [b"m9", b"m6", b"m3", b"m0"]


def test_the_checkpoint_follows_the_index_flushes(make_indexed: StoreFactory) -> None:
    store = make_indexed(max_index_count=1000)
    last = put_keyed(store, 3)[-1]
    store.close()
    assert Checkpoint(store.config.checkpoint_path).index_timestamp == last.store_timestamp


def test_a_slot_pointing_past_the_header_is_detected(tmp_path: Path) -> None:
    index = IndexFile.create(tmp_path, "20240101000000000", 4, 10, 0, 1)
    index.index_messages([Keyed("orders", "a", "", 0)], [Placed(0, 100, 1)], 0, {})
    assert not index.has_entries_past_header()  # in memory the header knows entry 1
    index.next_entry = 1  # as the header of the last flush would say
    assert index.has_entries_past_header()
    index.close()


def test_rolling_back_to_the_header_restores_the_file_as_it_was_flushed(tmp_path: Path) -> None:
    def build(directory: Path, keys: list[str]) -> IndexFile:
        index = IndexFile.create(directory, "20240101000000000", 4, 20, 0, 1_000)
        records = [Keyed("orders", key, "", 0) for key in keys]
        placements = [Placed(100 * i, 100, 1_000 + i) for i in range(len(keys))]
        index.index_messages(records, placements, 0, {})
        return index

    flushed = ["a", "b", "c d"]
    reference = build(tmp_path / "reference", flushed)
    index = build(tmp_path / "crashed", [*flushed, "a", "e f", "b"])
    index.next_entry = reference.next_entry  # the header as the last flush wrote it
    assert index.roll_back_to_header()
    size = index_file_size(4, 20)
    assert index.mapped.view[HEADER_SIZE:size] == reference.mapped.view[HEADER_SIZE:size]
    reference.close()
    index.close()


# -- search by time ---------------------------------------------------------------------------------


def test_search_offset_finds_the_first_message_stored_at_or_after_a_time(store: MessageStore) -> None:
    stamps = []
    for i in range(12):  # two ConsumeQueue segments and then some
        stamps.append(store.append([message(body=f"m{i}".encode())])[0].store_timestamp)
        if i % 3 == 2:
            next_millisecond()
    for moment in {t + delta for t in stamps for delta in (-1, 0, 1)}:
        first_at_or_after = next((i for i, t in enumerate(stamps) if t >= moment), len(stamps))
        assert store.search_offset("orders", 0, moment) == first_at_or_after
    assert store.search_offset("orders", 0, 0) == 0
    assert store.search_offset("orders", 0, stamps[-1] + 1) == 12  # nothing yet: the max offset
    assert store.search_offset("orders", 1, stamps[0]) == 0  # an empty queue
    assert store.search_offset("nobody", 0, stamps[0]) == 0


def test_search_offset_never_answers_below_the_min_offset(make_indexed: StoreFactory) -> None:
    store = make_indexed()
    store.append([message(body=bytes([i]) * 400) for i in range(40)])
    store.close()
    (store.config.commitlog_dir / "0".zfill(20)).unlink()  # retention took the first segment
    store = make_indexed()
    minimum = store.min_offset("orders", 0)
    assert minimum > 0
    assert store.search_offset("orders", 0, 0) == minimum


def test_a_crash_that_also_lost_the_logs_tail_leaves_no_broken_chain(
    make_indexed: StoreFactory, tmp_path: Path
) -> None:
    # Slots written after the last flush point at entries of messages the crash took with it; kept,
    # they would splice the lists of unrelated keys together once new messages reuse those entries.
    store = make_indexed(tmp_path / "live", max_index_count=1000, **QUIET)
    put_keyed(store, 5)
    index = store.index_service
    assert index is not None and index.wait_indexed()
    index.flush()
    lost = put_keyed(store, 5, start=5)[3]  # messages 8 and 9 will not survive
    assert index.wait_indexed()
    copy = crash_copy(store, tmp_path / "crashed")
    segment = copy / "commitlog" / "0".zfill(20)
    data = bytearray(segment.read_bytes())
    struct.pack_into(">i", data, lost.physical_offset + POS_BODYCRC, 12345)
    segment.write_bytes(bytes(data))
    crashed = make_indexed(copy, max_index_count=1000, **QUIET)
    assert crashed.commitlog.max_offset == lost.physical_offset
    put_keyed(crashed, 6, start=20)
    expected = {f"k{j}": [i for i in [*range(8), *range(20, 26)] if i % 3 == j] for j in range(3)}
    for key, numbers in expected.items():
        assert bodies(crashed.query_message_by_key("orders", key)) == [
            f"m{i}".encode() for i in reversed(numbers)
        ]
    assert crashed.query_message_by_key("orders", "u8") == []


def test_a_message_with_more_keys_than_a_file_holds_keeps_the_first_ones(store: MessageStore) -> None:
    words = " ".join(f"w{i}" for i in range(12))  # 12 keys, 9 entries per file
    store.append([message(body=b"many", KEYS=words), message(body=b"next", KEYS="w0")])
    assert bodies(store.query_message_by_key("orders", "w0")) == [b"next", b"many"]
    assert bodies(store.query_message_by_key("orders", "w8")) == [b"many"]
    assert store.query_message_by_key("orders", "w9") == []


def test_a_store_closed_during_its_index_rebuild_indexes_everything_on_its_next_start(
    make_indexed: StoreFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The rebuild after a crash runs on the index thread while the store already serves: a close
    in the middle of it stops it cleanly, and the next start goes on from where it got."""
    store = make_indexed(max_index_count=200_000, max_hash_slots=50_000, **QUIET)
    for start in range(0, 6000, 1000):
        put_keyed(store, 1000, start=start)
    crashed_dir = crash_copy(store, tmp_path / "crashed")
    store.close()
    shutil.rmtree(crashed_dir / "index")  # everything is indexed again from the CommitLog

    crashed = make_indexed(crashed_dir, max_index_count=200_000, max_hash_slots=50_000, **QUIET)
    put_keyed(crashed, 1, start=6000)  # appended while the rebuild runs
    index = crashed.index_service
    assert index is not None
    index.stop()  # as close() does, before the thread's first pass got to the rebuild
    assert index.rebuild_interrupted and index.rebuilt_messages < 6000
    crashed.close()
    assert "failed to drain" not in caplog.text

    reopened = make_indexed(crashed_dir, max_index_count=200_000, max_hash_slots=50_000, **QUIET)
    for i in (0, 2999, 5999, 6000):
        assert bodies(reopened.query_message_by_key("orders", f"u{i}")) == [f"m{i}".encode()]
