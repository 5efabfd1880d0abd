"""SegmentCache: a bound on the ConsumeQueue segments mapped at once, shared by every queue.

Tens of thousands of queues cannot each keep a segment mapped: every mapping holds a file
descriptor (the process has ``RLIMIT_NOFILE`` of them, 1,024 by default) and a memory area (the
system allows ``vm.max_map_count``, 65,530 by default). ConsumeQueue segments are therefore mapped
on demand (:meth:`app.store.mapped_file.MappedFile.hold`) through this least-recently-used cache:
when mapping one more would pass ``max_mapped``, the least recently used segments that nobody holds
are unmapped (and their descriptors closed). An unmapped segment loses nothing: the pages written
through its mapping are the file's page cache, which the ConsumeQueue flush forces to disk through a
descriptor of its own, mapped or not.

A segment is held while a reader slices it and while a write batch is stored (the writer holds every
segment the batch's entries go to before the CommitLog append, so that dispatch never has to open a
file): a held segment is never unmapped. Should every segment be held, the cache goes over its bound
rather than fail, and comes back under it as they are released.

The bound comes from the limits at start (:func:`store_file_budget`): the soft ``RLIMIT_NOFILE`` is
raised to the hard one, half of it is left to connections, and the store's files stay under
``MAX_STORE_FILES`` and a quarter of ``vm.max_map_count``. CommitLog segments and index files stay
mapped for as long as the store is open; they are counted against the same budget.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import threading
from collections import OrderedDict
from pathlib import Path

from app.store.errors import ResourceExhaustedError
from app.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

# At most this many store files mapped at once, whatever the limits allow.
MAX_STORE_FILES = 1_000
# Never fewer ConsumeQueue segments mapped than this (a write batch may need a few at once).
MIN_MAPPED_SEGMENTS = 16
DEFAULT_MAX_MAP_COUNT = 65_530
MAX_MAP_COUNT_PATH = Path("/proc/sys/vm/max_map_count")
# The soft limit is raised no further than this when the hard limit is unlimited.
NOFILE_CEILING = 1 << 20


def raise_nofile_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = NOFILE_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as error:
            log.warning("cannot raise the open file limit from %d to %d: %s", soft, target, error)
    return NOFILE_CEILING if soft == resource.RLIM_INFINITY else soft


def max_map_count() -> int:
    try:
        return int(MAX_MAP_COUNT_PATH.read_text())
    except (OSError, ValueError):
        return DEFAULT_MAX_MAP_COUNT


def store_file_budget(nofile: int, map_count: int) -> int:
    """How many store files may be mapped at once: half the descriptors (the rest is for connections,
    flushes and checkpoints), a quarter of the mappings (the interpreter and libraries map too)."""
    return max(MIN_MAPPED_SEGMENTS, min(MAX_STORE_FILES, nofile // 2, map_count // 4))


class SegmentCache:
    """Least-recently-used set of mapped segments, at most ``max_mapped`` of them unless all are held."""

    def __init__(self, max_mapped: int) -> None:
        if max_mapped < 1:
            raise ValueError(f"max_mapped must be at least 1, got {max_mapped}")
        self.max_mapped = max_mapped
        self._lock = threading.Lock()
        # Mapped segments, least recently used first.
        self._mapped: OrderedDict[int, MappedFile] = OrderedDict()
        self.maps = 0  # segments mapped by a hold (cache misses)
        self.unmaps = 0  # segments unmapped to stay under the bound

    def __len__(self) -> int:
        return len(self._mapped)

    def hold(self, mapped: MappedFile) -> bool:
        """Take a reference on ``mapped``, mapping it first if needed; False once it is being
        destroyed. ResourceExhaustedError when it cannot be mapped even with nothing else cached."""
        with self._lock:
            if not mapped.available or mapped.is_closed:
                return False
            key = id(mapped)
            if mapped.is_mapped:
                self._mapped.move_to_end(key)
            else:
                self._unmap_over(self.max_mapped - 1)
                try:
                    mapped.map()
                except ResourceExhaustedError:
                    # Connections took the descriptors the budget left them: give back every
                    # unheld mapping and try once more.
                    self._unmap_over(0)
                    mapped.map()
                self._mapped[key] = mapped
                self.maps += 1
            mapped.take_holder()
            return True

    def add(self, mapped: MappedFile) -> None:
        """Count a segment that was mapped when it was created."""
        with self._lock:
            self._unmap_over(self.max_mapped - 1)
            self._mapped[id(mapped)] = mapped

    def forget(self, mapped: MappedFile) -> None:
        """Stop counting a segment that is being closed."""
        with self._lock:
            self._mapped.pop(id(mapped), None)

    def _unmap_over(self, keep: int) -> None:
        """Unmap least recently used unheld segments until at most ``keep`` are mapped."""
        mapped_files = self._mapped
        if len(mapped_files) <= keep:
            return
        for key, mapped in list(mapped_files.items()):
            if mapped.ref_count == 0:
                del mapped_files[key]
                with contextlib.suppress(ValueError):
                    mapped.unmap()
                self.unmaps += 1
                if len(mapped_files) <= keep:
                    return
