"""Latency fault tolerance (SPEC 3): a broker that answered slowly or failed is avoided for a while.

    observed latency   < 550 ms   550 ms   1 s    2 s     3 s     15 s
    avoided for          0        30 s     60 s   120 s   180 s   600 s

An error counts as 30 s of latency, so a failing broker is avoided for 10 minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

LATENCY_STEPS_MS = (50, 100, 550, 1_000, 2_000, 3_000, 15_000)
AVOID_FOR_MS = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
ERROR_LATENCY_MS = 30_000


def avoid_duration_ms(latency_ms: float) -> int:
    for step, duration in zip(reversed(LATENCY_STEPS_MS), reversed(AVOID_FOR_MS), strict=True):
        if latency_ms >= step:
            return duration
    return 0


class LatencyFaultTolerance:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._avoid_until_ms: dict[str, float] = {}

    def update(self, broker: str, latency_ms: float, failed: bool = False) -> None:
        duration = avoid_duration_ms(ERROR_LATENCY_MS if failed else latency_ms)
        if duration:
            self._avoid_until_ms[broker] = self.clock() * 1000 + duration
        else:
            self._avoid_until_ms.pop(broker, None)

    def available(self, broker: str) -> bool:
        until = self._avoid_until_ms.get(broker)
        return until is None or self.clock() * 1000 >= until

    def least_bad(self, brokers: Iterable[str]) -> str | None:
        """Of brokers that are all being avoided, the one whose avoidance ends first."""
        candidates = list(brokers)
        if not candidates:
            return None
        return min(candidates, key=lambda broker: self._avoid_until_ms.get(broker, 0.0))
