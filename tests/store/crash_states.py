"""Power-loss crash states built from a sync journal (:mod:`tests.store.sync_journal`).

The model is ALICE's and CrashMonkey's: after a power loss, the disk holds what the syncs made durable
and, at random, some of what they had not made durable yet. For a cut after sync ``k``:

* a directory holds the entries of its last synced listing (sync <= ``k``); a directory that was never
  synced holds nothing, because the names created in it never reached the disk. The store root is
  the exception only in that it exists (the test created it, empty, before the broker started);
* a regular file holds the content of its last sync <= ``k``; a file never synced is empty;
* a *torn* state adds what reached the disk without a sync: for a file picked at random, a random
  subset of the 4 KiB pages that its next sync (after ``k``) changed, one of them possibly only in
  part (512-byte sectors); a file never synced starts from zeros of its next size. A directory
  picked at random shows its next listing instead (a new name that reached the disk early, or a
  deleted one that is gone early).

Files are known by identity (inode and generation), so a rename is right: a temporary file synced
and renamed over a name is that name's content only once the directory was synced after the rename.
"""

from __future__ import annotations

import bisect
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.store.sync_journal import PAGE_SIZE, DirectorySync, FileSync, SyncEvent

SECTOR_SIZE = 512
TORN_FILE_CHANCE = 0.5
TORN_DIRECTORY_CHANCE = 0.3


@dataclass(slots=True)
class CrashState:
    """One state of the disk after a power loss just before sync ``cut + 1``."""

    cut: int  # syncs that completed: events[:cut]
    lost_at: float  # monotonic time of the first sync that did not happen, or of the power loss
    torn: bool
    torn_files: list[str] = field(default_factory=list)
    early_directories: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = [f"cut after sync {self.cut}"]
        if self.torn:
            parts.append(f"torn files {self.torn_files}")
            parts.append(f"directories with their next listing {self.early_directories}")
        return ", ".join(parts)


class CrashStates:
    """Builds crash states of the directory tree whose root has ``root_identity``; the power went at
    monotonic time ``lost_at`` (what was acknowledged before that instant may be due)."""

    def __init__(self, events: list[SyncEvent], root_identity: str, lost_at: float) -> None:
        self.events = events
        self.root_identity = root_identity
        self.lost_at = lost_at
        self._by_identity: dict[str, list[int]] = defaultdict(list)
        for index, event in enumerate(events):
            self._by_identity[event.identity].append(index)

    def __len__(self) -> int:
        return len(self.events)

    def build(self, cut: int, target: Path, rng: random.Random | None = None) -> CrashState:
        """Write the state after the first ``cut`` syncs into the empty directory ``target``;
        torn when ``rng`` is given."""
        lost_at = self.events[cut].time if cut < len(self.events) else self.lost_at
        state = CrashState(cut, lost_at, torn=rng is not None)
        contents: dict[str, bytearray] = {}
        listings: dict[str, dict[str, tuple[str, bool]]] = {}
        for event in self.events[:cut]:
            if isinstance(event, DirectorySync):
                listings[event.identity] = event.entries
                continue
            content = contents.setdefault(event.identity, bytearray())
            _apply(content, event)
        self._write_directory(target, self.root_identity, cut, contents, listings, rng, state)
        return state

    def _next_event(self, identity: str, cut: int) -> SyncEvent | None:
        indexes = self._by_identity.get(identity, [])
        position = bisect.bisect_left(indexes, cut)
        return self.events[indexes[position]] if position < len(indexes) else None

    def _write_directory(
        self,
        path: Path,
        identity: str,
        cut: int,
        contents: dict[str, bytearray],
        listings: dict[str, dict[str, tuple[str, bool]]],
        rng: random.Random | None,
        state: CrashState,
    ) -> None:
        path.mkdir(parents=True, exist_ok=True)
        entries = listings.get(identity, {})
        if rng is not None and rng.random() < TORN_DIRECTORY_CHANCE:
            following = self._next_event(identity, cut)
            if isinstance(following, DirectorySync) and following.entries != entries:
                entries = following.entries
                state.early_directories.append(following.path)
        for name, (child, is_directory) in sorted(entries.items()):
            if is_directory:
                self._write_directory(path / name, child, cut, contents, listings, rng, state)
            else:
                data = contents.get(child)
                if rng is not None and rng.random() < TORN_FILE_CHANCE:
                    data = self._tear(child, cut, data, rng, state)
                (path / name).write_bytes(bytes(data) if data is not None else b"")

    def _tear(
        self, identity: str, cut: int, data: bytearray | None, rng: random.Random, state: CrashState
    ) -> bytearray | None:
        following = self._next_event(identity, cut)
        if not isinstance(following, FileSync) or not following.pages:
            return data
        if not _mapped(following.path) and following is not self.events[cut]:
            # A small file (the checkpoint, a config file) is written just before its own sync, after
            # the syncs it vouches for: its next content can be on disk only if that sync was next.
            return data
        torn = bytearray(data) if data is not None else bytearray(following.size)
        if len(torn) < following.size:
            torn.extend(bytes(following.size - len(torn)))
        chosen = [number for number in sorted(following.pages) if rng.random() < 0.5]
        partial = rng.choice(chosen) if chosen and rng.random() < 0.5 else None
        for number in chosen:
            page = following.pages[number]
            start = number * PAGE_SIZE
            if number == partial:
                for sector in range(0, PAGE_SIZE, SECTOR_SIZE):
                    if rng.random() < 0.5:
                        torn[start + sector : start + sector + SECTOR_SIZE] = page[
                            sector : sector + SECTOR_SIZE
                        ]
            else:
                torn[start : start + PAGE_SIZE] = page
        del torn[max(following.size, len(data) if data is not None else 0) :]
        state.torn_files.append(f"{following.path} pages {chosen} (partly {partial})")
        return torn


def _apply(content: bytearray, event: FileSync) -> None:
    if len(content) < event.size:
        content.extend(bytes(event.size - len(content)))
    for number, page in event.pages.items():
        content[number * PAGE_SIZE : (number + 1) * PAGE_SIZE] = page
    del content[event.size :]


def _mapped(path: str) -> bool:
    """Whether the store writes the file through a mapping, long before syncing it (segments and
    index files); other files are written right before their sync."""
    parts = Path(path).parts
    return any(part in ("commitlog", "consumequeue", "index") for part in parts)
