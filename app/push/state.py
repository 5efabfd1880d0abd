"""What a push subscription did: the counts GET shows and the metrics export (written on the event
loop only; a scrape copies them)."""

from __future__ import annotations

import dataclasses
from collections import Counter

from app.broker.metrics import DurationHistogram
from app.push.request import FailureKind

# Upper bounds in seconds of the time from a message's store to its acknowledgement.
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)


@dataclasses.dataclass
class PushState:
    delivered: int = 0  # messages acknowledged with a 2xx
    failed: Counter[FailureKind] = dataclasses.field(default_factory=Counter)  # messages, by kind
    retried: int = 0  # sent to the retry topic, or retried in place (ordered)
    dead_lettered: int = 0
    in_flight: int = 0  # requests
    consecutive_failures: int = 0
    last_error: str | None = None
    last_error_ms: int | None = None
    last_success_ms: int | None = None
    latency: DurationHistogram = dataclasses.field(
        default_factory=lambda: DurationHistogram(LATENCY_BUCKETS_S)
    )

    def as_json(self) -> dict[str, object]:
        return {
            "in_flight": self.in_flight,
            "delivered": self.delivered,
            "failed": sum(self.failed.values()),
            "failed_by_kind": {kind.value: count for kind, count in sorted(self.failed.items())},
            "retried": self.retried,
            "dead_lettered": self.dead_lettered,
            "consecutive_failures": self.consecutive_failures,
            "last_error": None
            if self.last_error is None
            else {"at_ms": self.last_error_ms, "message": self.last_error},
            "last_success_ms": self.last_success_ms,
        }
