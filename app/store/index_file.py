"""One hash index file: key -> CommitLog offsets, with RocketMQ's layout (SPEC 1.6).

All integers are big-endian::

    header, 40 B      begin store ts 8 | end store ts 8 | begin offset 8 | end offset 8 |
                      used slot count 4 | next entry number 4
    slots, 4 B each   number of the newest entry whose key hashes to the slot (0: none)
    entries, 20 B     key hash 4 | CommitLog offset 8 | seconds since begin ts 4 | previous entry 4

The entries of one slot form a linked list from the newest back, through "previous entry". Entry 0
is never used, so 0 means "none" everywhere. A lookup walks one list and keeps the entries whose
key hash matches: different keys can share a hash, so callers check the message itself.

The key hash is RocketMQ's (IndexFile.indexKeyHashMethod): the absolute value of Java's
``String.hashCode`` of ``topic#key``, 0 for Integer.MIN_VALUE, so that RocketMQ's own
``IndexFile.selectPhyOffset`` finds Wharf's keys. (Wharf's index files before this used CRC-32: a
store without the marker :data:`FORMAT_MARKER` has its index files rebuilt at its next start.)

One choice differs from RocketMQ, and says why:

* The begin/end offsets and timestamps cover every message the index has *seen*, indexed or not
  (RocketMQ covers only indexed ones); the end offset is exclusive. Recovery resumes indexing at the
  last file's end offset, so a store whose messages carry no keys is not re-walked at every start.

A file has its full size from the start but disk blocks only for its header, its slots and the
entries written so far plus a chunk (:data:`ENTRY_CHUNK`): a new file costs about 22 MB of disk
with the default 5,000,000 slots, not the 420 MB of 20,000,000 entries. Entries are written only
into allocated bytes (:meth:`IndexFile.index_messages` allocates the next chunk first); a chunk
that does not fit pauses indexing as a new file that does not fit does.

The header is written from memory only when the file is flushed, so the header on disk always
describes a state that was forced to disk completely; recovery compares it with the checkpoint.
"""

from __future__ import annotations

import calendar
import struct
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from app.store.atomic_file import fsync_directory
from app.store.errors import DiskFullError
from app.store.kernel import compiled
from app.store.mapped_file import Growth, MappedFile
from app.store.record_format import SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_ROLLBACK, java_hash_continue

HEADER = struct.Struct(">qqqqii")  # begin ts | end ts | begin offset | end offset | used slots | next entry
assert HEADER.size == 40
HEADER_SIZE = HEADER.size
SLOT = struct.Struct(">i")  # newest entry number of the slot
SLOT_SIZE = SLOT.size
ENTRY = struct.Struct(">iqii")  # key hash | CommitLog offset | seconds since begin ts | previous entry
assert ENTRY.size == 20
ENTRY_SIZE = ENTRY.size

MAX_INT = (1 << 31) - 1
# In the store's config directory (not the index directory, every file of which RocketMQ maps as
# an index file): says the index files hash keys as RocketMQ does. A store without it was written
# by a Wharf that hashed them with CRC-32; its index files are rebuilt.
FORMAT_MARKER = "indexFormat.json"
FORMAT = b'{"key_hash": "java-string-hashcode"}\n'
# Disk for entries is allocated this much at a time, ahead of the index thread.
ENTRY_CHUNK = 2 * 1024 * 1024
# Entries allocated ahead before a batch is indexed (more for a message with more keys).
ROOM_ENTRIES = 4096
# Entry times are whole seconds after the file's begin timestamp: a stored time can be up to this
# much earlier than the message's store timestamp.
TIME_RESOLUTION_MS = 999


class KeyedRecord(Protocol):
    """What indexing reads of a record (an appended EncodedRecord, or a CheckedRecord at recovery)."""

    @property
    def topic(self) -> str: ...

    @property
    def keys(self) -> str: ...

    @property
    def uniq_key(self) -> str: ...

    @property
    def sysflag(self) -> int: ...


class Placement(Protocol):
    """Where a record landed (an AppendResult, or the offset recovery found it at)."""

    @property
    def physical_offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def store_timestamp(self) -> int: ...


def positive_hash(h: int) -> int:
    """RocketMQ's indexKeyHashMethod of an unsigned 32-bit Java hash: ``Math.abs`` of the int, and 0
    for Integer.MIN_VALUE (whose absolute value is itself, negative)."""
    if h & 0x80000000:
        h = (1 << 32) - h
    return h & MAX_INT if h != 1 << 31 else 0


