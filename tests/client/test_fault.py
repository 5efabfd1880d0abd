"""Latency fault tolerance and queue selection, with a fake clock."""

from __future__ import annotations

import itertools

import pytest
from wharf_client.aio_producer import select_queue
from wharf_client.fault import LatencyFaultTolerance, avoid_duration_ms
from wharf_client.routes import MessageQueue, TopicRoute


@pytest.mark.parametrize(
    ("latency_ms", "avoided_ms"),
    [
        (0, 0),
        (549, 0),
        (550, 30_000),
        (999, 30_000),
        (1_000, 60_000),
        (2_000, 120_000),
        (3_000, 180_000),
        (14_999, 180_000),
        (15_000, 600_000),
        (30_000, 600_000),
    ],
)
def test_latency_to_avoidance_table(latency_ms: float, avoided_ms: int) -> None:
    assert avoid_duration_ms(latency_ms) == avoided_ms


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_failed_broker_is_avoided_for_ten_minutes() -> None:
    clock = Clock()
    faults = LatencyFaultTolerance(clock)
    faults.update("a", 0, failed=True)
    assert not faults.available("a") and faults.available("b")
    clock.now += 599
    assert not faults.available("a")
    clock.now += 1
    assert faults.available("a")


def test_a_fast_answer_clears_the_record() -> None:
    faults = LatencyFaultTolerance(Clock())
    faults.update("a", 2_500)
    assert not faults.available("a")
    faults.update("a", 10)
    assert faults.available("a")


def queues() -> tuple[MessageQueue, ...]:
    return tuple(MessageQueue(name, q, f"http://{name}") for name in ("a", "b", "c") for q in range(2))


def test_selection_skips_avoided_brokers_and_the_one_that_just_failed() -> None:
    faults, counter = LatencyFaultTolerance(Clock()), itertools.count()
    faults.update("a", 0, failed=True)
    picked = {select_queue(queues(), None, "b", faults, counter).broker_name for _ in range(12)}
    assert picked == {"c"}
    everyone_bad = {"a", "b", "c"}
    for name in everyone_bad:
        faults.update(name, 0, failed=True)
    # All avoided: still send somewhere other than the broker that just failed.
    assert select_queue(queues(), None, "a", faults, counter).broker_name in {"b", "c"}


def test_sharding_key_always_picks_the_same_queue() -> None:
    faults, counter = LatencyFaultTolerance(Clock()), itertools.count()
    picks = {select_queue(queues(), "customer-9", None, faults, counter) for _ in range(10)}
    assert len(picks) == 1
    assert select_queue(queues(), "customer-9", picks.pop().broker_name, faults, counter) in queues()


def test_route_takes_master_addresses_and_permissions() -> None:
    route = TopicRoute.from_json(
        {
            "topic": "t",
            "queue_datas": [
                {
                    "broker_name": "a",
                    "read_queue_nums": 2,
                    "write_queue_nums": 1,
                    "perm": 6,
                    "topic_sys_flag": 0,
                },
                {
                    "broker_name": "b",
                    "read_queue_nums": 1,
                    "write_queue_nums": 1,
                    "perm": 4,
                    "topic_sys_flag": 0,
                },
                {
                    "broker_name": "gone",
                    "read_queue_nums": 1,
                    "write_queue_nums": 1,
                    "perm": 6,
                    "topic_sys_flag": 0,
                },
            ],
            "broker_datas": [
                {"cluster": "c", "broker_name": "a", "addresses": {"0": "http://a", "1": "http://a-slave"}},
                {"cluster": "c", "broker_name": "b", "addresses": {"0": "http://b"}},
            ],
        }
    )
    assert [(q.broker_name, q.queue_id, q.address) for q in route.write_queues] == [("a", 0, "http://a")]
    # A sharding key maps over every writable queue, a broker name without a master included.
    assert [(q.broker_name, q.queue_id, q.address) for q in route.keyed_queues] == [
        ("a", 0, "http://a"),
        ("gone", 0, ""),
    ]
    assert [(q.broker_name, q.queue_id) for q in route.read_queues] == [("a", 0), ("a", 1), ("b", 0)]
