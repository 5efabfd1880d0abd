"""The broker's metrics as Prometheus reads them: lag against a real store, counters, escaping and
histogram buckets, each parsed back with prometheus_client's own parser."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from app.broker.metrics import BrokerMetrics, DurationHistogram
from app.broker.metrics_text import broker_series, consumer_lag
from app.store import Message, MessageStore
from tests.store.conftest import tiny_config


def parsed(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(tiny_config(tmp_path / "store")) as opened:
        yield opened


def test_lag_is_the_max_offset_after_the_committed_one(store: MessageStore) -> None:
    store.append([Message("orders", b"x", 0) for _ in range(100)])
    store.append([Message("orders", b"x", 1) for _ in range(3)])
    offsets = store.consumer_offsets
    offsets.commit("billing", "orders", 0, 40)
    offsets.commit("billing", "orders", 1, 3)
    offsets.commit("audit", "orders", 0, 100)
    offsets.commit("audit", "orders", 2, 0)  # a queue nothing was written to

    lag = {
        labels: value
        for (name, labels), value in parsed(consumer_lag(store)).items()
        if name == "wharf_consumer_lag"
    }
    assert lag == {
        (("group", "billing"), ("queue", "0"), ("topic", "orders")): 60,
        (("group", "billing"), ("queue", "1"), ("topic", "orders")): 0,
        (("group", "audit"), ("queue", "0"), ("topic", "orders")): 0,
        (("group", "audit"), ("queue", "2"), ("topic", "orders")): 0,
    }


def test_counters_by_topic_and_group(store: MessageStore) -> None:
    metrics = BrokerMetrics()
    metrics.count_produced("orders", 3, 30)
    metrics.count_produced("orders", 2, 5)
    metrics.count_consumed("orders", "billing", 4)
    metrics.count_consumed("orders", None, 1)

    samples = parsed(broker_series(metrics, store))
    assert samples[("wharf_messages_produced_total", (("topic", "orders"),))] == 5
    assert samples[("wharf_bytes_produced_total", (("topic", "orders"),))] == 35
    assert samples[("wharf_messages_consumed_total", (("group", "billing"), ("topic", "orders")))] == 4
    assert samples[("wharf_messages_consumed_total", (("group", ""), ("topic", "orders")))] == 1


def test_label_values_are_escaped(store: MessageStore) -> None:
    group = 'say "hi"\\now\nand then'
    store.append([Message("orders", b"x", 0)])
    store.consumer_offsets.commit(group, "orders", 0, 0)
    metrics = BrokerMetrics()
    metrics.count_consumed("orders", group, 1)

    samples = parsed(broker_series(metrics, store))
    assert samples[("wharf_consumer_lag", (("group", group), ("queue", "0"), ("topic", "orders")))] == 1
    assert samples[("wharf_messages_consumed_total", (("group", group), ("topic", "orders")))] == 1


def test_a_histogram_bucket_holds_what_is_at_or_under_its_bound() -> None:
    histogram = DurationHistogram((0.001, 0.01))
    for seconds in (0.001, 0.005, 0.0005, 5.0):
        histogram.observe(seconds)
    family = HistogramMetricFamily("wharf_test_seconds", "test", labels=[])
    histogram.add_to(family)

    samples = {(sample.name, sample.labels.get("le")): sample.value for sample in family.samples}
    assert samples[("wharf_test_seconds_bucket", "0.001")] == 2
    assert samples[("wharf_test_seconds_bucket", "0.01")] == 3
    assert samples[("wharf_test_seconds_bucket", "+Inf")] == 4
    assert samples[("wharf_test_seconds_count", None)] == 4
    assert samples[("wharf_test_seconds_sum", None)] == pytest.approx(5.0065)
