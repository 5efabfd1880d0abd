"""What a push subscription may not be: an endpoint on a loopback, link-local or private address
(without WHARF_PUSH_ALLOW_PRIVATE), another scheme than http and https, a bad field; each refused
with the error envelope and a 4xx. With the ACL on, SUB on the group and on the topic is needed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.acl_setup import ADMIN, CONSUMER, acl_broker, client_for
from tests.api.server import BrokerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    process = BrokerProcess(tmp_path_factory.mktemp("push-safety") / "store").start()
    with httpx.Client(base_url=process.url, timeout=30) as client:
        assert client.post("/v1/topics", json={"name": "orders", "queues": 1}).status_code == 201
        yield client
    process.stop()


def refused(answer: httpx.Response, status: int, code: int) -> str:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["error_code"] == code, body
    message: str = body["message"]
    return message


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "https://10.1.2.3/hook",
        "http://192.168.0.7/hook",
        "http://172.16.0.1/hook",
        "http://100.64.0.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[fd00::1]/hook",
        "http://[fe80::1]/hook",
        "http://0.0.0.0/hook",
        "http://224.0.0.1/hook",
    ],
)
def test_private_addresses_are_refused_without_the_setting(http: httpx.Client, url: str) -> None:
    message = refused(http.put("/v1/groups/g/push", json={"topic": "orders", "url": url}), 400, 40012)
    assert "WHARF_PUSH_ALLOW_PRIVATE" in message or "does not resolve" in message
    assert http.get("/v1/groups/g/push").status_code == 404


@pytest.mark.parametrize(
    ("fields", "status", "code"),
    [
        ({"url": "ftp://example.com/hook"}, 400, 40012),
        ({"url": "file:///etc/passwd"}, 400, 40012),
        ({"url": "example.com/hook"}, 400, 40012),
        ({"url": "http://[::1/hook"}, 400, 40012),
        ({"url": "http:///hook"}, 400, 40012),
        ({"secret": "not-a-secret"}, 400, 40012),
        ({"secret": "whsec_c2hvcnQ="}, 400, 40012),
        ({"filter": {"sql92": "a >"}}, 400, 40015),
        ({"filter": {"tags": "a ||"}}, 400, 40004),
        ({"filter": {"tags": "a", "sql92": "b = 1"}}, 400, 40012),
        ({"max_in_flight": 0}, 422, 42201),
        ({"batch": 1001}, 422, 42201),
        ({"timeout_ms": "soon"}, 422, 42201),
        ({"surprise": True}, 422, 42201),
        ({"topic": "nowhere"}, 404, 40402),
    ],
)
def test_bad_subscriptions_are_refused_with_the_envelope(
    http: httpx.Client, fields: dict[str, object], status: int, code: int
) -> None:
    body = {"topic": "orders", "url": "ftp://example.com/"} | fields
    if "url" not in fields:
        body["url"] = "http://127.0.0.1/hook"  # refused too, but after the field is looked at
    answer = http.put("/v1/groups/g/push", json=body)
    refused(answer, status, code)


def test_a_group_with_members_is_no_push_subscription(http: httpx.Client) -> None:
    joined = http.post(
        "/v1/groups/pullers/heartbeat", json={"client_id": "c1", "subscriptions": {"orders": "*"}}
    )
    assert joined.status_code == 200, joined.text
    message = refused(
        http.put("/v1/groups/pullers/push", json={"topic": "orders", "url": "https://example.com/"}),
        409,
        40905,
    )
    assert "members" in message


def test_unknown_subscriptions_are_404(http: httpx.Client) -> None:
    refused(http.get("/v1/groups/none/push"), 404, 40405)
    refused(http.delete("/v1/groups/none/push"), 404, 40405)


def test_the_acl_asks_sub_on_the_group_and_the_topic(tmp_path: Path) -> None:
    process = acl_broker(tmp_path, push_allow_private="true").start()
    try:
        with client_for(process, ADMIN) as admin, client_for(process, CONSUMER) as consumer:
            for name in ("orders", "audit"):
                assert admin.post("/v1/topics", json={"name": name, "queues": 1}).status_code == 201
            hook = {"topic": "orders", "url": "http://127.0.0.1:9/hook"}
            assert consumer.put("/v1/groups/billing/push", json=hook).status_code == 201
            assert consumer.get("/v1/groups/billing/push").status_code == 200
            # SUB on the group but not on the topic; SUB on the topic but not on the group.
            assert consumer.put("/v1/groups/billing/push", json=hook | {"topic": "audit"}).status_code == 403
            assert consumer.put("/v1/groups/shipping/push", json=hook).status_code == 403
            assert consumer.get("/v1/push").status_code == 403
            assert admin.get("/v1/push").json()["subscriptions"][0]["group"] == "billing"
            assert consumer.delete("/v1/groups/billing/push").status_code == 204
    finally:
        process.stop()
