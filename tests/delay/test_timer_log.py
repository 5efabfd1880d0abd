"""The timer log and wheel (app/store/timer_log.py): units come out in time order and only once
due, the log is cut back to its checkpoint and the wheel rebuilt at a restart, and a segment goes
only when nothing in it is still to come."""

from __future__ import annotations

from pathlib import Path

from app.store.timer_log import UNIT, TimerCheckpoint, TimerLog, TimerUnit, TimerWheel

T0 = 1_700_000_000_000  # a whole second, in epoch ms


def unit(due_ms: int, offset: int, deliver_ms: int | None = None) -> TimerUnit:
    return TimerUnit(due_ms, due_ms if deliver_ms is None else deliver_ms, offset)


def opened(directory: Path, log_end: int = 0, through_ms: int = T0, segment_units: int = 1024) -> TimerWheel:
    log = TimerLog(directory, segment_units)
    log.open(log_end, through_ms)
    return TimerWheel(log, through_ms)


def test_units_come_out_in_time_order_and_only_when_due(tmp_path: Path) -> None:
    wheel = opened(tmp_path)
    wheel.add([unit(T0 + 2_500, 1), unit(T0 + 1_200, 2), unit(T0 + 1_100, 3), unit(T0 + 2_000, 4)])
    assert wheel.take_due(T0 + 1_099, 100) == []
    assert [u.commitlog_offset for u in wheel.take_due(T0 + 1_200, 100)] == [3, 2]
    assert [u.commitlog_offset for u in wheel.take_due(T0 + 2_499, 100)] == [4]
    assert [u.commitlog_offset for u in wheel.take_due(T0 + 9_000, 100)] == [1]
    assert wheel.take_due(T0 + 99_000, 100) == []


def test_a_unit_for_a_second_already_loaded_still_comes_out(tmp_path: Path) -> None:
    wheel = opened(tmp_path)
    assert wheel.take_due(T0 + 1_100, 100) == []  # second T0 + 1 s is loaded now
    wheel.add([unit(T0 + 1_900, 7)])
    assert wheel.take_due(T0 + 1_899, 100) == []
    assert wheel.take_due(T0 + 1_900, 100) == [unit(T0 + 1_900, 7)]


def test_take_due_hands_out_at_most_the_limit(tmp_path: Path) -> None:
    wheel = opened(tmp_path)
    wheel.add([unit(T0 + 1_000 + n, n) for n in range(10)])
    assert [u.commitlog_offset for u in wheel.take_due(T0 + 5_000, 4)] == [0, 1, 2, 3]
    assert wheel.through_ms(T0 + 5_000) == T0 + 1_003  # unit 4 (due at +1004) is still to come
    assert [u.commitlog_offset for u in wheel.take_due(T0 + 5_000, 100)] == [4, 5, 6, 7, 8, 9]
    assert wheel.through_ms(T0 + 5_000) == T0 + 5_000


def test_put_back_units_come_out_again(tmp_path: Path) -> None:
    wheel = opened(tmp_path)
    wheel.add([unit(T0 + 1_000, 1)])
    taken = wheel.take_due(T0 + 1_000, 10)
    wheel.put_back(taken)
    assert wheel.through_ms(T0 + 1_000) == T0 + 999
    assert wheel.take_due(T0 + 1_000, 10) == taken


def test_the_units_of_a_second_are_one_chain_in_the_log(tmp_path: Path) -> None:
    wheel = opened(tmp_path)
    wheel.add([unit(T0 + 3_000 + n, n) for n in range(500)] + [unit(T0 + 4_000, 500)])
    assert len(wheel.log.heads) == 2  # memory: one entry per second, not per unit
    assert (tmp_path / f"{0:020d}").stat().st_size == 501 * UNIT.size


def test_a_restart_rebuilds_the_pending_units_and_forgets_the_delivered(tmp_path: Path) -> None:
    wheel = opened(tmp_path)
    wheel.add([unit(T0 + 1_100, 1), unit(T0 + 1_700, 2), unit(T0 + 5_000, 3), unit(T0 + 1_400, 4)])
    assert [u.commitlog_offset for u in wheel.take_due(T0 + 1_500, 10)] == [1, 4]
    checkpoint = TimerCheckpoint(0, wheel.log.flush(), wheel.through_ms(T0 + 1_500))
    wheel.log.close()

    again = opened(tmp_path, checkpoint.log_end, checkpoint.through_ms)
    assert [u.commitlog_offset for u in again.take_due(T0 + 9_000, 10)] == [2, 3]


def test_a_restart_cuts_the_log_back_to_the_checkpoint(tmp_path: Path) -> None:
    wheel = opened(tmp_path)
    wheel.add([unit(T0 + 2_000, 1)])
    log_end = wheel.log.flush()
    wheel.add([unit(T0 + 2_000, 2), unit(T0 + 3_000, 3)])  # appended, never checkpointed
    wheel.log.close()
    with open(tmp_path / f"{0:020d}", "ab") as torn:
        torn.write(b"\x01" * 7)  # and a unit cut short by a crash

    again = opened(tmp_path, log_end)
    assert again.log.end == log_end == UNIT.size
    assert again.take_due(T0 + 9_000, 10) == [unit(T0 + 2_000, 1)]
    again.add([unit(T0 + 9_500, 4)])  # the log goes on from the cut
    assert again.take_due(T0 + 9_500, 10) == [unit(T0 + 9_500, 4)]


def test_a_segment_goes_once_all_its_units_are_past(tmp_path: Path) -> None:
    wheel = opened(tmp_path, segment_units=4)
    wheel.add([unit(T0 + 1_000 + n * 1_000, n) for n in range(8)] + [unit(T0 + 60_000, 8)])
    log = wheel.log
    assert log.starts == [0, 4 * UNIT.size, 8 * UNIT.size]
    wheel.take_due(T0 + 4_000, 100)  # units 0-3, the whole first segment
    assert log.trim(wheel.through_ms(T0 + 4_000) // 1000 * 1000) == 0  # unit 3's second is not over
    wheel.take_due(T0 + 5_500, 100)
    assert log.trim(wheel.through_ms(T0 + 5_500) // 1000 * 1000) == 1
    assert log.starts == [4 * UNIT.size, 8 * UNIT.size]
    assert not (tmp_path / f"{0:020d}").exists()
    assert [u.commitlog_offset for u in wheel.take_due(T0 + 99_000, 100)] == [5, 6, 7, 8]
    assert log.trim(T0 + 99_000) == 1  # the last segment, being written, stays
    assert log.starts == [8 * UNIT.size]


def test_the_checkpoint_survives_a_reload(tmp_path: Path) -> None:
    path = tmp_path / "config" / "timerCheckpoint.json"
    assert TimerCheckpoint.load(path) == TimerCheckpoint()
    TimerCheckpoint(12, 320, T0).save(path)
    assert TimerCheckpoint.load(path) == TimerCheckpoint(12, 320, T0)
