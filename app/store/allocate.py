"""Allocating the next CommitLog segment ahead of the writer (RocketMQ's AllocateMappedFileService).

Allocating a segment (``posix_fallocate`` of a whole segment, then ``mmap``) takes time the append
path should not wait for, and must happen before a batch writes its first byte (so that a full disk
refuses the batch whole). This thread keeps ``spares`` segments prepared after the last one: the
writer takes the next one when it rolls (and wakes the thread to prepare the one after). When the
disk has no room the thread logs once and tries again every interval; the writer, finding no spare,
tries itself and refuses the batch with :class:`DiskFullError` until space returns.

Each spare's pages are then faulted in for reading (:meth:`MappedFile.warm`, with the GIL released
by the compiled kernel), so the writer's first touch of a page costs it no page allocation: on this
project's virtual machines that first touch cost the writer about 2 us per KiB written.
"""

from __future__ import annotations

import logging

from app.store.errors import DiskFullError
from app.store.mapped_file_queue import MappedFileQueue
from app.store.service import ServiceThread

log = logging.getLogger(__name__)


class AllocateSegmentService(ServiceThread):
    name = "allocate-segment"

    def __init__(self, files: MappedFileQueue, interval_ms: int, spares: int = 1) -> None:
        super().__init__(interval_ms / 1000)
        self.files = files
        self.spares = spares
        self.failing = False
        self._warmed: set[int] = set()  # where the spares whose pages were faulted in start

    def start(self) -> None:
        self.files.on_new_file = self.wakeup
        super().start()
        self.wakeup()  # the first spare at once, not after an interval

    def run_once(self) -> None:
        try:
            self.files.prepare(self.spares)
        except DiskFullError as error:
            if not self.failing:
                log.error("cannot allocate the next CommitLog segment ahead: %s", error)
            self.failing = True
            return
        if self.failing:
            log.warning("the next CommitLog segment is allocated again")
            self.failing = False
        spares = self.files.prepared
        for spare in spares:
            if spare.file_from_offset not in self._warmed:
                spare.warm(lambda: self.stopping)
                self._warmed.add(spare.file_from_offset)
        self._warmed &= {spare.file_from_offset for spare in spares}

    def on_stop(self) -> None:
        self.files.on_new_file = None
