"""The route registry's database goes away and comes back while a broker runs (PostgreSQL behind a
proxy the test cuts): readiness and every request that needs the database answer 503 (50303) at
once, produce and pull on the broker's own topics go on, and all is well again without a restart."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from app.api.errors import ErrorCode
from tests.api.server import BrokerProcess
from tests.routing.proxy import TcpProxy

pytestmark = pytest.mark.timeout(120)

BROKER_NAME = "outage-a"
CLUSTER = "outage"
DATABASE_TIMEOUT_S = 0.5
# Much longer than DATABASE_TIMEOUT_S: an answer slower than this is a hang.
CLIENT_TIMEOUT_S = 5.0


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def proxy(postgres_url: str) -> Iterator[TcpProxy]:
    url = make_url(postgres_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432).start()
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory, postgres_url: str, proxy: TcpProxy
) -> Iterator[BrokerProcess]:
    through_proxy = make_url(postgres_url).set(host="127.0.0.1", port=proxy.port)
    process = BrokerProcess(
        Path(tmp_path_factory.mktemp("outage")) / "store",
        database_url=through_proxy.render_as_string(hide_password=False),
        database_timeout_s=DATABASE_TIMEOUT_S,
        cluster_name=CLUSTER,
        broker_name=BROKER_NAME,
        heartbeat_interval_s=0.5,
        expiry_scan_interval_s=0.5,
    ).start()
    yield process
    proxy.start()  # let it unregister on the way out
    process.stop()


@pytest.fixture
def client(broker: BrokerProcess, proxy: TcpProxy) -> Iterator[httpx.Client]:
    proxy.start()
    with httpx.Client(base_url=broker.url, timeout=CLIENT_TIMEOUT_S) as client:
        wait_for(lambda: client.get("/readyz").status_code == 200, "the broker to be ready")
        yield client


def assert_unavailable(response: httpx.Response) -> None:
    body = response.json()
    assert response.status_code == 503, (response.request.url, body)
    assert body["error_code"] == ErrorCode.REGISTRY_UNAVAILABLE, body
    assert "route registry" in body["message"], body


def last_heartbeat_ms(client: httpx.Client) -> int:
    clusters = client.get("/v1/clusters").json()["clusters"]
    (mine,) = [
        b for c in clusters if c["name"] == CLUSTER for b in c["brokers"] if b["broker_name"] == BROKER_NAME
    ]
    assert mine["alive"]
    return int(mine["last_heartbeat_ms"])


def produce(client: httpx.Client, topic: str, body: str) -> httpx.Response:
    return client.post(f"/v1/topics/{topic}/messages", json={"body": body, "queue_id": 0})


def pulled_bodies(client: httpx.Client, topic: str) -> list[str]:
    answer = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0})
    assert answer.status_code == 200, answer.text
    return [m["body"] for m in answer.json()["messages"]]


def check_outage(client: httpx.Client, topic: str) -> None:
    """What the broker answers while its registry is unreachable."""
    wait_for(lambda: client.get("/readyz").status_code != 200, "readiness to notice the outage")
    assert_unavailable(client.get("/readyz"))
    assert_unavailable(client.get(f"/v1/topics/{topic}/route"))
    assert_unavailable(client.get("/v1/clusters"))
    assert_unavailable(client.post("/v1/topics", json={"name": f"{topic}-new", "queues": 2}))
    assert_unavailable(client.post("/v1/topics", json={"name": f"{topic}-new", "cluster": CLUSTER}))
    assert_unavailable(client.delete(f"/v1/topics/{topic}"))
    # Whether an unknown topic lives on another broker only the registry can tell.
    assert_unavailable(client.get("/v1/topics/never-made"))
    assert_unavailable(client.get("/v1/topics/never-made/queues/0/messages", params={"offset": 0}))
    assert_unavailable(produce(client, "never-made", "auto-create?"))
    ws_url = f"{str(client.base_url).replace('http', 'ws', 1)}/v1/ws/subscribe?topic=never-made"
    with (
        ws_connect(ws_url, open_timeout=CLIENT_TIMEOUT_S) as socket,
        pytest.raises(ConnectionClosed) as closed,
    ):
        socket.recv(timeout=CLIENT_TIMEOUT_S)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4503 and closed.value.rcvd.reason.startswith("50303")
    # Nothing changed on this broker.
    names = {t["name"] for t in client.get("/v1/topics").json()["topics"]}
    assert topic in names and f"{topic}-new" not in names and "never-made" not in names
    # The broker's own topics go on from memory.
    during = produce(client, topic, "during")
    assert during.status_code == 200, during.text
    assert during.json()["results"][0]["status"] == "SEND_OK"
    assert pulled_bodies(client, topic)[-2:] == ["before", "during"]


def check_recovery(client: httpx.Client, topic: str) -> None:
    wait_for(lambda: client.get("/readyz").status_code == 200, "readiness after the registry came back")
    assert client.get(f"/v1/topics/{topic}/route").status_code == 200
    first = last_heartbeat_ms(client)
    wait_for(lambda: last_heartbeat_ms(client) > first, "heartbeats to resume")
    created = client.post("/v1/topics", json={"name": f"{topic}-after", "queues": 2})
    assert created.status_code == 201, created.text
    assert client.get(f"/v1/topics/{topic}-after/route").status_code == 200


@pytest.mark.parametrize("cut", ["down", "hanging"])
def test_an_unreachable_registry_answers_503_and_own_topics_go_on(
    client: httpx.Client, proxy: TcpProxy, cut: str
) -> None:
    topic = f"kept-{cut}"
    assert client.post("/v1/topics", json={"name": topic, "queues": 2}).status_code == 201
    assert produce(client, topic, "before").status_code == 200

    if cut == "down":
        proxy.stop()  # connections reset, new ones refused
    else:
        proxy.hang()  # connections open, nothing answered: only the timeouts end a call

    check_outage(client, topic)
    proxy.start()
    check_recovery(client, topic)
