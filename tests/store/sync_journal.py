"""A journal of what every ``fsync``/``fdatasync``/``syncfs`` made durable, for power-loss tests.

``python -m tests.store.sync_journal`` runs the broker exactly as ``python -m app`` does, after
wrapping ``os.fsync``, ``os.fdatasync`` and the store's ``syncfs``
(:data:`app.store.atomic_file.syncfs`); the store forces data with nothing else: it never calls
``mmap.flush``. A sync of a regular file first reads the file's whole content (that is at least what
the sync makes durable), then calls the real function, then appends an event to the journal in
``$WHARF_TEST_SYNC_JOURNAL/journal.bin``: a sequence number (from 1 in each process that journals
into the file), ``time.monotonic()`` when the sync was asked for and when it returned (Linux's
CLOCK_MONOTONIC is system-wide, so both compare with the test process's clock), the asking thread's
name and how long it had waited for a CPU at those two instants (schedstat), the file's identity and
the 4 KiB pages that changed since that file's previous event. Everything written to the file before
the sync was asked for is in the content journaled: the content is read after that instant. A sync
of a directory records its listing, name -> identity. An identity is the inode number and the
inode's generation, since a file system reuses the number of a deleted file (a renamed-over
``topics.json`` gives its number to the next new segment); on a file system without generations it
is the inode number alone. Syncs of one file are serialised, so the journal never shows an older
content after a newer one.

A ``syncfs`` makes every file of the file system durable, and the directory entries too. The journal
records those the store owns: the tree under the directory the store synced (``syncfs`` is called on
a directory's descriptor). It reads the listing of every directory and the content of every regular
file of that tree, holding each one's lock, then calls the real ``syncfs``, then appends one event
per directory and per file, as the syncs of each would have. The locks are held across the call so
that a sync of one of those files meanwhile is journaled before or after all of it, never between its
read and its event; one ``syncfs`` is journaled at a time, so two of them never wait for each other's
locks (an ``fsync`` holds one lock only).

The event is written after the real sync returned and before the wrapper returns to the store, so a
producer acknowledged because of a sync always finds that sync in the journal with an earlier
timestamp than its acknowledgement. The journal itself is never forced: the test reads it after a
SIGKILL, which leaves the page cache intact. A partial last event (the broker killed while writing
it) is ignored by :func:`read_journal`.

Frame: ``length (4, big-endian) | JSON header | changed pages (4096 B each, in header order)``.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import functools
import itertools
import json
import os
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

PAGE_SIZE = 4096
FRAME_LENGTH = struct.Struct(">I")
JOURNAL_ENV = "WHARF_TEST_SYNC_JOURNAL"
JOURNAL_NAME = "journal.bin"
FS_IOC_GETVERSION = 0x80087601  # the inode's generation: ext4 renews it when an inode number is reused


@dataclass(frozen=True, slots=True)
class FileSync:
    """A regular file's content made durable: its size and the pages changed since its last sync.

    ``started``: when the sync was asked for; ``time``: when it returned; ``thread``: the name of the
    thread that asked; ``run_delay_started``, ``run_delay``: the seconds that thread had spent waiting
    for a CPU (runnable, not running) at those two instants, from Linux's schedstat (0 without it).
    """

    seq: int
    time: float
    identity: str
    path: str
    size: int
    pages: dict[int, bytes]
    started: float
    thread: str
    run_delay_started: float
    run_delay: float

    def apply_to(self, content: bytearray) -> None:
        """Make ``content``, the file as its previous sync left it, the content this sync made durable."""
        if len(content) < self.size:
            content.extend(bytes(self.size - len(content)))
        for number, page in self.pages.items():
            content[number * PAGE_SIZE : (number + 1) * PAGE_SIZE] = page
        del content[self.size :]


@dataclass(frozen=True, slots=True)
class DirectorySync:
    """A directory's listing made durable: name -> (identity, is a directory); the times and the
    thread as for :class:`FileSync`."""

    seq: int
    time: float
    identity: str
    path: str
    entries: dict[str, tuple[str, bool]]
    started: float
    thread: str
    run_delay_started: float
    run_delay: float


SyncEvent = FileSync | DirectorySync


class SyncRecorder:
    """Wraps ``os.fsync``, ``os.fdatasync`` and the store's ``syncfs`` so that every sync is journaled
    (see the module doc)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._journal = os.open(directory / JOURNAL_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self._file_locks: dict[str, threading.Lock] = {}
        self._contents: dict[str, bytes] = {}
        self._seq = 0
        self._file_system_lock = threading.Lock()

    def install(self) -> None:
        os.fsync = self._wrap(os.fsync)
        os.fdatasync = self._wrap(os.fdatasync)
        # Imported only now, like the rest of the store: nothing of it runs before the wrapping.
        from app.store import atomic_file

        atomic_file.syncfs = self._wrap_file_system(atomic_file.syncfs)

    def close(self) -> None:
        """Close the journal: for a recorder installed in a test's own process, once the functions it
        wrapped are put back (a broker's journal stays open until the broker dies)."""
        os.close(self._journal)

    def _wrap(self, real: Callable[[int], None]) -> Callable[[int], None]:
        @functools.wraps(real)
        def synced(fd: int) -> None:
            started = time.monotonic(), _run_delay()
            number = fd if isinstance(fd, int) else fd.fileno()
            try:
                info = os.fstat(number)
            except OSError:
                return real(fd)
            mode = info.st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                return real(fd)
            identity = file_identity(number)
            with self._file_lock(identity):
                path = os.readlink(f"/proc/self/fd/{number}")
                if stat.S_ISDIR(mode):
                    entries = _listing(number)
                    real(fd)
                    self._record(
                        {"kind": "dir", "identity": identity, "path": path, "entries": entries}, [], started
                    )
                else:
                    content = _content(number)
                    real(fd)
                    self._record_file(identity, path, content, started)
            return None

        return synced

    def _wrap_file_system(self, real: Callable[[int], None]) -> Callable[[int], None]:
        @functools.wraps(real)
        def synced(fd: int) -> None:
            started = time.monotonic(), _run_delay()
            try:
                is_directory = stat.S_ISDIR(os.fstat(fd).st_mode)
            except OSError:
                return real(fd)
            if not is_directory:  # the store only ever syncs through a directory
                return real(fd)
            root = os.readlink(f"/proc/self/fd/{fd}")
            with self._file_system_lock, contextlib.ExitStack() as held:
                seen: set[str] = set()
                synced_now: list[tuple[str, str, dict[str, tuple[str, bool]] | bytes]] = []
                for path, number in _tree(root):
                    identity = file_identity(number)
                    if identity in seen:  # a second name of one file
                        continue
                    seen.add(identity)
                    held.enter_context(self._file_lock(identity))
                    if stat.S_ISDIR(os.fstat(number).st_mode):
                        synced_now.append((identity, path, _listing(number)))
                    else:
                        synced_now.append((identity, path, _content(number)))
                real(fd)
                for identity, path, state in synced_now:
                    if isinstance(state, bytes):
                        self._record_file(identity, path, state, started)
                    else:
                        self._record(
                            {"kind": "dir", "identity": identity, "path": path, "entries": state}, [], started
                        )
            return None

        return synced

    def _file_lock(self, identity: str) -> threading.Lock:
        with self._lock:
            lock = self._file_locks.get(identity)
            if lock is None:
                lock = self._file_locks[identity] = threading.Lock()
            return lock

    def _record_file(self, identity: str, path: str, content: bytes, started: tuple[float, float]) -> None:
        previous = self._contents.get(identity, b"")
        changed = [
            number
            for number in range((len(content) + PAGE_SIZE - 1) // PAGE_SIZE)
            if content[number * PAGE_SIZE : (number + 1) * PAGE_SIZE]
            != previous[number * PAGE_SIZE : (number + 1) * PAGE_SIZE]
        ]
        self._contents[identity] = content
        pages = [content[n * PAGE_SIZE : (n + 1) * PAGE_SIZE].ljust(PAGE_SIZE, b"\0") for n in changed]
        header = {"kind": "file", "identity": identity, "path": path, "size": len(content), "pages": changed}
        self._record(header, pages, started)

    def _record(self, header: dict[str, object], pages: list[bytes], started: tuple[float, float]) -> None:
        header["started"], header["run_delay_started"] = started
        header["run_delay"] = _run_delay()
        header["thread"] = threading.current_thread().name
        with self._lock:
            self._seq += 1
            header["seq"] = self._seq
            header["time"] = time.monotonic()
            encoded = json.dumps(header).encode()
            frame = b"".join([FRAME_LENGTH.pack(len(encoded)), encoded, *pages])
            view = memoryview(frame)
            while view:
                view = view[os.write(self._journal, view) :]


def file_identity(fd: int) -> str:
    """``inode.generation`` of the file or directory open as ``fd``."""
    try:
        generation = struct.unpack_from("=I", fcntl.ioctl(fd, FS_IOC_GETVERSION, bytes(8)))[0]
    except OSError:  # no generations on this file system
        generation = 0
    return f"{os.fstat(fd).st_ino}.{generation}"


def path_identity(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return file_identity(fd)
    finally:
        os.close(fd)


def _run_delay() -> float:
    """Seconds the calling thread has spent waiting for a CPU (runnable, not running) since it began:
    Linux's schedstat ``run_delay``; 0 where the kernel does not keep it."""
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        return 0.0
    try:
        return int(os.read(fd, 128).split()[1]) / 1e9
    finally:
        os.close(fd)


def _content(fd: int) -> bytes:
    """The whole file behind ``fd``, read through a fresh descriptor (``fd`` may be write-only)."""
    reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    try:
        size = os.fstat(reader).st_size
        chunks = []
        offset = 0
        while offset < size:
            chunk = os.pread(reader, size - offset, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(reader)


def _listing(fd: int) -> dict[str, tuple[str, bool]]:
    entries = {}
    for name in os.listdir(fd):
        try:
            entry = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
        except FileNotFoundError:  # removed while listing: the sync may or may not carry it
            continue
        try:
            entries[name] = (file_identity(entry), stat.S_ISDIR(os.fstat(entry).st_mode))
        finally:
            os.close(entry)
    return entries


def _tree(root: str) -> Iterator[tuple[str, int]]:
    """Every directory (``root`` first) and regular file under ``root``, as its path and a
    descriptor open for the time of one step of the iteration; names removed meanwhile are skipped
    (the sync may or may not carry them), symbolic links are not followed."""
    directories = [root]
    while directories:
        directory = directories.pop()
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except (FileNotFoundError, NotADirectoryError):
            continue
        try:
            yield directory, fd
            names = sorted(os.listdir(fd))
        finally:
            os.close(fd)
        for name in names:
            path = os.path.join(directory, name)
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(info.st_mode):
                directories.append(path)
            elif stat.S_ISREG(info.st_mode):
                try:
                    entry = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                except FileNotFoundError:
                    continue
                try:
                    yield path, entry
                finally:
                    os.close(entry)


def read_journal(directory: Path) -> list[SyncEvent]:
    """Every complete event of the journal in ``directory``, in sequence order."""
    raw = (directory / JOURNAL_NAME).read_bytes()
    events: list[SyncEvent] = []
    position = 0
    while position + FRAME_LENGTH.size <= len(raw):
        (length,) = FRAME_LENGTH.unpack_from(raw, position)
        start = position + FRAME_LENGTH.size
        if start + length > len(raw):
            break
        header = json.loads(raw[start : start + length])
        position = start + length
        if header["kind"] == "dir":
            entries = {name: (identity, is_dir) for name, (identity, is_dir) in header["entries"].items()}
            events.append(
                DirectorySync(
                    header["seq"],
                    header["time"],
                    header["identity"],
                    header["path"],
                    entries,
                    started=header["started"],
                    thread=header["thread"],
                    run_delay_started=header["run_delay_started"],
                    run_delay=header["run_delay"],
                )
            )
            continue
        end = position + PAGE_SIZE * len(header["pages"])
        if end > len(raw):
            break
        pages = {
            number: raw[position + PAGE_SIZE * i : position + PAGE_SIZE * (i + 1)]
            for i, number in enumerate(header["pages"])
        }
        position = end
        events.append(
            FileSync(
                header["seq"],
                header["time"],
                header["identity"],
                header["path"],
                header["size"],
                pages,
                started=header["started"],
                thread=header["thread"],
                run_delay_started=header["run_delay_started"],
                run_delay=header["run_delay"],
            )
        )
    return events


def journaled_processes(events: list[SyncEvent]) -> list[range]:
    """The events of each process that journaled into the file, in order: each numbers its syncs
    from 1."""
    starts = [index for index, event in enumerate(events) if event.seq == 1] or [0]
    return [range(start, end) for start, end in itertools.pairwise([*starts, len(events)])]


@dataclass(frozen=True, slots=True)
class SyncWait:
    """How long a thread took from an instant to begin a sync: in all, inside its syncs between the
    two (the disk's time) and waiting for a CPU (the kernel's time); what is left is its own."""

    wall_s: float
    disk_s: float
    cpu_wait_s: float

    @property
    def own_s(self) -> float:
        return self.wall_s - self.disk_s - self.cpu_wait_s

    def describe(self) -> str:
        return (
            f"{self.own_s * 1000:.0f} ms of the thread's own time ({self.wall_s * 1000:.0f} ms, less "
            f"{self.disk_s * 1000:.0f} ms inside syncs and {self.cpu_wait_s * 1000:.0f} ms waiting for a CPU)"
        )


def sync_wait(since: float, syncs: list[SyncEvent], number: int) -> SyncWait:
    """How long the thread whose syncs ``syncs`` are (in order, of one process) took from ``since`` to
    begin ``syncs[number]``. Its CPU waits are known at each sync; before its first one, all its waits
    since it began count (schedstat counts from 0 for a new thread)."""
    began = syncs[number].started
    disk_s = sum(
        sync.time - max(sync.started, since)
        for sync in syncs[bisect.bisect_right(syncs, since, key=lambda sync: sync.time) : number]
    )
    cpu_wait_s = sum(
        syncs[later].run_delay_started - (syncs[later - 1].run_delay if later else 0.0)
        for later in range(bisect.bisect_right(syncs, since, key=lambda sync: sync.started), number + 1)
    )
    return SyncWait(began - since, disk_s, cpu_wait_s)


def main() -> None:
    SyncRecorder(Path(os.environ[JOURNAL_ENV])).install()
    from app.__main__ import main as run_broker

    run_broker()


if __name__ == "__main__":
    sys.exit(main())
