"""The disk guard (SPEC 1.9): refuse writes while the store's disk is nearly full.

Above ``refuse_ratio`` (90 %) used, every append raises :class:`DiskFullError`; writes are accepted
again once usage is at or under ``accept_ratio`` (85 %). Between the two the state does not change,
so a disk hovering around one threshold does not flap. Reads never consult the guard.

The probe is a collaborator (a fake in tests). The clean service refreshes the guard on each pass,
and an append refreshes it itself when the last probe is older than ``check_interval_ms``, so a disk
filling up between two clean passes is still noticed within that interval.

Every allocation of disk blocks the store makes (a new segment or index file, the next chunk of
one) asks :meth:`DiskGuard.check_room` first: the probe is read again, and the allocation is
refused while writes are refused or when it would leave less than :data:`RESERVE_BYTES` free. The reserve keeps room for
the small files that must still be written on a full disk (checkpoint, consumer offsets, topics).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from app.store.errors import DiskFullError

log = logging.getLogger(__name__)

# Percent (0-100) of the store's partition in use.
DiskUsageProbe = Callable[[], float]
# Bytes of the store's partition an ordinary writer may still use.
FreeBytesProbe = Callable[[], int]

RESERVE_BYTES = 4 * 1024 * 1024


def disk_usage_probe(path: Path) -> DiskUsageProbe:
    """The real probe: the share of ``path``'s partition that is not available to an ordinary
    writer, ``(f_blocks - f_bavail) / f_blocks`` (blocks reserved for root count as used, since
    the store cannot write them)."""

    def probe() -> float:
        stat = os.statvfs(path)
        return (stat.f_blocks - stat.f_bavail) * 100 / stat.f_blocks if stat.f_blocks else 0.0

    return probe


def free_bytes_probe(path: Path) -> FreeBytesProbe:
    """The real free space: what an ordinary writer may still allocate on ``path``'s partition."""

    def probe() -> int:
        stat = os.statvfs(path)
        return stat.f_bavail * stat.f_frsize

    return probe


class DiskGuard:
    """Tracks whether the store may write, from a disk usage probe with hysteresis."""

    def __init__(
        self,
        probe: DiskUsageProbe,
        refuse_ratio: float,
        accept_ratio: float,
        check_interval_ms: int,
        clock: Callable[[], float],
        where: str = "the store's disk",
        free_bytes: FreeBytesProbe | None = None,
    ) -> None:
        self.probe = probe
        self.free_bytes = free_bytes
        self.refuse_ratio = refuse_ratio
        self.accept_ratio = accept_ratio
        self.check_interval_s = check_interval_ms / 1000
        self.clock = clock
        self.where = where
        self.used_percent = 0.0
        self.writable = True
        self._next_check_s = float("-inf")

    def refresh(self) -> float:
        """Probe the disk and update :attr:`writable`; returns the usage (the last known one if the
        probe fails)."""
        self._next_check_s = self.clock() + self.check_interval_s
        try:
            used = float(self.probe())
        except OSError as error:
            log.warning("cannot read the disk usage of %s: %s", self.where, error)
            return self.used_percent
        self.used_percent = used
        if used > self.refuse_ratio:
            if self.writable:
                log.error("%s is %.1f %% full: refusing writes", self.where, used)
            self.writable = False
        elif used <= self.accept_ratio:
            if not self.writable:
                log.warning("%s is %.1f %% full: accepting writes again", self.where, used)
            self.writable = True
        return used

    def check_writable(self) -> None:
        """Raise :class:`DiskFullError` while writes are refused (re-probing when due)."""
        if self.clock() >= self._next_check_s:
            self.refresh()
        if not self.writable:
            raise DiskFullError(
                f"{self.where} is {self.used_percent:.1f} % full, over the {self.refuse_ratio:g} % limit: "
                f"writes are refused until it is at or under {self.accept_ratio:g} % (reads still work)"
            )

    def check_room(self, size_bytes: int) -> None:
        """Before ``size_bytes`` of disk are allocated: re-probe, and raise DiskFullError while
        writes are refused or when the allocation would eat into the reserve."""
        self.refresh()
        if not self.writable:
            raise DiskFullError(
                f"{self.where} is {self.used_percent:.1f} % full, over the {self.refuse_ratio:g} % limit: "
                f"no allocation of {size_bytes} bytes until it is at or under {self.accept_ratio:g} %"
            )
        if self.free_bytes is None:
            return
        try:
            free = self.free_bytes()
        except OSError as error:
            log.warning("cannot read the free space of %s: %s", self.where, error)
            return
        if free - size_bytes < RESERVE_BYTES:
            raise DiskFullError(
                f"{self.where} has {free} bytes free: allocating {size_bytes} more would leave less "
                f"than the {RESERVE_BYTES}-byte reserve (writes resume when space returns)"
            )
