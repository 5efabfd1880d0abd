"""The pop journal's files and the pop state's records, on their own (real files, no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.broker.pop_handle import ReceiptHandle, decode_handle
from app.broker.pop_journal import PopJournal, decode_records, encode_records
from app.broker.pop_state import PopQueue, PopRecord, QueueKey, RecordKind, apply, snapshot

H, A, P, S, V = RecordKind.HANDOUT, RecordKind.ACK, RecordKind.POSITION, RecordKind.SKIP, RecordKind.ADVANCE

HISTORY = [
    PopRecord(P, "g", "t", 0, 10),
    PopRecord(H, "g", "t", 0, 10, 5_000, 0, 1),
    PopRecord(H, "g", "t", 0, 11, 5_000, 0, 2),
    PopRecord(H, "g", "t", 0, 12, 5_000, 0, 3),
    PopRecord(A, "g", "t", 0, 10),
    PopRecord(H, "g", "t", 0, 11, 9_000, 1, 4),  # handed out again
    PopRecord(V, "g", "t", 0, 15),
    PopRecord(P, "g", "u", 3, 0),
    PopRecord(H, "g", "u", 3, 0, 1_000, 2, 5),
    PopRecord(H, "g", "u", 3, 1, 1_000, 0, 6),
    PopRecord(S, "g", "u", 3, 1),  # someone committed 1
    PopRecord(P, "h", "t", 0, 7),
    PopRecord(H, "h", "t", 0, 7, 1_000, 0, 7),
    PopRecord(P, "h", "t", 0, 2),  # the offset was moved back
]


def replay(records: list[PopRecord]) -> dict[QueueKey, PopQueue]:
    queues: dict[QueueKey, PopQueue] = {}
    for record in records:
        apply(queues, record)
    return queues


def state(queues: dict[QueueKey, PopQueue]) -> dict[QueueKey, tuple[int, int, list[tuple[int, object]]]]:
    return {key: (q.done, q.popped_until, list(q.inflight.items())) for key, q in queues.items()}


def test_the_records_say_what_is_done_in_flight_and_handed_out() -> None:
    found = state(replay(HISTORY))
    assert found[("g", "t", 0)] == (11, 15, [(11, (9_000, 1, 4)), (12, (5_000, 0, 3))])
    assert found[("g", "u", 3)] == (1, 2, [(1, (1_000, 0, 6))])
    assert found[("h", "t", 0)] == (2, 2, [])


def test_the_records_round_trip_through_their_encoding() -> None:
    data = encode_records(HISTORY)
    assert decode_records(data) == (HISTORY, len(data))


def test_a_cut_or_damaged_record_ends_the_log_there(tmp_path: Path) -> None:
    data = encode_records(HISTORY)
    good = len(encode_records(HISTORY[:5]))
    flipped = bytearray(data)
    flipped[good + 12] ^= 1
    assert decode_records(bytes(flipped)) == (HISTORY[:5], good)

    journal = PopJournal(tmp_path, sync=True, flush_interval_s=1)
    journal.log_path.write_bytes(data[: good + 9])  # a write cut inside the sixth record
    assert journal.load() == HISTORY[:5]
    assert journal.log_path.stat().st_size == good


def test_replaying_the_log_over_a_snapshot_that_holds_it_changes_nothing() -> None:
    # A crash between the snapshot's rename and the log's truncation leaves both.
    expected = state(replay(HISTORY))
    assert state(replay([*snapshot(replay(HISTORY)), *HISTORY])) == expected


def test_an_ack_of_a_queue_never_made_makes_nothing() -> None:
    assert replay([PopRecord(A, "g", "t", 0, 4), PopRecord(S, "g", "t", 0, 9)]) == {}


@pytest.mark.parametrize("sync", [False, True])
def test_compaction_replaces_the_snapshot_and_starts_the_log_over(tmp_path: Path, sync: bool) -> None:
    journal = PopJournal(tmp_path, sync=sync, flush_interval_s=0.05)
    journal.open(b"")
    journal.append(encode_records(HISTORY[:4])).result(10)
    compacted = journal.compact(encode_records(snapshot(replay(HISTORY[:4]))))
    assert compacted is not None
    journal.append(encode_records(HISTORY[4:])).result(10)
    compacted.result(10)
    assert not journal.compacting
    journal.close()
    assert journal.log_path.read_bytes() == encode_records(HISTORY[4:])
    assert not journal.old_path.exists()
    reloaded = PopJournal(tmp_path, sync=sync, flush_interval_s=0.05).load()
    assert state(replay(reloaded)) == state(replay(HISTORY))


@pytest.mark.parametrize("snapshot_written", [False, True])
def test_a_compaction_cut_short_loses_nothing(tmp_path: Path, snapshot_written: bool) -> None:
    # The log was renamed to the old log and a new one started; the crash came before the new
    # snapshot replaced the old one, or after, before the old log was removed.
    journal = PopJournal(tmp_path, sync=True, flush_interval_s=1)
    before = encode_records(snapshot(replay(HISTORY[:2])))
    journal.snapshot_path.write_bytes(
        encode_records(snapshot(replay(HISTORY[:8]))) if snapshot_written else before
    )
    journal.old_path.write_bytes(encode_records(HISTORY[2:8]))
    journal.log_path.write_bytes(encode_records(HISTORY[8:]))
    assert state(replay(journal.load())) == state(replay(HISTORY))


def test_an_append_after_close_is_refused(tmp_path: Path) -> None:
    journal = PopJournal(tmp_path, sync=True, flush_interval_s=1)
    journal.open(b"")
    journal.close()
    assert isinstance(journal.append(encode_records(HISTORY[:1])).exception(1), RuntimeError)


def test_expired_entries_come_earliest_deadline_first() -> None:
    queue = PopQueue(0)
    for offset, deadline in enumerate([30, 10, 20, 99]):
        queue.hand_out(offset, deadline, 0, offset + 100)
    queue.ack(2)
    taken = []
    for offset, entry in queue.expired(50):
        taken.append(offset)
        queue.hand_out(offset, 1_000, entry.reconsume_times + 1, entry.nonce + 1)
    assert taken == [1, 0]
    assert queue.next_deadline_ms() == 99


def test_a_receipt_handle_round_trips_and_garbage_is_no_handle() -> None:
    handle = ReceiptHandle("%RETRY%group-1", "orders", 65_535, 2**40, 2**64 - 1)
    text = handle.encode()
    assert decode_handle(text) == handle
    assert text.replace("-", "").replace("_", "").isalnum()  # url-safe, no padding
    for garbage in ["", "!!!", text[:-3], text + "AA", "AgAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "x" * 5000]:
        assert decode_handle(garbage) is None
