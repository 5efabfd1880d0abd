"""A bootstrap broker that cannot reach the route registry answers a route request 503: the
clients ask the next bootstrap broker instead of failing (found by the nemesis run, where a
producer whose first broker was cut off the registry failed every send until it was healed)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url
from wharf_client import RouteCache
from wharf_client.aio import AsyncRouteCache
from wharf_client.errors import BrokerError

from tests.api.server import BrokerProcess
from tests.routing.proxy import TcpProxy

TOPIC = "fallback"


@pytest.fixture
def brokers(tmp_path: Path, postgres_url: str) -> Iterator[tuple[BrokerProcess, BrokerProcess, TcpProxy]]:
    """A broker cut off the registry (through a proxy, stopped) and one that reaches it."""
    url = make_url(postgres_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432).start()
    cut = BrokerProcess(
        tmp_path / "cut",
        database_url=url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False),
        database_timeout_s=0.5,
        cluster_name="fallback",
        broker_name="fallback-cut",
    ).start()
    reaching = BrokerProcess(
        tmp_path / "reaching", database_url=postgres_url, cluster_name="fallback", broker_name="fallback-ok"
    ).start()
    try:
        created = httpx.post(f"{reaching.url}/v1/topics", json={"name": TOPIC, "queues": 2})
        assert created.status_code == 201, created.text
        proxy.stop()
        yield cut, reaching, proxy
    finally:
        proxy.start()
        for process in (cut, reaching):
            process.stop()
        proxy.close()


def test_the_route_comes_from_the_next_bootstrap_broker_when_the_first_answers_503(
    brokers: tuple[BrokerProcess, BrokerProcess, TcpProxy],
) -> None:
    cut, reaching, _ = brokers
    assert httpx.get(f"{cut.url}/v1/topics/{TOPIC}/route", timeout=10).status_code == 503

    with httpx.Client(timeout=10) as http:
        route = RouteCache(http, [cut.url, reaching.url]).get(TOPIC)
    assert {queue.broker_name for queue in route.write_queues} == {"fallback-ok"}

    async def fetch() -> set[str]:
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await AsyncRouteCache(http, [cut.url, reaching.url]).get(TOPIC)
        return {queue.broker_name for queue in answer.write_queues}

    assert asyncio.run(fetch()) == {"fallback-ok"}


def test_a_refusal_is_still_raised_and_a_503_everywhere_says_no_broker_answered(
    brokers: tuple[BrokerProcess, BrokerProcess, TcpProxy],
) -> None:
    cut, reaching, _ = brokers
    with httpx.Client(timeout=10) as http:
        with pytest.raises(BrokerError) as refused:
            RouteCache(http, [reaching.url, cut.url]).get("no-such-topic")
        assert refused.value.status == 404
        with pytest.raises(Exception, match="no broker answered the route") as unavailable:
            RouteCache(http, [cut.url]).get(TOPIC)
        assert "503" in str(unavailable.value)
