"""Every push request is signed as Standard Webhooks has it: a receiver verifies it with the
``standardwebhooks`` package and the subscription's secret, and a wrong secret fails. Redirects
are not followed."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from app.push.subscription import generate_secret
from tests.api.server import BrokerProcess
from tests.push.receiver import Receiver, produce, push_broker, state, subscribe, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, httpx.Client]]:
    with push_broker(tmp_path_factory.mktemp("push-signing") / "store") as running:
        yield running


def test_requests_verify_with_the_generated_secret_and_fail_with_another(
    broker: tuple[BrokerProcess, httpx.Client],
) -> None:
    process, http = broker
    assert http.post("/v1/topics", json={"name": "signed", "queues": 1}).status_code == 201
    with Receiver() as receiver:
        secret = subscribe(http, "verifier", topic="signed", url=receiver.url, batch=1)["secret"]
        produce(
            http,
            "signed",
            {"body": "hello"},
            {"body": '{"json": true}', "properties": {"CONTENT_TYPE": "application/json"}},
        )
        got = receiver.wait_for(lambda received: len(received) >= 2)
        for request in got:
            Webhook(secret).verify(request.body, request.headers, json_parse=False)
            with pytest.raises(WebhookVerificationError):
                Webhook(generate_secret()).verify(request.body, request.headers, json_parse=False)
            tampered = request.body + b"!"
            with pytest.raises(WebhookVerificationError):
                Webhook(secret).verify(tampered, request.headers, json_parse=False)
        # Shown once: neither GET nor a change shows it, and a change without one keeps it.
        assert "secret" not in http.get("/v1/groups/verifier/push").json()
        changed = subscribe(http, "verifier", topic="signed", url=receiver.url, batch=2)
        assert "secret" not in changed
        produce(http, "signed", {"body": "after the change"})
        (late,) = receiver.wait_for(lambda received: len(received) >= 3)[2:]
        Webhook(secret).verify(late.body, late.headers, json_parse=False)
    assert secret not in process.log()


def test_a_secret_set_by_the_caller_signs_the_requests(broker: tuple[BrokerProcess, httpx.Client]) -> None:
    _, http = broker
    assert http.post("/v1/topics", json={"name": "own-secret", "queues": 1}).status_code == 201
    secret = generate_secret()
    with Receiver() as receiver:
        created = subscribe(http, "mine", topic="own-secret", url=receiver.url, secret=secret)
        assert "secret" not in created  # the caller knows it
        produce(http, "own-secret", {"body": "x"})
        (request,) = receiver.wait_for(lambda received: len(received) >= 1)
        Webhook(secret).verify(request.body, request.headers, json_parse=False)


def test_a_redirect_is_a_failure_and_is_not_followed(broker: tuple[BrokerProcess, httpx.Client]) -> None:
    _, http = broker
    assert http.post("/v1/topics", json={"name": "moved", "queues": 1}).status_code == 201
    with Receiver() as elsewhere, Receiver(respond=lambda _: (307, {"location": elsewhere.url})) as receiver:
        subscribe(http, "redirected", topic="moved", url=receiver.url, max_reconsume_times=0)
        produce(http, "moved", {"body": "x"})
        receiver.wait_for(lambda received: len(received) >= 1)
        shown = wait_until(
            lambda: (found := state(http, "redirected"))["dead_lettered"] == 1 and found, what="dlq"
        )
        assert shown["last_error"]["message"] == "HTTP 307"
        assert elsewhere.received == []
