"""``wharf push``: create, list, describe, pause, resume and delete a push subscription, and
``wharf push test-receiver`` printing what the broker pushes with its signature checked."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.api.server import BrokerProcess, free_port
from tests.cli.conftest import run_wharf, wharf_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("push-cli") / "store", push_allow_private="true").start()
    yield process
    process.stop()


def test_the_push_commands_manage_a_subscription_and_the_test_receiver_shows_its_deliveries(
    broker: BrokerProcess,
) -> None:
    assert httpx.post(f"{broker.url}/v1/topics", json={"name": "orders", "queues": 1}).status_code == 201
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/hook"
    created = run_wharf(
        broker.url, "push", "create", "billing", "--topic", "orders", "--endpoint", endpoint, "--tags", "paid"
    )
    assert created.exit_code == 0, created.stderr
    subscription = json.loads(created.stdout)
    secret = subscription["secret"]
    assert subscription["filter"] == {"tags": "paid"}

    receiver = wharf_process("push", "test-receiver", "--port", str(port), "--secret", secret, url=broker.url)
    try:
        assert receiver.stdout is not None
        assert receiver.stdout.readline().startswith(f"listening on http://127.0.0.1:{port}/")
        sent = httpx.post(f"{broker.url}/v1/topics/orders/messages", json={"body": "order 1", "tags": "paid"})
        assert sent.status_code in (200, 201)
        shown = json.loads(receiver.stdout.readline())
        assert shown["body"] == "order 1"
        assert shown["signature"] == "valid"
        assert shown["wharf-topic"] == "orders"
        assert shown["wharf-tags"] == "paid"
    finally:
        receiver.terminate()
        receiver.wait(10)

    listed = run_wharf(broker.url, "push", "list", "--json")
    assert [row["group"] for row in json.loads(listed.stdout)] == ["billing"]
    assert "billing" in run_wharf(broker.url, "push", "list", env={"COLUMNS": "200"}).stdout
    paused = run_wharf(broker.url, "push", "pause", "billing")
    assert paused.exit_code == 0, paused.stderr
    assert json.loads(run_wharf(broker.url, "push", "describe", "billing").stdout)["paused"] is True
    resumed = json.loads(run_wharf(broker.url, "push", "resume", "billing").stdout)
    assert resumed["paused"] is False
    assert resumed["filter"] == {"tags": "paid"}  # the rest as it was
    assert "secret" not in resumed  # kept, not shown again
    assert run_wharf(broker.url, "push", "delete", "billing").exit_code == 0
    missing = run_wharf(broker.url, "push", "describe", "billing")
    assert missing.exit_code == 1
    assert missing.stderr.endswith("(40405)\n")


def test_the_test_receiver_flags_a_bad_signature(broker: BrokerProcess) -> None:
    from app.cli.push import verify
    from app.push.signing import signed_headers
    from app.push.subscription import generate_secret

    secret = generate_secret()
    from app.push.signing import secret_key

    headers = signed_headers(secret_key(secret), "msg_1", 1_700_000_000, b"body")
    assert verify(secret, headers, b"body")
    assert not verify(secret, headers, b"other body")
    assert not verify(generate_secret(), headers, b"body")
