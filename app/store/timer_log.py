"""The timer's storage: which scheduled messages fall due when, for delivery at any time (RocketMQ 5's
TimerLog and TimerWheel).

A message scheduled for a time is stored in the CommitLog like any other (in the timer topic); the
timer keeps one 32-byte unit per pending message in the *timer log*, segment files under
``timerlog/`` appended in the order units arrive::

    offset  field             size
    0       DUE_MS            8   when the unit is acted on: the delivery time, or earlier to roll
    8       DELIVER_MS        8   when the message is to be delivered (epoch ms)
    16      COMMITLOG_OFFSET  8   where the message lies in the CommitLog
    24      PREVIOUS          8   the unit appended before it for the same second of DUE_MS (-1: none)

The *wheel* is the newest unit of every second that has pending units, ``second -> position``; the
units of one second are found by following PREVIOUS back through the log. So memory grows with the
seconds that hold pending units (a few MB for the 259,200 seconds of three days), never with the
number of messages: a million pending units take 32 MB of disk and no Python object each.

:class:`TimerWheel` loads one second at a time into memory as it comes due and hands out the due
units in time order. Its progress is one number, ``through_ms``: every unit due at or before it has
been handed out. With the timer topic's consume offset and the log's length it makes the checkpoint
(:class:`TimerCheckpoint`, ``config/timerCheckpoint.json``), written after the log is forced. At
start the log is cut back to the checkpoint's length (units past it are read again from the timer
topic) and scanned once to rebuild the wheel from the units due after ``through_ms``. A segment is
deleted once every unit in it is due before the second ``through_ms`` falls in: the chains of that
second and later ones never pass through a deleted segment.
"""

from __future__ import annotations

import bisect
import heapq
import json
import os
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

from app.store.atomic_file import fsync_directory, write_atomically
from app.store.errors import StoreConfigError

UNIT = struct.Struct(">qqqq")  # due ms | deliver ms | CommitLog offset | previous unit position
assert UNIT.size == 32
NONE = -1
SEGMENT_UNITS = 1 << 20  # 32 MiB segments
SCAN_BYTES = UNIT.size * 65_536


class TimerUnit(NamedTuple):
    """A pending message: ordered by when it is due."""

    due_ms: int
    deliver_ms: int
    commitlog_offset: int


@dataclass(slots=True)
class TimerCheckpoint:
    """How far the timer got: the timer topic's offset read into the log, the log's forced length,
    and the time through which every due unit was delivered."""

    enqueue_offset: int = 0
    log_end: int = 0
    through_ms: int = 0

    @classmethod
    def load(cls, path: Path) -> TimerCheckpoint:
        try:
            document = json.loads(path.read_bytes())
            return cls(int(document["enqueue_offset"]), int(document["log_end"]), int(document["through_ms"]))
        except FileNotFoundError:
            return cls()
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreConfigError(f"{path} is not a timer checkpoint: {exc}") from None

    def save(self, path: Path) -> None:
        write_atomically(path, json.dumps(asdict(self)).encode())


