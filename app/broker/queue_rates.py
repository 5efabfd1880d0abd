"""Produce rates per queue: messages per second over a recent window, from the queues' max offsets
sampled whenever someone asks for them (a topic's queues, a page of topics). No thread and bounded
memory: at most ``max_topics`` topics (the least recently asked dropped first), each with at most
``max_samples`` samples spread over ``window_s``. A topic asked for the first time has no rate yet
(None): its rate covers the time since the oldest sample still in the window."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

WINDOW_S = 60.0
MAX_TOPICS = 1024
MAX_SAMPLES = 60
# A rate over less time than this says more about the sampling than about the producers.
MIN_SPAN_S = 0.5

Sample = tuple[float, tuple[int, ...]]  # (monotonic seconds, each queue's max offset)


class QueueRates:
    def __init__(
        self,
        window_s: float = WINDOW_S,
        max_topics: int = MAX_TOPICS,
        max_samples: int = MAX_SAMPLES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.max_topics = max_topics
        self.min_gap_s = window_s / max_samples
        self.clock = clock
        self._samples: OrderedDict[str, deque[Sample]] = OrderedDict()
        self._lock = threading.Lock()  # asked from the event loop and from request threads

    def sample(self, topic: str, ends: Sequence[int]) -> tuple[list[float | None], float]:
        """Record ``ends`` (each queue's max offset now) and answer each queue's messages per second
        since the oldest sample in the window (None without one old enough, or for a queue it did not
        have), and the seconds that covers (0 without a rate)."""
        now = self.clock()
        with self._lock:
            samples = self._samples.pop(topic, None) or deque()
            self._samples[topic] = samples  # the most recently asked last
            while len(self._samples) > self.max_topics:
                self._samples.popitem(last=False)
            while samples and now - samples[0][0] > self.window_s:
                samples.popleft()
            oldest = samples[0] if samples else None
            if not samples or now - samples[-1][0] >= self.min_gap_s:
                samples.append((now, tuple(ends)))
        if oldest is None or now - oldest[0] < MIN_SPAN_S:
            return [None] * len(ends), 0.0
        span = now - oldest[0]
        then = oldest[1]
        rates: list[float | None] = [
            round(max(0, end - then[queue_id]) / span, 3) if queue_id < len(then) else None
            for queue_id, end in enumerate(ends)
        ]
        return rates, round(span, 3)

    def forget(self, topic: str) -> None:
        with self._lock:
            self._samples.pop(topic, None)