def python_key_hash(key: str) -> int:
    """The hash RocketMQ files an index key (``topic#key``) under."""
    return positive_hash(java_hash_continue(0, key))


# A lookup's hash: the kernel's when it is loaded (a Python loop over the key's characters costs
# a lookup several microseconds), else its twin.
key_hash = compiled.index_key_hash if compiled is not None else python_key_hash


def topic_prefix(topic: str) -> int:
    """Java's hash of ``topic#`` (unsigned), where every key hash of the topic goes on from."""
    return java_hash_continue(0, f"{topic}#")


def index_file_size(max_hash_slots: int, max_index_count: int) -> int:
    return HEADER_SIZE + max_hash_slots * SLOT_SIZE + max_index_count * ENTRY_SIZE


def index_growth(max_hash_slots: int) -> Growth:
    """A new file allocates its header, its slots (written anywhere at random) and a chunk of
    entries; then entries a chunk at a time."""
    return Growth(HEADER_SIZE + max_hash_slots * SLOT_SIZE + ENTRY_CHUNK, ENTRY_CHUNK)


def index_file_name(timestamp_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in UTC, as RocketMQ names index files (UTC keeps names in order)."""
    seconds, millis = divmod(timestamp_ms, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.gmtime(seconds)) + f"{millis:03d}"


def index_file_time(name: str) -> int:
    """The creation time in ms that :func:`index_file_name` encoded."""
    return calendar.timegm(time.strptime(name[:14], "%Y%m%d%H%M%S")) * 1000 + int(name[14:17])


class IndexFile:
    """An index file mapped in memory. One thread writes (the index thread); any thread reads."""

    __slots__ = (
        "mapped",
        "max_hash_slots",
        "max_index_count",
        "begin_timestamp",
        "end_timestamp",
        "begin_offset",
        "end_offset",
        "used_slots",
        "next_entry",
        "growth",
        "stalled",
        "_entries_at",
    )

    def __init__(self, mapped: MappedFile, max_hash_slots: int, max_index_count: int) -> None:
        self.mapped = mapped
        self.max_hash_slots = max_hash_slots
        self.max_index_count = max_index_count
        header: tuple[int, int, int, int, int, int] = HEADER.unpack_from(mapped.mm, 0)
        self.begin_timestamp: int = header[0]
        self.end_timestamp: int = header[1]
        self.begin_offset: int = header[2]
        self.end_offset: int = header[3]
        self.used_slots: int = header[4]
        self.next_entry: int = max(header[5], 1)
        self._entries_at = HEADER_SIZE + max_hash_slots * SLOT_SIZE
        self.growth = index_growth(max_hash_slots)
        # Why the last index_messages stopped short of a full file: no room for the next chunk.
        self.stalled: DiskFullError | None = None

    @classmethod
    def create(
        cls,
        directory: Path,
        name: str,
        max_hash_slots: int,
        max_index_count: int,
        begin_offset: int,
        begin_timestamp: int,
    ) -> IndexFile:
        """A new, empty file with its slots and first entries allocated (DiskFullError when they do
        not fit), whose coverage starts at ``begin_offset``; header forced to disk."""
        directory.mkdir(parents=True, exist_ok=True)
        size = index_file_size(max_hash_slots, max_index_count)
        mapped = MappedFile(directory / name, size, first_chunk=index_growth(max_hash_slots).first)
        index = cls(mapped, max_hash_slots, max_index_count)
        index.begin_offset = index.end_offset = begin_offset
        index.begin_timestamp = index.end_timestamp = begin_timestamp
        index.flush()
        fsync_directory(directory)
        return index

    @classmethod
    def load(cls, path: Path, max_hash_slots: int, max_index_count: int) -> IndexFile:
        """Map an existing file; StoreConfigError if its size does not match the configuration."""
        size = index_file_size(max_hash_slots, max_index_count)
        first = index_growth(max_hash_slots).first
        return cls(MappedFile(path, size, first_chunk=first), max_hash_slots, max_index_count)

    @property
    def name(self) -> str:
        return self.mapped.path.name

    @property
    def is_full(self) -> bool:
        return self.next_entry >= self.max_index_count

    @property
    def entry_count(self) -> int:
        return self.next_entry - 1

    # -- writing (index thread only) --------------------------------------------------------------

    def index_messages(
        self,
        records: Sequence[KeyedRecord],
        placements: Sequence[Placement],
        start: int,
        prefixes: dict[str, int],
        check_room: Callable[[int], None] | None = None,
    ) -> int:
        """Index messages from ``start`` on, in log order, until they are done or the next one's
        keys do not all fit; returns the position of the first message not indexed.

        One message's entries always share a file (only a message with more keys than an empty
        file holds is cut short). ``prefixes`` caches the CRC of "topic#" per topic. Entries go
        only into allocated bytes: the next chunk is allocated first, and when it does not fit,
        indexing stops there with :attr:`stalled` set (``check_room`` vets each chunk's size).
        """
        self.stalled = None
        room = ROOM_ENTRIES
        position = start
        while True:
            wanted = min(self.max_index_count, self.next_entry + room)
            try:
                self.mapped.reserve(self._entries_at + wanted * ENTRY_SIZE, self.growth, check_room)
            except DiskFullError as error:
                self.stalled = error
                return position
            limit = min(self.max_index_count, (self.mapped.allocated - self._entries_at) // ENTRY_SIZE)
            before = position
            position = self._index_within(records, placements, position, prefixes, limit)
            if position >= len(records) or limit >= self.max_index_count:
                return position
            if position == before:
                room *= 2  # one message with more keys than the room allocated

    def _index_within(
        self,
        records: Sequence[KeyedRecord],
        placements: Sequence[Placement],
        start: int,
        prefixes: dict[str, int],
        limit: int,
    ) -> int:
        """:meth:`index_messages` with no entry numbered ``limit`` or more: the compiled kernel's
        loop when it is loaded, else :meth:`python_index_messages`."""
        if compiled is None:
            return self.python_index_messages(records, placements, start, prefixes, limit)
        done: tuple[int, int, int, int, int] = compiled.index_messages(
            self.mapped.mm,
            records,
            placements,
            start,
            prefixes,
            self.max_hash_slots,
            self._entries_at,
            self.begin_timestamp,
            self.next_entry,
            limit,
            self.end_offset,
            self.end_timestamp,
        )
        position, self.next_entry, used, end_offset, self.end_timestamp = done
        self.used_slots += used
        if end_offset > self.end_offset:
            self.end_offset = end_offset
        return position

    def python_index_messages(
        self,
        records: Sequence[KeyedRecord],
        placements: Sequence[Placement],
        start: int,
        prefixes: dict[str, int],
        limit: int = 0,
    ) -> int:
        """The pure-Python twin of the kernel's index loop: the index thread's hot loop, hence one
        function with everything in locals. No entry is numbered ``limit`` or more (0: the file's
        entry count)."""
        mm = self.mapped.mm
        slots, entries_at, begin = self.max_hash_slots, self._entries_at, self.begin_timestamp
        unpack_slot, pack_slot, pack_entry = SLOT.unpack_from, SLOT.pack_into, ENTRY.pack_into
        hash_on = java_hash_continue
        number = self.next_entry
        limit = limit or self.max_index_count
        used = 0
        end_offset, end_timestamp = self.end_offset, self.end_timestamp
        position = start
        count = len(records)
        while position < count:
            record = records[position]
            placed = placements[position]
            topic, keys, uniq_key = record.topic, record.keys, record.uniq_key
            sysflag = record.sysflag
            if sysflag and sysflag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_ROLLBACK:
                keys = uniq_key = ""  # never looked up; prepared messages are, as in RocketMQ
            prefix = prefixes.get(topic)
            if prefix is None:
                prefix = prefixes[topic] = topic_prefix(topic)
            # The hash of "topic#key", continued from the topic's prefix.
            if keys:
                hashes = [positive_hash(hash_on(prefix, key)) for key in keys.split(" ") if key]
                if uniq_key:
                    hashes.append(positive_hash(hash_on(prefix, uniq_key)))
            elif uniq_key:
                hashes = [positive_hash(hash_on(prefix, uniq_key))]
            else:
                hashes = []
            if len(hashes) > limit - number:
                if number > 1:
                    break  # the next file takes this message
                hashes = hashes[: max(limit - number, 0)]
            offset = placed.physical_offset
            store_timestamp = placed.store_timestamp
            seconds = (store_timestamp - begin) // 1000
            if seconds < 0:
                seconds = 0
            elif seconds > MAX_INT:
                seconds = MAX_INT
            for hashed in hashes:
                slot_at = HEADER_SIZE + (hashed % slots) * SLOT_SIZE
                (previous,) = unpack_slot(mm, slot_at)
                if previous <= 0 or previous >= number:  # empty, or written after the last flush
                    previous = 0
                    used += 1
                pack_entry(mm, entries_at + number * ENTRY_SIZE, hashed, offset, seconds, previous)
                pack_slot(mm, slot_at, number)  # after the entry: a reader never follows a blank
                number += 1
            end_offset = offset + placed.size
            if store_timestamp > end_timestamp:
                end_timestamp = store_timestamp
            position += 1
        self.used_slots += used
        self.next_entry = number
        if end_offset > self.end_offset:
            self.end_offset = end_offset
        self.end_timestamp = end_timestamp
        return position

    def flush(self) -> None:
        """Write the header from memory and force the whole file to disk."""
        HEADER.pack_into(
            self.mapped.mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_offset,
            self.end_offset,
            self.used_slots,
            self.next_entry,
        )
        self.mapped.sync()

    # -- reading (any thread) --------------------------------------------------------------------

    def overlaps(self, begin_ms: int, end_ms: int) -> bool:
        """Whether the file's time range meets [begin_ms, end_ms]."""
        return self.begin_timestamp <= end_ms and begin_ms <= self.end_timestamp

    def select(
        self,
        hashed: int,
        begin_ms: int,
        end_ms: int,
        limit: int,
        found: list[int],
        accept: Callable[[int], bool],
    ) -> None:
        """Walk the key's list newest first, appending to ``found`` the offsets ``accept`` takes.

        Stops at the end of the list, at an entry older than ``begin_ms`` or when ``found`` holds
        ``limit`` offsets. Entry times are whole seconds, so the time test is widened by
        :data:`TIME_RESOLUTION_MS`; ``accept`` checks the exact store time.
        """
        mm = self.mapped.mm
        count = self.next_entry
        (number,) = SLOT.unpack_from(mm, HEADER_SIZE + (hashed % self.max_hash_slots) * SLOT_SIZE)
        base, entries_at = self.begin_timestamp, self._entries_at
        while 0 < number < count and len(found) < limit:
            stored_hash, offset, seconds, previous = ENTRY.unpack_from(mm, entries_at + number * ENTRY_SIZE)
            if seconds < 0:
                break
            stored_at = base + seconds * 1000
            in_time = stored_at <= end_ms and stored_at + TIME_RESOLUTION_MS >= begin_ms
            if stored_hash == hashed and in_time and accept(offset):
                found.append(offset)
            if stored_at + TIME_RESOLUTION_MS < begin_ms or previous >= number:
                break
            number = previous

    # -- recovery --------------------------------------------------------------------------------

    def has_entries_past_header(self) -> bool:
        """Whether a slot points at an entry the header does not count: written after the last
        flush, before a crash."""
        raw = array("i")
        raw.frombytes(self.mapped.view[HEADER_SIZE : self._entries_at])
        if sys.byteorder == "little":
            raw.byteswap()
        return max(raw, default=0) >= self.next_entry

    def roll_back_to_header(self) -> bool:
        """After a crash, undo the entries written since the last flush, so that the file is what
        its header says; False when that cannot be done and the file must be rebuilt.

        The header is written only by a flush, so entries past its count came later. A slot that
        points at one of them gets back the head its list had at the flush, found by following
        "previous entry" down below the count. After a killed process every such entry is in the
        page cache and this always works; after a power loss an entry a slot needs may be missing
        (all zero), and then it does not.
        """
        mm = self.mapped.mm
        count, limit = self.next_entry, self.max_index_count
        slots, entries_at = self.max_hash_slots, self._entries_at
        blank = (0, 0, 0, 0)
        touched = set()
        number = count
        while number < limit:
            entry = ENTRY.unpack_from(mm, entries_at + number * ENTRY_SIZE)
            if entry == blank:
                break
            touched.add(entry[0] % slots)
            number += 1
        for slot in touched:
            slot_at = HEADER_SIZE + slot * SLOT_SIZE
            (head,) = SLOT.unpack_from(mm, slot_at)
            while head >= count:
                if head >= limit:
                    return False
                entry = ENTRY.unpack_from(mm, entries_at + head * ENTRY_SIZE)
                if entry == blank or entry[3] >= head:
                    return False
                head = entry[3]
            SLOT.pack_into(mm, slot_at, head)
        # Zeroed, so that nothing finds the undone entries again, even after another crash.
        mm[entries_at + count * ENTRY_SIZE : entries_at + number * ENTRY_SIZE] = bytes(
            (number - count) * ENTRY_SIZE
        )
        return not self.has_entries_past_header()

    def close(self) -> None:
        self.mapped.close()

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.name}, entries={self.entry_count}, offsets=[{self.begin_offset}, "
            f"{self.end_offset}), ts=[{self.begin_timestamp}, {self.end_timestamp}])"
        )
