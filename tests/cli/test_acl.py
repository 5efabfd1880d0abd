"""``--user AK:SK`` (or WHARF_USER) against a broker that enforces an ACL: the credentials reach the
broker, and its refusal is one line with exit status 1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.acl_setup import ADMIN, CONSUMER, PRODUCER, acl_broker
from tests.api.server import BrokerProcess
from tests.cli.conftest import run_wharf


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = acl_broker(tmp_path_factory.mktemp("acl-cli")).start()
    yield process
    process.stop()


def user(account: tuple[str, str]) -> str:
    return f"{account[0]}:{account[1]}"


def test_each_account_does_what_its_permissions_allow(broker: BrokerProcess) -> None:
    refused = run_wharf(broker.url, "topics", "create", "orders", "--queues", "1")
    assert refused.exit_code == 1
    assert refused.stderr.startswith("wharf: ") and refused.stderr.endswith("(40101)\n")

    assert (
        run_wharf(broker.url, "topics", "create", "orders", "--queues", "1", "--user", user(ADMIN)).exit_code
        == 0
    )
    sent = run_wharf(broker.url, "produce", "orders", "--user", user(PRODUCER), stdin="hello\n")
    assert (sent.exit_code, sent.stdout) == (0, "1 message acknowledged\n")
    consumed = run_wharf(
        broker.url,
        "consume",
        "orders",
        "-g",
        "billing",
        "--from",
        "first",
        "--commit",
        env={"WHARF_USER": user(CONSUMER)},
    )
    assert (consumed.exit_code, consumed.stdout) == (0, "hello\n"), consumed.stderr

    # The producer may not pull, nor ask an operator's question: 403, one line each.
    pull = run_wharf(broker.url, "consume", "orders", "-g", "billing", "--user", user(PRODUCER))
    disk = run_wharf(broker.url, "admin", "disk", "--user", user(PRODUCER))
    for answer in (pull, disk):
        assert answer.exit_code == 1
        (line,) = answer.stderr.splitlines()
        assert line.startswith("wharf: ") and line.endswith("(40301)")
    assert run_wharf(broker.url, "admin", "disk", "--user", user(ADMIN)).exit_code == 0
