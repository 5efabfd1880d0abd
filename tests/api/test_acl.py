"""Authentication and ACL over HTTP, against a real broker that enforces tests/api/acl_setup.py's file:
each rule kind allowed and refused, and a refused request changes nothing."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.routing import iter_route_contexts
from starlette.routing import Mount, WebSocketRoute

from app.acl.classify import match_rule
from app.api.app import create_app
from tests.api.acl_setup import (
    ADMIN,
    CONSUMER,
    PRODUCER,
    READ_WRITE,
    SECRETS,
    TRUSTED,
    acl_broker,
    assert_refused,
    client_for,
)
from tests.api.server import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # With the access log on, every request has a line: the secret test reads them too.
    process = acl_broker(tmp_path_factory.mktemp("acl"), log_level="info", access_log="true").start()
    with client_for(process, ADMIN) as admin:
        for name in ("orders", "audit"):
            assert admin.post("/v1/topics", json={"name": name, "queues": 2}).status_code == 201
            produce(admin, name, "first")
    yield process
    process.stop()


@pytest.fixture
def as_admin(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with client_for(broker, ADMIN) as client:
        yield client


def call(
    broker: BrokerProcess, account: tuple[str, str] | None, method: str, path: str, **kw: Any
) -> httpx.Response:
    with client_for(broker, account) as client:
        return client.request(method, path, **kw)


def produce(client: httpx.Client, topic: str, body: str, **fields: Any) -> httpx.Response:
    return client.post(f"/v1/topics/{topic}/messages", json={"body": body, "queue_id": 0, **fields})


def max_offset(admin: httpx.Client, topic: str, queue_id: int = 0) -> int:
    return int(admin.get(f"/v1/topics/{topic}/queues").json()["queues"][queue_id]["max_offset"])


# -- the table covers the app ---------------------------------------------------------------------


def test_every_route_has_a_rule() -> None:
    """A new route without a rule fails here, so it cannot slip past the ACL."""
    missing = []
    for context in iter_route_contexts(create_app().routes):
        route = context.original_route
        path = context.path  # with the prefixes of the routers it was included from
        concrete = path.replace("{", "").replace("}", "")
        if isinstance(route, Mount):
            methods = {"GET"}
            concrete += "/index.html"
        elif isinstance(route, WebSocketRoute) or type(route).__name__ == "APIWebSocketRoute":
            methods = {"WEBSOCKET"}
        else:
            methods = set(getattr(route, "methods", None) or ()) - {"HEAD"}
        assert methods, f"route {path} has no method"
        missing += [f"{method} {path}" for method in methods if match_rule(method, concrete) is None]
    assert not missing, f"routes without an ACL rule: {missing}"


# -- authentication -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/openapi.json", "/docs", "/console/"])
def test_probes_docs_and_the_console_page_are_open(broker: BrokerProcess, path: str) -> None:
    assert call(broker, None, "GET", path).status_code == 200


@pytest.mark.parametrize("path", ["/v1/topics", "/v1/groups", "/v1/clusters", "/v1/stats"])
def test_listings_need_any_account(broker: BrokerProcess, path: str) -> None:
    assert_refused(call(broker, None, "GET", path), 401)
    assert call(broker, PRODUCER, "GET", path).status_code == 200


def test_missing_wrong_or_malformed_credentials_are_401(broker: BrokerProcess) -> None:
    assert_refused(call(broker, None, "GET", "/v1/topics"), 401)
    assert_refused(call(broker, (PRODUCER[0], "not-the-secret"), "GET", "/v1/topics"), 401)
    assert_refused(call(broker, ("nobody-ak", PRODUCER[1]), "GET", "/v1/topics"), 401)
    for header in ("Bearer abc", "Basic %%%", "Basic " + base64.b64encode(b"no-colon").decode()):
        assert_refused(call(broker, None, "GET", "/v1/topics", headers={"Authorization": header}), 401)
    # curl -u sends exactly this.
    raw = base64.b64encode(f"{PRODUCER[0]}:{PRODUCER[1]}".encode()).decode()
    assert (
        call(broker, None, "GET", "/v1/topics", headers={"Authorization": f"Basic {raw}"}).status_code == 200
    )


def test_a_refused_produce_stores_nothing(broker: BrokerProcess, as_admin: httpx.Client) -> None:
    before = max_offset(as_admin, "orders")
    assert_refused(
        call(broker, None, "POST", "/v1/topics/orders/messages", json={"body": "x", "queue_id": 0}), 401
    )
    assert_refused(
        call(broker, (PRODUCER[0], CONSUMER[1]), "POST", "/v1/topics/orders/messages", json={"body": "x"}),
        401,
    )
    assert max_offset(as_admin, "orders") == before


def test_secrets_never_reach_the_log(broker: BrokerProcess) -> None:
    for secret in SECRETS:
        call(broker, (PRODUCER[0], secret + "x"), "GET", "/v1/topics")
        call(broker, (secret, secret), "GET", "/v1/topics")  # a secret typed as the access key
    call(broker, PRODUCER, "GET", "/v1/topics")
    log = broker.log()
    assert "authentication failed" in log  # the attempts were logged...
    for secret in SECRETS:
        assert secret not in log  # ...without a secret


# -- produce: PUB on the topic; creating a topic: admin -------------------------------------------


def test_produce_needs_pub(broker: BrokerProcess, as_admin: httpx.Client) -> None:
    with client_for(broker, PRODUCER) as producer:
        assert produce(producer, "orders", "by the producer").status_code == 200
    before = max_offset(as_admin, "orders")
    with client_for(broker, CONSUMER) as consumer:  # SUB only
        body = assert_refused(produce(consumer, "orders", "refused"), 403)
    assert "PUB" in body["message"] and "orders" in body["message"]
    assert max_offset(as_admin, "orders") == before


def test_deny_wins_over_the_default(broker: BrokerProcess, as_admin: httpx.Client) -> None:
    with client_for(broker, READ_WRITE) as read_write:  # PUB|SUB by default, DENY on audit
        assert produce(read_write, "orders", "allowed by default").status_code == 200
        before = max_offset(as_admin, "audit")
        assert_refused(produce(read_write, "audit", "denied"), 403)
        assert_refused(read_write.get("/v1/topics/audit/queues/0/messages", params={"offset": 0}), 403)
        assert_refused(read_write.get("/v1/topics/audit"), 403)
    assert max_offset(as_admin, "audit") == before


def test_producing_to_a_missing_topic_creates_it_only_for_an_admin(
    broker: BrokerProcess, as_admin: httpx.Client
) -> None:
    with client_for(broker, READ_WRITE) as read_write:  # PUB on every topic, but no admin
        body = assert_refused(produce(read_write, "created-by-produce", "x"), 403)
    assert "admin" in body["message"]
    assert as_admin.get("/v1/topics/created-by-produce").status_code == 404
    assert produce(as_admin, "created-by-produce", "x").status_code == 200
    with client_for(broker, READ_WRITE) as read_write:  # it exists now: PUB is enough
        assert produce(read_write, "created-by-produce", "y").status_code == 200


# -- topic administration: admin ------------------------------------------------------------------


def test_creating_and_deleting_topics_needs_an_admin(broker: BrokerProcess, as_admin: httpx.Client) -> None:
    with client_for(broker, READ_WRITE) as read_write:
        assert_refused(read_write.post("/v1/topics", json={"name": "made-by-rw"}), 403)
        assert_refused(read_write.post("/v1/topics", json={"topics": [{"name": "made-by-rw"}]}), 403)
        assert as_admin.get("/v1/topics/made-by-rw").status_code == 404
        assert as_admin.post("/v1/topics", json={"name": "made-by-admin"}).status_code == 201
        assert_refused(read_write.delete("/v1/topics/made-by-admin"), 403)
        assert_refused(read_write.put("/v1/topics/made-by-admin", json={"perm": 4}), 403)
        assert as_admin.get("/v1/topics/made-by-admin").json()["perm"] == 6
    assert as_admin.delete("/v1/topics/made-by-admin").status_code == 204


def test_admin_routes_and_the_console_view_need_an_admin(
    broker: BrokerProcess, as_admin: httpx.Client
) -> None:
    with client_for(broker, READ_WRITE) as read_write:
        assert_refused(read_write.post("/v1/admin/clean"), 403)
        assert_refused(read_write.post("/v1/groups/billing/dlq/skip", json={"all": True}), 403)
        assert_refused(read_write.get("/console/api/overview"), 403)
    assert as_admin.post("/v1/admin/clean").status_code == 200
    assert as_admin.get("/console/api/overview").status_code == 200


# -- consuming: SUB on the topic and on the group -------------------------------------------------


def test_pull_needs_sub_on_the_topic_and_the_group(broker: BrokerProcess) -> None:
    pull = "/v1/topics/orders/queues/0/messages"
    with client_for(broker, CONSUMER) as consumer:
        assert consumer.get(pull, params={"offset": 0}).status_code == 200
        assert consumer.get(pull, params={"group": "billing", "from": "first"}).status_code == 200
        body = assert_refused(consumer.get(pull, params={"group": "shipping"}), 403)  # default DENY
        assert "group 'shipping'" in body["message"]
    with client_for(broker, PRODUCER) as producer:  # PUB only
        assert_refused(producer.get(pull, params={"offset": 0}), 403)
    with client_for(broker, READ_WRITE) as read_write:  # SUB by default, DENY on blocked
        assert read_write.get(pull, params={"group": "any-group"}).status_code == 200
        assert_refused(read_write.get(pull, params={"group": "blocked"}), 403)


def test_commit_needs_sub_and_a_refused_one_commits_nothing(
    broker: BrokerProcess, as_admin: httpx.Client
) -> None:
    def commit(account: tuple[str, str], group: str, *topics: str) -> httpx.Response:
        offsets = [{"topic": topic, "queue_id": 0, "offset": 1} for topic in topics]
        return call(broker, account, "PUT", f"/v1/groups/{group}/offsets", json={"offsets": offsets})

    assert commit(CONSUMER, "billing", "orders").status_code == 200
    assert_refused(commit(CONSUMER, "shipping", "orders"), 403)  # the group
    assert_refused(commit(PRODUCER, "billing", "orders"), 403)  # the topic: PUB only
    assert_refused(commit(READ_WRITE, "rw-group", "orders", "audit"), 403)  # one topic of the body
    assert as_admin.get("/v1/groups/rw-group/offsets").status_code == 404  # nothing committed
    assert as_admin.get("/v1/groups/shipping/offsets").status_code == 404


def test_reading_offsets_needs_sub_on_the_group_and_its_topics(broker: BrokerProcess) -> None:
    with client_for(broker, ADMIN) as admin:  # rw-mixed has offsets on orders and audit
        offsets = [{"topic": t, "queue_id": 0, "offset": 1} for t in ("orders", "audit")]
        assert admin.put("/v1/groups/rw-mixed/offsets", json={"offsets": offsets}).status_code == 200
    with client_for(broker, READ_WRITE) as read_write:
        assert read_write.get("/v1/groups/rw-mixed/offsets", params={"topic": "orders"}).status_code == 200
        assert_refused(read_write.get("/v1/groups/rw-mixed/offsets", params={"topic": "audit"}), 403)
        assert_refused(read_write.get("/v1/groups/rw-mixed/offsets"), 403)  # every topic: audit too
    with client_for(broker, CONSUMER) as consumer:
        assert consumer.get("/v1/groups/billing/offsets").status_code == 200
        assert_refused(consumer.get("/v1/groups/rw-mixed/offsets", params={"topic": "orders"}), 403)


def test_lookups_need_sub_on_the_message_topic(broker: BrokerProcess, as_admin: httpx.Client) -> None:
    msg_id = produce(as_admin, "orders", "look me up", keys=["order-77"]).json()["results"][0]["msg_id"]
    with client_for(broker, CONSUMER) as consumer:
        assert consumer.get(f"/v1/messages/{msg_id}").json()["body"] == "look me up"
        assert consumer.get("/v1/topics/orders/messages", params={"key": "order-77"}).status_code == 200
    with client_for(broker, PRODUCER) as producer:
        assert_refused(producer.get(f"/v1/messages/{msg_id}"), 403)
        assert_refused(producer.get("/v1/topics/orders/messages", params={"key": "order-77"}), 403)
        assert producer.get(f"/v1/messages/{'0' * 32}").status_code == 404  # not here: nothing to guard


def test_topic_metadata_needs_pub_or_sub(broker: BrokerProcess) -> None:
    for account in (PRODUCER, CONSUMER):
        with client_for(broker, account) as client:
            for path in ("", "/queues", "/route", "/queues/0/offset?timestamp=0"):
                assert client.get(f"/v1/topics/orders{path}").status_code == 200, (account, path)
    with client_for(broker, PRODUCER) as producer:  # nothing on audit
        for path in ("", "/queues", "/route", "/queues/0/offset?timestamp=0"):
            assert_refused(producer.get(f"/v1/topics/audit{path}"), 403)


# -- trusted addresses ----------------------------------------------------------------------------


def test_an_accounts_white_address_is_trusted_without_secret_or_permissions(
    broker: BrokerProcess, as_admin: httpx.Client
) -> None:
    # The test connects from 127.0.0.1, the account's whiteRemoteAddress: as RocketMQ, no secret
    # is checked and no permission (the account has none).
    with client_for(broker, (TRUSTED[0], "anything")) as trusted:
        assert produce(trusted, "audit", "from a trusted address").status_code == 200
    assert_refused(call(broker, None, "GET", "/v1/topics"), 401)  # the access key is still needed
