"""The other slaves' reports of how far their CommitLog goes, as one slave watches them before an
automatic failover (app.broker.ha_role): which are further ahead, and which of those it need not
wait for, because they stopped reporting or do not take over."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.routing.registry import HaReport


class SlaveReports:
    """The other slaves' reports as one slave watches them. A slave reports every fifth of its
    failover period; one whose beats stood still on the watching slave's clock for the longer of
    the two periods is silent (dead or stopped), however far ahead its last report was."""

    def __init__(self, failover_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.failover_s = failover_s
        self.clock = clock
        self.reports: dict[int, HaReport] = {}
        self._beats_seen: dict[int, tuple[int, float]] = {}  # slave id -> (beats, first seen at)

    def update(self, reports: dict[int, HaReport]) -> None:
        now = self.clock()
        seen = self._beats_seen
        self._beats_seen = {
            broker_id: seen[broker_id]
            if broker_id in seen and seen[broker_id][0] == report.beats
            else (report.beats, now)
            for broker_id, report in reports.items()
        }
        self.reports = reports

    def ahead_of(self, broker_id: int, held: int, master_id: int, epoch: int) -> list[int]:
        """The other slaves of ``epoch`` whose CommitLog goes further than ``held``, or as far with
        a lower id: the furthest first. A slave whose log is of an earlier epoch is not compared:
        past where that epoch ended, its log may hold what no master of ``epoch`` wrote."""
        ahead = [
            (-report.max_offset, other)
            for other, report in self.reports.items()
            if other not in (broker_id, master_id)
            and report.epoch == epoch
            and (report.max_offset > held or (report.max_offset == held and other < broker_id))
        ]
        return [other for _, other in sorted(ahead)]

    def unheard_since(self, broker_id: int, master_id: int, since: float) -> list[int]:
        """The other slaves not heard from since ``since`` (on :attr:`clock`: when this slave found
        the master silent): how far their logs go now is not known, and a report from before the
        master went silent may lack the SEND_OKs it gave last. One is waited for up to two of its
        report periods (a fifth of its failover period each) past ``since``; then it counts as
        not reporting."""
        now = self.clock()
        return [
            other
            for other, (_, seen_at) in self._beats_seen.items()
            if other not in (broker_id, master_id)
            and seen_at <= since
            and now - since < 2 * self.reports[other].failover_ms / 5000
        ]

    def why_passed_over(self, broker_id: int, master_silent_s: float) -> str | None:
        """Why a slave further ahead is not waited for, or None to wait for it. Its beats stood
        still for the longer failover period of the two (it is dead or stopped), or it reports
        but was not promoted when the master had been silent for twice that (it stalls, or runs
        without automatic failover)."""
        patience_s = max(self.failover_s, self.reports[broker_id].failover_ms / 1000)
        beats_still_s = self.clock() - self._beats_seen[broker_id][1]
        if beats_still_s >= patience_s:
            return f"slave {broker_id} is further ahead but has not reported for {beats_still_s:.1f} s"
        if master_silent_s >= 2 * patience_s:
            return f"slave {broker_id} is further ahead but was not promoted within {master_silent_s:.1f} s"
        return None
