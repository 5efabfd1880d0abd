"""The push subscriptions' metrics, read from their pushers when Prometheus scrapes (in the scrape's
thread: each table is copied whole in one step under the GIL):

- ``wharf_push_delivered_total{group}``: messages acknowledged with a 2xx;
- ``wharf_push_failed_total{group,kind}``: messages of failed requests, by ``kind`` (status,
  timeout, connect, tls, protocol, refused);
- ``wharf_push_retried_total{group}``, ``wharf_push_dead_lettered_total{group}``: messages sent to
  the retry topic (or retried in place, ordered) and to the dead letters;
- ``wharf_push_in_flight{group}``, ``wharf_push_lag{group}``: requests waiting for an answer, and
  messages of the group's queues not yet committed;
- ``wharf_push_delivery_latency_seconds{group}``: from a message's store to its acknowledgement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from app.push.service import PushService

Family = CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily


class PushCollector(Collector):
    def __init__(self, service_of: Callable[[], PushService | None]) -> None:
        self.service_of = service_of

    def collect(self) -> Iterator[Family]:
        service = self.service_of()
        pushers = sorted(dict(service.pushers).items()) if service is not None else []
        delivered = CounterMetricFamily(
            "wharf_push_delivered", "Messages acknowledged with a 2xx", labels=["group"]
        )
        failed = CounterMetricFamily(
            "wharf_push_failed", "Messages of failed push requests", labels=["group", "kind"]
        )
        retried = CounterMetricFamily(
            "wharf_push_retried", "Messages sent to the retry topic or retried in place", labels=["group"]
        )
        dead = CounterMetricFamily(
            "wharf_push_dead_lettered", "Messages sent to the dead letters", labels=["group"]
        )
        in_flight = GaugeMetricFamily(
            "wharf_push_in_flight", "Push requests waiting for an answer", labels=["group"]
        )
        lag = GaugeMetricFamily(
            "wharf_push_lag", "Messages of the group's queues not yet committed", labels=["group"]
        )
        latency = HistogramMetricFamily(
            "wharf_push_delivery_latency_seconds",
            "From a message's store to its acknowledgement",
            labels=["group"],
        )
        for group, pusher in pushers:
            state = pusher.state
            delivered.add_metric([group], state.delivered)
            for kind, count in sorted(dict(state.failed).items()):
                failed.add_metric([group, kind.value], count)
            retried.add_metric([group], state.retried)
            dead.add_metric([group], state.dead_lettered)
            in_flight.add_metric([group], state.in_flight)
            lag.add_metric([group], pusher.lag())
            state.latency.add_to(latency, (group,))
        yield from (delivered, failed, retried, dead, in_flight, lag, latency)
