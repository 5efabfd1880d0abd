"""The produce idempotency window: a producer-supplied unique id seen again answers the first message.

What is remembered is where the first message lies, not its answer: ``(topic, unique id) -> CommitLog
offset``. A hit is answered from the record at that offset, after checking that the record really
carries that topic and unique id, so a digest collision, a record removed by retention or a deleted
topic's record is a miss, never a wrong answer. Because the unique id is stored with the message,
the window is rebuilt at start from the records of the last ``window_s`` (:meth:`restore`).

Memory is what bounds the window (``max_entries``, 1M by default), so entries are compact: no Python
object per entry. A 63-bit digest of the key and the offset, 16 bytes, sit in a hash table;
insertion order - which is expiry order - is a ring of the same 16 bytes and the expiry times. The
compiled kernel's ``DigestTable`` keeps them in C memory (an open-addressing table at most three
quarters full): 59-73 bytes per entry (tracemalloc, 1M and 200k entries), 0.26 us to remember an id
and 0.39 us to look one up. Its pure-Python twin, :class:`BucketTable`, keeps them in the
``bytearray`` buckets of a linear hash table (buckets split one at a time as it grows, so no insert
rehashes the whole table), a ``bytearray`` ring and an ``array('d')``: about 50 bytes per entry,
1.7 and 1.2 us. A dict of tuples and futures would take some 850 bytes.

An id is remembered as soon as its message is appended, before the group commit: a retry racing
the first request finds the record and waits for the same group commit rather than storing a copy.
"""

from __future__ import annotations

import struct
import sys
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from app.store.kernel import compiled
from app.store.record_format import SYSFLAG_PRODUCER_UNIQ_KEY, EncodedRecord
from app.store.results import AppendResult

Key = tuple[str, str]  # (topic, unique id)

# One entry of a bucket, and of the insertion-order ring: 63-bit digest | CommitLog offset.
ENTRY = struct.Struct("<qq")
assert ENTRY.size == 16
# Digests are negative and offsets are not, so a digest never matches an offset field.
DIGEST_SIGN = -(1 << 63)
FIRST_LEVEL = 4  # 16 buckets to start with
MAX_LOAD = 8  # entries per bucket before one more bucket is split off
COMPACT_AFTER = 4096
NATIVE_LITTLE_ENDIAN = (
    sys.byteorder == "little"
)  # expired ring entries tolerated before the ring is moved down


def digest(key: Key) -> int:
    """A 63-bit digest of (topic, unique id), negative. Python's string hash is keyed per process,
    which is enough: the table lives in one process and is rebuilt, digests and all, at start."""
    return hash(key) | DIGEST_SIGN


def _position(bucket: bytearray, packed_digest: bytes | bytearray) -> int:
    """Where the entry with this digest starts in ``bucket``, -1 if none. bytearray.find runs in C
    without making an object per entry; a match that straddles two entries is skipped."""
    position = bucket.find(packed_digest)
    while position > 0 and position % ENTRY.size:
        position = bucket.find(packed_digest, position + 1)
    return position