class TimerLog:
    """The units on disk and the wheel's heads in memory. Single-threaded: its service owns it."""

    def __init__(self, directory: Path, segment_units: int = SEGMENT_UNITS) -> None:
        self.directory = directory
        self.segment_bytes = segment_units * UNIT.size
        self.starts: list[int] = []  # segment start positions, ascending
        self._fds: dict[int, int] = {}
        self._dirty: set[int] = set()
        self._new_names = False
        self.max_due: dict[int, int] = {}  # segment start -> latest DUE_MS in it
        self.heads: dict[int, int] = {}  # second -> position of its newest unit
        self.end = 0

    # -- life cycle ------------------------------------------------------------------------------

    def open(self, log_end: int, through_ms: int) -> int:
        """Cut the log back to ``log_end``, then rebuild the wheel from the units due after
        ``through_ms``. Returns how many units are pending."""
        self.directory.mkdir(parents=True, exist_ok=True)
        starts = sorted(int(path.name) for path in self.directory.iterdir() if path.name.isdigit())
        for start in reversed(starts):
            if start < log_end:
                break
            (self.directory / _name(start)).unlink()
            starts.pop()
        self.starts = starts
        self.end = log_end
        pending = 0
        for start in starts:
            fd = self._fd(start)
            length = min(os.fstat(fd).st_size, log_end - start) // UNIT.size * UNIT.size
            os.ftruncate(fd, length)
            self.end = start + length
            pending += self._scan(start, fd, length, through_ms)
        return pending

    def _scan(self, start: int, fd: int, length: int, through_ms: int) -> int:
        heads, latest, pending = self.heads, NONE, 0
        for chunk_at in range(0, length, SCAN_BYTES):
            chunk = os.pread(fd, min(SCAN_BYTES, length - chunk_at), chunk_at)
            position = start + chunk_at
            for due_ms, _, _, _ in UNIT.iter_unpack(chunk):
                latest = max(latest, due_ms)
                if due_ms > through_ms:
                    heads[due_ms // 1000] = position
                    pending += 1
                position += UNIT.size
        self.max_due[start] = latest
        return pending

    def close(self) -> None:
        self.flush()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    # -- units -----------------------------------------------------------------------------------

    def append(self, units: list[TimerUnit]) -> None:
        """Append units to the log and link each into its second's chain. Forced by :meth:`flush`."""
        heads = self.heads
        buffer = bytearray()
        start = self._writable_segment()
        for due_ms, deliver_ms, commitlog_offset in units:
            if self.end + len(buffer) - start >= self.segment_bytes:
                self._write(start, buffer)
                buffer.clear()
                start = self._writable_segment()
            second = due_ms // 1000
            heads_position = heads.get(second, NONE)
            heads[second] = self.end + len(buffer)
            buffer += UNIT.pack(due_ms, deliver_ms, commitlog_offset, heads_position)
            self.max_due[start] = max(self.max_due[start], due_ms)
        self._write(start, buffer)

    def _writable_segment(self) -> int:
        if not self.starts or self.end - self.starts[-1] >= self.segment_bytes:
            self.starts.append(self.end)
            self.max_due[self.end] = NONE
            self._new_names = True
        return self.starts[-1]

    def _write(self, start: int, buffer: bytearray) -> None:
        if buffer:
            os.pwrite(self._fd(start), buffer, self.end - start)
            self.end += len(buffer)
            self._dirty.add(start)

    def take_second(self, second: int, after_ms: int) -> list[TimerUnit]:
        """The units of ``second`` due after ``after_ms``, read back along its chain; the second
        leaves the wheel."""
        position = self.heads.pop(second, NONE)
        units = []
        first = self.starts[0] if self.starts else self.end
        while position >= first:
            start = self.starts[bisect.bisect_right(self.starts, position) - 1]
            due_ms, deliver_ms, commitlog_offset, position = UNIT.unpack(
                os.pread(self._fd(start), UNIT.size, position - start)
            )
            if due_ms > after_ms:
                units.append(TimerUnit(due_ms, deliver_ms, commitlog_offset))
        return units

    def flush(self) -> int:
        """Force what was appended; returns the log's length, now safe to checkpoint."""
        for start in self._dirty:
            os.fsync(self._fds[start])
        self._dirty.clear()
        if self._new_names:
            fsync_directory(self.directory)
            self._new_names = False
        return self.end

    def trim(self, before_ms: int) -> int:
        """Delete the segments (but the last) whose units are all due before ``before_ms``."""
        deleted = 0
        while len(self.starts) > 1 and self.max_due[self.starts[0]] < before_ms:
            start = self.starts.pop(0)
            del self.max_due[start]
            fd = self._fds.pop(start, None)
            if fd is not None:
                os.close(fd)
            self._dirty.discard(start)
            (self.directory / _name(start)).unlink()
            deleted += 1
        return deleted

    def _fd(self, start: int) -> int:
        fd = self._fds.get(start)
        if fd is None:
            fd = self._fds[start] = os.open(self.directory / _name(start), os.O_RDWR | os.O_CREAT, 0o644)
        return fd


def _name(start: int) -> str:
    return f"{start:020d}"


class TimerWheel:
    """Hands out due units in time order: the seconds that have come are loaded from the log into
    a heap, the later ones stay in the log's chains."""

    def __init__(self, log: TimerLog, through_ms: int) -> None:
        self.log = log
        self.loaded_before_s = through_ms // 1000  # seconds before this one are in the heap
        self.through_floor_ms = through_ms
        self.waiting: list[TimerUnit] = []  # heap of loaded units not handed out yet

    def __len__(self) -> int:
        return len(self.waiting)

    def add(self, units: list[TimerUnit]) -> None:
        """Units not due yet: into the heap if their second is loaded, else into the log."""
        later = []
        for unit in units:
            if unit.due_ms // 1000 < self.loaded_before_s:
                heapq.heappush(self.waiting, unit)
            else:
                later.append(unit)
        if later:
            self.log.append(later)

    def take_due(self, now_ms: int, limit: int) -> list[TimerUnit]:
        """Up to ``limit`` units due at or before ``now_ms``, earliest first."""
        waiting = self.waiting
        now_s = now_ms // 1000
        while self.loaded_before_s <= now_s and len(waiting) < limit:
            loaded = self.log.take_second(self.loaded_before_s, self.through_floor_ms)
            self.loaded_before_s += 1
            if loaded:
                waiting.extend(loaded)
                heapq.heapify(waiting)
        due: list[TimerUnit] = []
        while waiting and waiting[0].due_ms <= now_ms and len(due) < limit:
            due.append(heapq.heappop(waiting))
        return due

    def put_back(self, units: list[TimerUnit]) -> None:
        """Units handed out but not delivered (the store refused them for now)."""
        for unit in units:
            heapq.heappush(self.waiting, unit)

    def through_ms(self, now_ms: int) -> int:
        """The time through which every due unit has been handed out."""
        through = min(now_ms, self.loaded_before_s * 1000 - 1)
        if self.waiting:
            through = min(through, self.waiting[0].due_ms - 1)
        return max(through, self.through_floor_ms)

    def next_due_ms(self) -> int:
        """When to look again: the earliest loaded unit, else the next second to load."""
        next_second_ms = self.loaded_before_s * 1000
        return min(self.waiting[0].due_ms, next_second_ms) if self.waiting else next_second_ms
