"""The broker's metrics: what the core counts as it works, and what a scrape reads from its state.

Counted as it happens, by the core (:class:`BrokerMetrics`), so HTTP and WebSocket count alike:

- ``wharf_messages_produced_total{topic}``, ``wharf_bytes_produced_total{topic}``: messages stored
  and the bytes of their bodies (a repeat answered from the idempotency window stores nothing);
- ``wharf_messages_consumed_total{topic,group}``: messages handed out by a pull or to a WebSocket
  subscriber, ``group=""`` without a group; a message handed out again counts again;
- ``wharf_long_polls_held``, ``wharf_websocket_subscribers``: HTTP pulls waiting for a message,
  open subscriptions;
- ``wharf_ha_metadata_waiting``: slaves' metadata requests a master holds until its metadata
  changes (counted by their HTTP endpoint, :mod:`app.api.ha`, the only way they come);
- ``wharf_flush_duration_seconds``: CommitLog flushes that brought bytes to disk (the store's flush
  listener, on the flush thread).

Read when Prometheus scrapes, from memory only, without the store's write lock:
``wharf_store_commitlog_bytes``, ``wharf_store_disk_used_ratio``, ``wharf_store_writes_refused`` and
``wharf_recovery_duration_seconds`` (:class:`BrokerCollector`, for a prometheus_client registry), and
``wharf_consumer_lag{group,topic,queue}``, which :mod:`app.broker.metrics_text` writes with the
counters: the families of a series per topic, group or queue.

The counters are plain Python written on the event loop only, so a produce pays a dictionary update,
never a lock; a scrape in another thread copies each table whole in one step under the GIL. A
deleted topic's series go with it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from app.store import MessageStore

# Upper bounds in seconds: an fdatasync of a few pages takes under a millisecond, a stalled disk
# seconds (the HTTP histogram adds 30 and 60 s for long polls).
DURATION_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class DurationHistogram:
    """Durations by bucket (``bounds_s``, then +Inf) and their sum.

    Written without a lock, by one thread at a time: the event loop for HTTP requests, the flush
    thread for flushes (two writers at once, only possible while the store closes, may lose an
    observation). A scrape in another thread reads a copy, whose sum may miss the observation
    being written.
    """

    __slots__ = ("bounds_s", "_counts", "_sum_s")

    def __init__(self, bounds_s: Sequence[float]) -> None:
        self.bounds_s = tuple(bounds_s)
        self._counts = [0] * (len(self.bounds_s) + 1)
        self._sum_s = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect.bisect_left(self.bounds_s, seconds)] += 1  # the first bound >= seconds: "le"
        self._sum_s += seconds

    def add_to(self, family: HistogramMetricFamily, labels: Sequence[str] = ()) -> None:
        """Add this histogram to ``family`` as one series: cumulative buckets, then the sum."""
        counts, sum_s = list(self._counts), self._sum_s
        buckets, total = [], 0
        for bound, count in zip((*self.bounds_s, float("inf")), counts, strict=True):
            total += count
            buckets.append((_bound_label(bound), total))
        family.add_metric(list(labels), buckets, sum_s)


def _bound_label(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class BrokerMetrics:
    """What the core counts. Pass one to :class:`~app.broker.core.Broker`; scrape it with
    :class:`BrokerCollector`."""

    def __init__(self) -> None:
        self.produced_messages: dict[str, int] = {}
        self.produced_bytes: dict[str, int] = {}
        self.consumed_messages: dict[tuple[str, str], int] = {}  # (topic, group) -> messages
        self.long_polls_held = 0
        self.websocket_subscribers = 0
        self.ha_metadata_waiting = 0
        self.flush_durations = DurationHistogram(DURATION_BUCKETS_S)

    def count_produced(self, topic: str, messages: int, body_bytes: int) -> None:
        self.produced_messages[topic] = self.produced_messages.get(topic, 0) + messages
        self.produced_bytes[topic] = self.produced_bytes.get(topic, 0) + body_bytes

    def count_consumed(self, topic: str, group: str | None, messages: int) -> None:
        """``messages`` handed out on ``topic`` to ``group`` (None: a pull without a group)."""
        key = (topic, group or "")
        self.consumed_messages[key] = self.consumed_messages.get(key, 0) + messages

    def observe_flush(self, seconds: float) -> None:
        """The store's flush listener: one CommitLog flush took ``seconds``."""
        self.flush_durations.observe(seconds)

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's series: a topic created again starts from zero."""
        self.produced_messages.pop(topic, None)
        self.produced_bytes.pop(topic, None)
        for key in [key for key in self.consumed_messages if key[0] == topic]:
            del self.consumed_messages[key]


class BrokerCollector(Collector):
    """The broker's one-line families for a Prometheus registry: the gauges of held polls,
    subscribers and held metadata requests, the flush histogram, and the store's gauges
    (``store_of()`` is None while the broker starts). Its families of a series per topic, group or
    queue are written by :func:`app.broker.metrics_text.broker_series`."""

    def __init__(self, metrics: BrokerMetrics, store_of: Callable[[], MessageStore | None]) -> None:
        self.metrics = metrics
        self.store_of = store_of

    def collect(self) -> Iterator[GaugeMetricFamily | HistogramMetricFamily]:
        metrics = self.metrics
        yield GaugeMetricFamily(
            "wharf_long_polls_held", "HTTP pulls waiting for a message", value=metrics.long_polls_held
        )
        yield GaugeMetricFamily(
            "wharf_websocket_subscribers", "Open WebSocket subscriptions", value=metrics.websocket_subscribers
        )
        yield GaugeMetricFamily(
            "wharf_ha_metadata_waiting",
            "Slaves' metadata requests held until this master's metadata changes",
            value=metrics.ha_metadata_waiting,
        )
        flush = HistogramMetricFamily(
            "wharf_flush_duration_seconds", "CommitLog flushes that brought bytes to disk", labels=[]
        )
        metrics.flush_durations.add_to(flush)
        yield flush
        store = self.store_of()
        if store is not None:
            yield from _store_families(store)


def _store_families(store: MessageStore) -> Iterator[GaugeMetricFamily]:
    commitlog = store.commitlog
    yield GaugeMetricFamily(
        "wharf_store_commitlog_bytes",
        "Bytes of the CommitLog still held, from its first retained offset to its end",
        value=commitlog.max_offset - commitlog.min_offset,
    )
    guard = store.disk_guard
    yield GaugeMetricFamily(
        "wharf_store_disk_used_ratio",
        "Share of the store's disk in use, as the disk guard last read it",
        value=guard.used_percent / 100,
    )
    yield GaugeMetricFamily(
        "wharf_store_writes_refused",
        "1 while the disk guard refuses writes (the disk is over WHARF_DISK_REFUSE_WRITES_RATIO), else 0",
        value=0 if guard.writable else 1,
    )
    yield GaugeMetricFamily(
        "wharf_recovery_duration_seconds",
        "How long the store took to load and recover at its last start",
        value=store.recovery_seconds,
    )
