"""The ACL on event streams: SUB on the topic (and on ``group``), credentials in the Authorization
header or, for EventSource, the ``token`` query parameter."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.acl_setup import ADMIN, CONSUMER, PRODUCER, READ_WRITE, acl_broker, assert_refused, client_for
from tests.api.server import BrokerProcess
from tests.api.sse import events, message, produce


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = acl_broker(tmp_path_factory.mktemp("acl-events")).start()
    with client_for(process, ADMIN) as admin:
        for name in ("orders", "audit"):
            assert admin.post("/v1/topics", json={"name": name, "queues": 2}).status_code == 201
        produce(admin, "orders", [{"body": "o1"}])
    yield process
    process.stop()


def token(account: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(f"{account[0]}:{account[1]}".encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("account", "topic", "params", "status"),
    [
        (None, "orders", {}, 401),
        (PRODUCER, "orders", {}, 403),
        (CONSUMER, "audit", {}, 403),
        (CONSUMER, "orders", {"group": "other"}, 403),
        (READ_WRITE, "orders", {"group": "blocked"}, 403),
    ],
)
def test_a_stream_without_sub_is_refused(
    broker: BrokerProcess, account: tuple[str, str] | None, topic: str, params: dict[str, Any], status: int
) -> None:
    with client_for(broker, account) as client:
        assert_refused(client.get(f"/v1/topics/{topic}/events", params=params), status)


@pytest.mark.parametrize("params", [{}, {"group": "billing"}])
def test_sub_on_the_topic_and_group_may_follow_it(broker: BrokerProcess, params: dict[str, Any]) -> None:
    with client_for(broker, CONSUMER) as client:
        received = events(client, "orders", 1, **{"from": "first", **params})
    assert message(received[0])["body"] == "o1"


def test_the_token_parameter_authenticates_an_event_source(broker: BrokerProcess) -> None:
    with client_for(broker, None) as client:
        received = events(client, "orders", 1, token=token(CONSUMER), **{"from": "first"})
        assert message(received[0])["body"] == "o1"
        assert_refused(client.get("/v1/topics/orders/events", params={"token": token(PRODUCER)}), 403)
