"""Retention (SPEC 1.9): delete expired CommitLog segments, then whatever only pointed into them.

Every ``clean_resource_interval_ms`` (first after ``clean_first_delay_ms``) a pass runs. It deletes
CommitLog segments not modified for ``file_reserved_time_h`` if any of these holds:

* the hour is one of ``delete_when`` (local time, "04" or "04;16");
* the disk is over ``disk_max_used_space_ratio`` (75 %);
* an admin asked (:meth:`CleanService.clean` with ``manual=True``).

Oldest first, never the segment being written, stopping at the first unexpired one, at most
``delete_files_max_per_pass`` per pass, ``delete_files_interval_ms`` apart. Over
``disk_force_clean_ratio`` (85 %) segments go whether expired or not. Whether consumers have read
the messages is not consulted.

Deleted segments leave the queue at once (the min offset moves past them, so reads answer
OFFSET_TOO_SMALL instead of touching them) and their files go when no reader holds them, or
``destroy_forcibly_interval_ms`` after the first attempt. When the CommitLog's min offset moved,
ConsumeQueue segments whose entries all point below it are deleted, every queue's min offset is
corrected, and so are index files.

Each pass also refreshes the disk guard (:mod:`app.store.disk_guard`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.store.commit_log import CommitLog
from app.store.config import StoreConfig
from app.store.consume_queue import UNIT, UNIT_SIZE, ConsumeQueue
from app.store.disk_guard import DiskGuard
from app.store.errors import StoreConfigError
from app.store.index_service import IndexService
from app.store.mapped_file import MappedFile
from app.store.mapped_file_queue import MappedFileQueue
from app.store.service import ServiceThread

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000


@dataclass(slots=True)
class CleanReport:
    """What one pass did. ``reasons`` names why CommitLog segments were eligible ("time", "disk",
    "manual"); empty when none applied."""

    disk_used_percent: float = 0.0
    reasons: tuple[str, ...] = ()
    forced: bool = False
    commitlog_segments: int = 0
    consumequeue_segments: int = 0
    index_files: int = 0
    commitlog_min_offset: int = 0


def parse_delete_when(delete_when: str) -> frozenset[int]:
    """Hours of the day from "04" or "04;16"; StoreConfigError on anything else."""
    try:
        hours = frozenset(int(part) for part in delete_when.split(";") if part.strip())
    except ValueError:
        hours = frozenset()
    if not hours or any(not 0 <= hour <= 23 for hour in hours):
        raise StoreConfigError(f"delete_when must list hours 00-23 separated by ';', got {delete_when!r}")
    return hours


def expired_segments(
    files: MappedFileQueue, now_ms: int, reserved_ms: int, at_once: bool, max_count: int
) -> list[MappedFile]:
    """The oldest segments not modified for ``reserved_ms`` (any, if ``at_once``), never the last,
    stopping at the first one still young, at most ``max_count``."""
    expired: list[MappedFile] = []
    for mapped in files.files[:-1]:
        if len(expired) >= max_count:
            break
        if not at_once and now_ms < mapped.last_modified_ms() + reserved_ms:
            break
        expired.append(mapped)
    return expired


def segments_below(files: MappedFileQueue, commitlog_min: int) -> list[MappedFile]:
    """The oldest ConsumeQueue segments (never the last) whose entries all point below
    ``commitlog_min``: since entries grow, it is enough that the segment's last one does."""
    below: list[MappedFile] = []
    file_size = files.file_size
    for mapped in files.files[:-1]:
        if not mapped.hold():
            break
        try:
            physical_offset, _, _ = UNIT.unpack_from(
                mapped.view, file_size - file_size % UNIT_SIZE - UNIT_SIZE
            )
        except ValueError:  # deleted under us (the topic was deleted)
            break
        finally:
            mapped.release()
        if physical_offset >= commitlog_min:
            break
        below.append(mapped)
    return below


class CleanService(ServiceThread):
    """Runs retention passes on a timer or on demand; one pass at a time."""

    name = "clean-files"

    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        queues: Callable[[], Iterable[ConsumeQueue]],
        index: IndexService | None,
        guard: DiskGuard,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(config.clean_resource_interval_ms / 1000)
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.guard = guard
        self.clock = clock
        self.sleep = sleep
        self.delete_hours = parse_delete_when(config.delete_when)
        self.reserved_ms = int(config.file_reserved_time_h * HOUR_MS)
        self.max_used_ratio = config.disk_max_used_space_ratio
        self.force_clean_ratio = config.disk_force_clean_ratio
        self.max_per_pass = config.delete_files_max_per_pass
        self.pause_s = config.delete_files_interval_ms / 1000
        self.forcibly_ms = config.destroy_forcibly_interval_ms
        self.first_delay_s = config.clean_first_delay_ms / 1000
        self._first_pass_at = float("inf")
        self._pass_lock = threading.Lock()
        self._last_min_offset = -1

    def start(self) -> None:
        self._first_pass_at = time.monotonic() + self.first_delay_s
        super().start()

    def run_once(self) -> None:
        if time.monotonic() >= self._first_pass_at:
            self.clean()

    def on_stop(self) -> None:
        pass  # nothing to drain; a pass in progress finishes before stop() returns

    def is_time_to_delete(self, now_s: float) -> bool:
        return time.localtime(now_s).tm_hour in self.delete_hours

    def clean(self, manual: bool = False) -> CleanReport:
        """One retention pass (``manual``: an admin asked); returns what it did."""
        with self._pass_lock:
            now_s = self.clock()
            now_ms = int(now_s * 1000)
            used = self.guard.refresh()
            reasons = []
            if self.is_time_to_delete(now_s):
                reasons.append("time")
            if used > self.max_used_ratio:
                reasons.append("disk")
                log.warning(
                    "disk %.1f %% used, over %g %%: deleting expired files", used, self.max_used_ratio
                )
            if manual:
                reasons.append("manual")
            forced = used > self.force_clean_ratio
            report = CleanReport(used, tuple(reasons), forced)
            files = self.commitlog.files
            if reasons:
                expired = expired_segments(files, now_ms, self.reserved_ms, forced, self.max_per_pass)
                if expired:
                    with self.commitlog.lock:
                        files.detach(expired)
                    log.info("deleting %d CommitLog segments up to %s", len(expired), expired[-1].path.name)
            pause = (lambda: self.sleep(self.pause_s)) if self.pause_s > 0 else None
            report.commitlog_segments = files.destroy_doomed(self.forcibly_ms, now_ms, pause)
            report.commitlog_min_offset = commitlog_min = self.commitlog.min_offset
            moved = commitlog_min != self._last_min_offset
            self._last_min_offset = commitlog_min
            report.consumequeue_segments = self._clean_consume_queues(commitlog_min, moved, now_ms)
            if self.index is not None:
                report.index_files = self.index.delete_expired(commitlog_min, self.forcibly_ms, now_ms)
            return report

    def _clean_consume_queues(self, commitlog_min: int, moved: bool, now_ms: int) -> int:
        deleted = 0
        for queue in list(self.queues()):
            files = queue.files
            if moved:
                below = segments_below(files, commitlog_min)
                if below:
                    with self.commitlog.lock:  # the dispatcher rolls ConsumeQueues under it
                        files.detach(below)
                queue.correct_min_offset(commitlog_min)
            if files.doomed:
                gone = files.destroy_doomed(self.forcibly_ms, now_ms)
                deleted += gone
                if gone and self.pause_s > 0:
                    self.sleep(self.pause_s)
        return deleted