class IdempotencyWindow:
    def __init__(
        self, window_s: float, max_entries: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self.max_entries = max_entries
        self.clock = clock
        self._table: DigestTable = BucketTable() if compiled is None else compiled.DigestTable()

    @property
    def enabled(self) -> bool:
        return self.window_s > 0 and self.max_entries > 0

    def __len__(self) -> int:
        return self._table.count

    # -- remembered offsets ----------------------------------------------------------------------

    def find(self, key: Key) -> int | None:
        """The CommitLog offset remembered for ``key``, None if none (or it expired)."""
        table = self._table
        table.expire(self.clock())
        return table.find(hash(key) | DIGEST_SIGN)  # digest(key), inlined: this runs per message

    def put(self, key: Key, physical_offset: int) -> None:
        """Remember that ``key``'s first message lies at ``physical_offset``, for ``window_s``."""
        self.put_many(key[0], ((key[1], physical_offset),))

    def put_many(self, topic: str, entries: Iterable[tuple[str, int]]) -> None:
        """Remember each (unique id, CommitLog offset) of ``topic``, for ``window_s``: a batch's,
        with one look at the clock and at what expired."""
        now = self.clock()
        table = self._table
        table.expire(now)
        table.put_many(topic, entries, now + self.window_s, self.max_entries)

    def first_known(self, topic: str, ids: Sequence[str], start: int = 0) -> int:
        """The index of the first of ``ids`` (from ``start``) remembered on ``topic``; -1 if none."""
        table = self._table
        table.expire(self.clock())
        return table.first_known(topic, ids, start)

    def put_records(
        self, topic: str, records: Sequence[EncodedRecord], appended: Sequence[AppendResult]
    ) -> None:
        """Remember where each of ``records`` with a supplied unique id was stored (``appended``)."""
        now = self.clock()
        table = self._table
        table.expire(now)
        table.put_records(topic, records, appended, now + self.window_s, self.max_entries)

    def restore(self, entries: Iterable[tuple[Key, int, float]]) -> int:
        """Remember stored messages again: (key, offset, age in seconds), oldest first, as read
        from the CommitLog at start. Entries already past the window are skipped; returns how
        many were remembered."""
        now = self.clock()
        remembered = 0
        latest = float("-inf")
        for key, physical_offset, age_s in entries:
            if age_s >= self.window_s:
                continue
            # Expiry times must not go backwards in the ring, even if the wall clock did.
            latest = max(latest, now + self.window_s - max(age_s, 0.0))
            self._table.insert(digest(key), physical_offset, latest, self.max_entries)
            remembered += 1
        return remembered


class DigestTable(Protocol):
    """Digests and offsets in a hash table, with their insertion order (expiry order) in a ring:
    :class:`BucketTable`, or the compiled kernel's ``DigestTable`` (a C hash table, same results)."""

    @property
    def count(self) -> int: ...

    def find(self, d: int) -> int | None: ...

    def insert(self, d: int, physical_offset: int, expires: float, max_entries: int) -> None: ...

    def put_many(
        self, topic: str, entries: Iterable[tuple[str, int]], expires: float, max_entries: int
    ) -> None: ...

    def first_known(self, topic: str, ids: Sequence[str], start: int) -> int: ...

    def put_records(
        self,
        topic: str,
        records: Sequence[EncodedRecord],
        appended: Sequence[AppendResult],
        expires: float,
        max_entries: int,
    ) -> None: ...

    def expire(self, now: float) -> None: ...


class BucketTable:
    """The pure-Python digest table (the twin of the kernel's): a linear hash table of ``bytearray``
    buckets, and the insertion-order ring in a ``bytearray`` and an ``array('d')`` of expiry times."""

    def __init__(self) -> None:
        self._level = FIRST_LEVEL
        self._split = 0  # buckets below this one are already split at the current level
        self._buckets = [bytearray() for _ in range(1 << FIRST_LEVEL)]
        self.count = 0
        # Insertion order, which is expiry order: entries, and when each expires. Entries before
        # _head are gone.
        self._ring = bytearray()
        self._ring_expiry = array("d")
        self._head = 0

    def find(self, d: int) -> int | None:
        """The offset remembered for digest ``d``, None if none."""
        index = d & ((1 << self._level) - 1)  # self._bucket_of(d), inlined
        if index < self._split:
            index = d & ((1 << (self._level + 1)) - 1)
        bucket = self._buckets[index]
        position = _position(bucket, d.to_bytes(8, "little", signed=True))
        if position < 0:
            return None
        return int(ENTRY.unpack_from(bucket, position)[1])

    def put_many(
        self, topic: str, entries: Iterable[tuple[str, int]], expires: float, max_entries: int
    ) -> None:
        insert = self.insert
        for unique_id, physical_offset in entries:
            insert(hash((topic, unique_id)) | DIGEST_SIGN, physical_offset, expires, max_entries)

    def first_known(self, topic: str, ids: Sequence[str], start: int) -> int:
        for index in range(start, len(ids)):
            if self.find(hash((topic, ids[index])) | DIGEST_SIGN) is not None:
                return index
        return -1

    def put_records(
        self,
        topic: str,
        records: Sequence[EncodedRecord],
        appended: Sequence[AppendResult],
        expires: float,
        max_entries: int,
    ) -> None:
        self.put_many(
            topic,
            (
                (record.uniq_key, result.physical_offset)
                for record, result in zip(records, appended, strict=True)
                if record.sysflag & SYSFLAG_PRODUCER_UNIQ_KEY
            ),
            expires,
            max_entries,
        )

    def insert(self, d: int, physical_offset: int, expires: float, max_entries: int) -> None:
        """Remember digest ``d`` at ``physical_offset`` until ``expires`` (at the ring's end), then
        drop the oldest entries while more than ``max_entries`` remain."""
        entry = ENTRY.pack(d, physical_offset)
        index = d & ((1 << self._level) - 1)  # self._bucket_of(d), inlined
        if index < self._split:
            index = d & ((1 << (self._level + 1)) - 1)
        bucket = self._buckets[index]
        position = _position(bucket, entry[:8])
        if position >= 0:  # the same key again (its record was gone), or a digest collision
            bucket[position : position + ENTRY.size] = entry
        else:
            bucket += entry
            self.count += 1
            if self.count > MAX_LOAD * len(self._buckets):
                self._split_one()
        self._ring += entry
        self._ring_expiry.append(expires)
        while self.count > max_entries:
            self._drop_oldest()

    def expire(self, now: float) -> None:
        """Drop the entries that expired before ``now``."""
        expiry = self._ring_expiry
        while self._head < len(expiry) and expiry[self._head] < now:
            self._drop_oldest()

    # -- the linear hash table and the ring ------------------------------------------------------

    def _bucket_of(self, d: int) -> int:
        index = d & ((1 << self._level) - 1)
        if index < self._split:
            index = d & ((1 << (self._level + 1)) - 1)
        return index

    def _split_one(self) -> None:
        """Split the next bucket in turn into itself and a new one (linear hashing)."""
        old = self._buckets[self._split]
        high_bit = 1 << self._level
        keep, move = bytearray(), bytearray()
        if NATIVE_LITTLE_ENDIAN:  # the entries' words read in place: digest, offset, digest, ...
            words = memoryview(old).cast("q")
            digests = [words[index] for index in range(0, len(words), 2)]
            words.release()
        else:
            digests = [d for d, _ in ENTRY.iter_unpack(old)]
        for number, d in enumerate(digests):
            start = number * ENTRY.size
            (move if d & high_bit else keep).extend(old[start : start + ENTRY.size])
        self._buckets[self._split] = keep
        self._buckets.append(move)
        self._split += 1
        if self._split == high_bit:
            self._level += 1
            self._split = 0

    def _drop_oldest(self) -> None:
        start = self._head * ENTRY.size
        entry = self._ring[start : start + ENTRY.size]
        bucket = self._buckets[self._bucket_of(ENTRY.unpack(entry)[0])]
        position = _position(bucket, entry[:8])
        # Only if no later insert of the same digest replaced this entry's offset.
        if position >= 0 and bucket[position : position + ENTRY.size] == entry:
            del bucket[position : position + ENTRY.size]
            self.count -= 1
        self._head += 1
        if self._head >= COMPACT_AFTER and self._head * 4 >= len(self._ring_expiry):
            del self._ring[: self._head * ENTRY.size]
            del self._ring_expiry[: self._head]
            self._head = 0
