"""Planning on the driver, without Spark or a broker: options, discovery, offset resolution, splits."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")

from wharf_client.queues import QueueOffsets  # noqa: E402
from wharf_client.routes import TopicRoute  # noqa: E402

from spark_jobs.errors import DataLossError, WharfSourceError  # noqa: E402
from spark_jobs.options import OptionError, ReadOptions, parse_offsets  # noqa: E402
from spark_jobs.planning import (  # noqa: E402
    OffsetRange,
    QueueRef,
    QueueState,
    discover,
    plan_ranges,
    resolve_ends,
    resolve_starts,
)
from spark_jobs.stream import limit_offsets  # noqa: E402


class FakeClient:
    """The broker calls planning makes, answered from dictionaries."""

    def __init__(
        self,
        route: dict[str, Any] | None = None,
        queues: dict[str, list[tuple[int, int]]] | None = None,
        times: dict[tuple[int, int], int] | None = None,
    ) -> None:
        self._route = route
        self._queues = queues or {}
        self._times = times or {}
        self.searched: list[tuple[str, int, int]] = []
        self.fallbacks: dict[str, tuple[str, ...]] = {}  # QueueClient's: learned from the route

    def route(self, bootstrap: list[str], topic: str) -> TopicRoute | None:
        if self._route is None:
            return None
        route = TopicRoute.from_json(self._route)
        for queue in route.read_queues:
            self.fallbacks[queue.address] = route.replicas(queue)[1:]
        return route

    def queues(self, address: str, topic: str) -> list[QueueOffsets]:
        return [
            QueueOffsets(queue_id, low, high) for queue_id, (low, high) in enumerate(self._queues[address])
        ]

    def search_offset(self, address: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        self.searched.append((address, queue_id, timestamp_ms))
        return self._times[(queue_id, timestamp_ms)]


def options(**overrides: str) -> ReadOptions:
    return ReadOptions.parse({"url": "http://a", "topic": "orders", **overrides})


def states(*bounds: tuple[int, int], broker: str = "", address: str = "http://a") -> list[QueueState]:
    return [
        QueueState(QueueRef(broker, queue_id, address), low, high)
        for queue_id, (low, high) in enumerate(bounds)
    ]


def test_offsets_are_earliest_latest_or_json_with_or_without_the_topic() -> None:
    assert parse_offsets("startingOffsets", " Earliest ", "orders") == "earliest"
    assert parse_offsets("startingOffsets", '{"orders": {"0": 5, "1": -2}}', "orders") == {"0": 5, "1": -2}
    assert parse_offsets("startingOffsets", '{"broker-a:3": -1}', "orders") == {"broker-a:3": -1}
    for bad in ('{"0": -3}', '{"zero": 1}', "[1, 2]", "soon", '{"0": 1.5}'):
        with pytest.raises(OptionError):
            parse_offsets("startingOffsets", bad, "orders")


def test_batch_options_refuse_what_a_batch_cannot_mean() -> None:
    with pytest.raises(OptionError, match="'topic' is required"):
        ReadOptions.parse({"url": "http://a"})
    with pytest.raises(OptionError, match="latest"):
        options(startingOffsets="latest")
    with pytest.raises(OptionError, match="earliest"):
        options(endingOffsets='{"0": -2}')
    with pytest.raises(OptionError, match="a stream has no end"):
        ReadOptions.parse({"url": "http://a", "topic": "t", "endingOffsets": "latest"}, streaming=True)
    assert ReadOptions.parse({"url": "http://a", "topic": "t"}, streaming=True).starting_offsets == "latest"
    assert options(url="http://a/, http://b").addresses == ("http://a", "http://b")


def test_discovery_reads_every_master_the_route_names() -> None:
    route = {
        "topic": "orders",
        "queue_datas": [
            {"broker_name": "a", "read_queue_nums": 2, "write_queue_nums": 2, "perm": 6, "topic_sys_flag": 0},
            {"broker_name": "b", "read_queue_nums": 1, "write_queue_nums": 2, "perm": 6, "topic_sys_flag": 0},
            {"broker_name": "c", "read_queue_nums": 2, "write_queue_nums": 2, "perm": 2, "topic_sys_flag": 0},
        ],
        "broker_datas": [
            {"cluster": "x", "broker_name": "a", "addresses": {"0": "http://a/", "1": "http://a-slave"}},
            {"cluster": "x", "broker_name": "b", "addresses": {"0": "http://b"}},
            {"cluster": "x", "broker_name": "c", "addresses": {"0": "http://c"}},
        ],
    }
    client = FakeClient(route, {"http://a": [(0, 3), (1, 4)], "http://b": [(0, 5), (0, 6)]})
    found = discover(client, options())  # type: ignore[arg-type]
    assert [(s.ref.key, s.ref.address, s.min_offset, s.max_offset) for s in found] == [
        ("a:0", "http://a", 0, 3),
        ("a:1", "http://a", 1, 4),
        ("b:0", "http://b", 0, 5),  # b reads one queue; c is write-only
    ]


def test_discovery_without_a_route_reads_the_given_address() -> None:
    client = FakeClient(None, {"http://a": [(0, 2), (0, 0)]})
    assert [s.ref.key for s in discover(client, options())] == ["0", "1"]  # type: ignore[arg-type]
    with pytest.raises(WharfSourceError, match="no route"):
        discover(client, options(discovery="route"))  # type: ignore[arg-type]


def test_starts_follow_the_spec_and_refuse_deleted_offsets() -> None:
    queues = states((2, 10), (0, 5), (0, 0))
    client = FakeClient()
    starts = resolve_starts(client, options(startingOffsets='{"0": 4, "1": -1}'), queues)  # type: ignore[arg-type]
    assert [starts[s.ref] for s in queues] == [4, 5, 0]  # queue 2 is not named: earliest
    with pytest.raises(DataLossError, match=r"offsets 0\.\.1 were deleted"):
        resolve_starts(client, options(startingOffsets='{"0": 0}'), queues)  # type: ignore[arg-type]
    skipped = resolve_starts(client, options(startingOffsets='{"0": 0}', failOnDataLoss="false"), queues)  # type: ignore[arg-type]
    assert skipped[queues[0].ref] == 2
    with pytest.raises(WharfSourceError, match="ends at offset 5"):
        resolve_starts(client, options(startingOffsets='{"1": 6}'), queues)  # type: ignore[arg-type]


def test_a_bare_queue_id_applies_to_that_queue_on_every_broker() -> None:
    queues = states((0, 9), (0, 9), broker="a") + states((0, 9), broker="b", address="http://b")
    starts = resolve_starts(FakeClient(), options(startingOffsets='{"1": 7, "b:0": 3}'), queues)  # type: ignore[arg-type]
    assert {ref.key: offset for ref, offset in starts.items()} == {"a:0": 0, "a:1": 7, "b:0": 3}


def test_timestamps_are_looked_up_per_queue_and_skip_empty_queues() -> None:
    queues = states((0, 10), (3, 3))
    client = FakeClient(times={(0, 1000): 6})
    starts = resolve_starts(client, options(startingTimestamp="1000"), queues)  # type: ignore[arg-type]
    assert [starts[s.ref] for s in queues] == [6, 3]
    assert client.searched == [("http://a", 0, 1000)]


def test_ends_default_to_latest_and_cannot_pass_it() -> None:
    queues = states((0, 10), (0, 5))
    client = FakeClient()
    ends = resolve_ends(client, options(endingOffsets='{"0": 7}'), queues)  # type: ignore[arg-type]
    assert [ends[s.ref] for s in queues] == [7, 5]
    with pytest.raises(WharfSourceError, match="ends at 5"):
        resolve_ends(client, options(endingOffsets='{"1": 6}'), queues)  # type: ignore[arg-type]


def test_ranges_skip_empty_queues_and_split_to_min_partitions() -> None:
    a, b, c = (QueueRef("", queue_id, "http://a") for queue_id in range(3))
    ranges = plan_ranges("t", {a: 0, b: 10, c: 4}, {a: 90, b: 20, c: 4}, min_partitions=10)
    assert [(r.queue_id, r.from_offset, r.until_offset) for r in ranges] == [
        (0, 0, 10),
        (0, 10, 20),
        (0, 20, 30),
        (0, 30, 40),
        (0, 40, 50),
        (0, 50, 60),
        (0, 60, 70),
        (0, 70, 80),
        (0, 80, 90),
        (1, 10, 20),
    ]
    assert plan_ranges("t", {a: 0, b: 10}, {a: 3, b: 10}, min_partitions=1) == [
        OffsetRange("t", "", "http://a", 0, 0, 3)
    ]
    # A range is never cut finer than one message per piece.
    assert len(plan_ranges("t", {a: 0}, {a: 2}, min_partitions=8)) == 2
    with pytest.raises(WharfSourceError, match="start at 5 but end at 4"):
        plan_ranges("t", {a: 5}, {a: 4})


def test_trigger_limits_share_rows_by_backlog_and_add_up_exactly() -> None:
    assert limit_offsets({"0": 0, "1": 0}, {"0": 30, "1": 10}, 100) == {"0": 30, "1": 10}
    assert limit_offsets({"0": 0, "1": 0}, {"0": 30, "1": 10}, 8) == {"0": 6, "1": 2}
    limited = limit_offsets({"0": 5, "1": 0, "2": 0}, {"0": 6, "1": 1, "2": 1}, 2)
    assert sum(limited[key] - start for key, start in {"0": 5, "1": 0, "2": 0}.items()) == 2
