"""Allocating the CommitLog's disk ahead of the writer (RocketMQ's AllocateMappedFileService).

Allocating disk blocks (``posix_fallocate``) and creating a segment take time the append path should
not wait for, and must happen before a batch writes its first byte (so that a full disk refuses the
batch whole). This thread keeps, ahead of the writer:

* the next chunk of the segment being written: at least ``chunk`` bytes past the writer's position
  are allocated (the writer wakes the thread when less than half a chunk is left);
* ``spares`` segments prepared after the last one, each with its first chunk allocated: the writer
  takes the next one when it rolls (and wakes the thread to prepare the one after).

When the disk has no room the thread logs once and tries again every interval; the writer, finding
no room allocated, tries itself and refuses the batch with :class:`DiskFullError` until space
returns.

What it allocates it then faults in for reading (:meth:`MappedFile.warm`, with the GIL released
by the compiled kernel), so the writer's first touch of a page costs it no page allocation: on this
project's virtual machines that first touch cost the writer about 2 us per KiB written. Only
allocated chunks are warmed, so the pages held in memory ahead of the writer are at most a chunk
and a half of the segment being written and the first chunk of each spare.
"""

from __future__ import annotations

import logging

from app.store.errors import DiskFullError
from app.store.mapped_file_queue import MappedFileQueue
from app.store.service import ServiceThread

log = logging.getLogger(__name__)


class AllocateSegmentService(ServiceThread):
    name = "allocate-segment"

    def __init__(self, files: MappedFileQueue, interval_ms: int, chunk: int, spares: int = 1) -> None:
        super().__init__(interval_ms / 1000)
        self.files = files
        self.chunk = chunk
        self.spares = spares
        self.failing = False
        # Where each segment ahead of the writer starts -> how far its pages were faulted in.
        self._warmed: dict[int, int] = {}

    def start(self) -> None:
        self.files.on_new_file = self.wakeup
        super().start()
        self.wakeup()  # the first spare at once, not after an interval

    def run_once(self) -> None:
        try:
            self.files.reserve_ahead(self.chunk)
            self.files.prepare(self.spares)
        except DiskFullError as error:
            if not self.failing:
                log.error("cannot allocate the CommitLog's disk ahead of the writer: %s", error)
            self.failing = True
            return
        if self.failing:
            log.warning("the CommitLog's disk is allocated ahead of the writer again")
            self.failing = False
        last = self.files.last_file
        ahead = [*([last] if last is not None and not last.is_full else []), *self.files.prepared]
        warmed = {}
        for mapped in ahead:
            start = max(self._warmed.get(mapped.file_from_offset, 0), mapped.wrote_position)
            if mapped.allocated > start:
                mapped.warm(start, mapped.allocated, lambda: self.stopping)
            warmed[mapped.file_from_offset] = max(start, mapped.allocated)
        self._warmed = warmed

    def on_stop(self) -> None:
        self.files.on_new_file = None
