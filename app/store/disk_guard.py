"""The disk guard (SPEC 1.9): refuse writes while the store's disk is nearly full.

Above ``refuse_ratio`` (90 %) used, every append raises :class:`DiskFullError`; writes are accepted
again once usage is at or under ``accept_ratio`` (85 %). Between the two the state does not change,
so a disk hovering around one threshold does not flap. Reads never consult the guard.

The probe is a collaborator (a fake in tests). The clean service refreshes the guard on each pass,
and an append refreshes it itself when the last probe is older than ``check_interval_ms``, so a disk
filling up between two clean passes is still noticed within that interval.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from app.store.errors import DiskFullError

log = logging.getLogger(__name__)

# Percent (0-100) of the store's partition in use.
DiskUsageProbe = Callable[[], float]


def disk_usage_probe(path: Path) -> DiskUsageProbe:
    """The real probe: the share of ``path``'s partition that is not free to an ordinary writer
    (blocks reserved for root count as used, since the store cannot write them)."""

    def probe() -> float:
        usage = shutil.disk_usage(path)
        return (usage.total - usage.free) * 100 / usage.total if usage.total else 0.0

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
    ) -> None:
        self.probe = probe
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
