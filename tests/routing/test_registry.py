"""The route registry as a specification, on SQLite and PostgreSQL, with a fake clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, event
from wharf_client.perm import PERM_READ

from app.routing.registry import BrokerIdentity, RouteRegistry
from app.routing.schema import make_engine, upgrade
from app.routing.topic_config import TopicConfig


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def registry(database_url: str, clock: Clock) -> Iterator[RouteRegistry]:
    engine = make_engine(database_url)
    upgrade(engine)
    yield RouteRegistry(engine, clock=clock)
    engine.dispose()


A = BrokerIdentity("east", "broker-a", 0, "http://a:8080")
A_SLAVE = BrokerIdentity("east", "broker-a", 1, "http://a2:8080")
B = BrokerIdentity("east", "broker-b", 0, "http://b:8080")
C = BrokerIdentity("west", "broker-c", 0, "http://c:8080")


def test_route_lists_queue_data_and_addresses(registry: RouteRegistry) -> None:
    registry.register(A, [TopicConfig("orders", 4, 4)])
    registry.register(B, [TopicConfig("orders", 2, 2, PERM_READ)])
    route = registry.topic_route("orders")
    assert route is not None
    assert [(q["broker_name"], q["read_queue_nums"], q["perm"]) for q in route["queue_datas"]] == [
        ("broker-a", 4, 6),
        ("broker-b", 2, 4),
    ]
    assert {b["broker_name"]: b["addresses"] for b in route["broker_datas"]} == {
        "broker-a": {"0": "http://a:8080"},
        "broker-b": {"0": "http://b:8080"},
    }
    assert registry.topic_route("unknown") is None


def test_queue_data_is_taken_from_masters_only(registry: RouteRegistry) -> None:
    registry.register(A, [TopicConfig("orders", 4, 4)])
    registry.register(A_SLAVE, [TopicConfig("orders", 16, 16), TopicConfig("slave-only")])
    route = registry.topic_route("orders")
    assert route is not None
    assert [q["read_queue_nums"] for q in route["queue_datas"]] == [4]
    assert route["broker_datas"][0]["addresses"] == {"0": "http://a:8080", "1": "http://a2:8080"}
    assert registry.topic_route("slave-only") is None


def test_heartbeat_replaces_a_brokers_topics(registry: RouteRegistry) -> None:
    registry.register(A, [TopicConfig("orders"), TopicConfig("gone")])
    registry.register(A, [TopicConfig("orders", 8, 8)])
    assert registry.topic_route("gone") is None
    route = registry.topic_route("orders")
    assert route is not None and route["queue_datas"][0]["write_queue_nums"] == 8


def test_silent_brokers_expire_with_what_they_leave_empty(registry: RouteRegistry, clock: Clock) -> None:
    registry.register(A, [TopicConfig("shared"), TopicConfig("a-only")])
    registry.register(C, [TopicConfig("shared")])
    clock.now += 100
    registry.register(A, [TopicConfig("shared"), TopicConfig("a-only")])  # A heartbeats, C is silent
    clock.now += 30
    assert registry.scan_expired(120) == ["http://c:8080"]
    route = registry.topic_route("shared")
    assert route is not None and [q["broker_name"] for q in route["queue_datas"]] == ["broker-a"]
    assert [cluster["name"] for cluster in registry.clusters(120)] == ["east"]
    assert registry.scan_expired(120) == []


def test_a_broker_name_keeps_its_queues_while_a_slave_of_it_is_registered(
    registry: RouteRegistry, clock: Clock
) -> None:
    registry.register(A, [TopicConfig("orders", 4, 4)])
    registry.register(A_SLAVE, [TopicConfig("orders", 4, 4)])
    clock.now += 100
    registry.register(A_SLAVE, [TopicConfig("orders", 4, 4)])  # the master is silent
    clock.now += 30
    assert registry.scan_expired(120) == ["http://a:8080"]
    route = registry.topic_route("orders")
    assert route is not None and [q["broker_name"] for q in route["queue_datas"]] == ["broker-a"]
    assert route["broker_datas"][0]["addresses"] == {"1": "http://a2:8080"}
    clock.now += 130
    assert registry.scan_expired(120) == ["http://a2:8080"]
    assert registry.topic_route("orders") is None


def test_clean_unregister_removes_broker_topics_and_cluster(registry: RouteRegistry) -> None:
    registry.register(C, [TopicConfig("west-topic")])
    registry.unregister(C)
    assert registry.topic_route("west-topic") is None
    assert registry.clusters(120) == []


def test_clusters_report_liveness(registry: RouteRegistry, clock: Clock) -> None:
    registry.register(A, [])
    clock.now += 5
    registry.register(B, [])
    clock.now += 118
    (east,) = registry.clusters(120)
    assert {b["broker_name"]: b["alive"] for b in east["brokers"]} == {"broker-a": False, "broker-b": True}


def test_masters_of_a_cluster_or_by_name(registry: RouteRegistry) -> None:
    for broker in (A, A_SLAVE, B, C):
        registry.register(broker, [])
    assert registry.masters("east") == [("broker-a", "http://a:8080"), ("broker-b", "http://b:8080")]
    assert registry.masters(broker_names=["broker-c"]) == [("broker-c", "http://c:8080")]


# -- publishing single topics: O(1) in the number of topics -------------------------------------------


class Writes:
    """Statements that change the database, and the rows they change."""

    def __init__(self, engine: Engine) -> None:
        self.statements: list[str] = []
        self.rows = 0
        event.listen(engine, "after_cursor_execute", self._seen)

    def _seen(self, conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        verb = statement.lstrip().split(None, 1)[0].upper()
        if verb in ("INSERT", "UPDATE", "DELETE"):
            self.statements.append(verb)
            self.rows += max(cursor.rowcount, 0)

    def reset(self) -> tuple[list[str], int]:
        seen = (self.statements, self.rows)
        self.statements, self.rows = [], 0
        return seen


def topics(count: int, prefix: str = "t") -> list[TopicConfig]:
    return [TopicConfig(f"{prefix}{index:05d}", 8, 8) for index in range(count)]


def test_creating_a_topic_writes_as_much_at_2000_topics_as_at_10(registry: RouteRegistry) -> None:
    writes = Writes(registry.engine)
    local = topics(10)
    registry.register(A, local)
    writes.reset()
    assert registry.publish(A, [TopicConfig("new-1", 8, 8)], [], 2)
    few = writes.reset()
    local += [TopicConfig("new-1", 8, 8), *topics(1_990, "u")]
    registry.publish(A, local[11:], [], 3)
    writes.reset()
    assert registry.publish(A, [TopicConfig("new-2", 8, 8)], [], 4)
    many = writes.reset()
    assert few == many
    assert many[1] <= 3  # the broker's row, the topic row, its queue data row
    route = registry.topic_route("new-2")
    assert route is not None and route["queue_datas"][0]["write_queue_nums"] == 8
    assert registry.publish(A, [], ["new-2"], 5)
    assert registry.topic_route("new-2") is None


def test_a_heartbeat_writes_only_the_topics_that_changed(registry: RouteRegistry) -> None:
    local = topics(500)
    registry.register(A, local)
    writes = Writes(registry.engine)
    registry.register(A, local, data_version=1)
    statements, rows = writes.reset()
    assert rows == 1 and statements == ["UPDATE"]  # the broker's liveness row
    local[7] = TopicConfig(local[7].name, 2, 2)
    registry.register(A, local[:-1], data_version=2)
    _, rows = writes.reset()
    assert rows <= 5  # broker row; topic + queue data upserted; queue data + empty topic deleted
    assert registry.topic_route(local[-1].name) is None
    route = registry.topic_route(local[7].name)
    assert route is not None and route["queue_datas"][0]["read_queue_nums"] == 2


def test_publishing_a_deletion_keeps_a_topic_another_broker_still_has(registry: RouteRegistry) -> None:
    registry.register(A, [TopicConfig("shared"), TopicConfig("a-only")])
    registry.register(B, [TopicConfig("shared")])
    assert registry.publish(A, [], ["shared", "a-only"], 2)
    route = registry.topic_route("shared")
    assert route is not None and [q["broker_name"] for q in route["queue_datas"]] == ["broker-b"]
    assert registry.topic_route("a-only") is None


def test_a_slave_publishes_no_queue_data_and_an_unknown_broker_is_told(registry: RouteRegistry) -> None:
    registry.register(A, [])
    registry.register(A_SLAVE, [])
    assert registry.publish(A_SLAVE, [TopicConfig("slave-only")], [], 2)
    assert registry.topic_route("slave-only") is None
    assert not registry.publish(C, [TopicConfig("west")], [], 2)  # never registered: register in full
    assert registry.topic_route("west") is None
