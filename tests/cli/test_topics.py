"""``wharf topics list|create|describe|delete`` against a real broker: tables by default, JSON that
parses with --json, the broker's refusal as one line and exit status 1, a usage error as 2."""

from __future__ import annotations

import json

import httpx

from tests.cli.conftest import Wharf


def test_create_then_list_describe_and_delete(wharf: Wharf, client: httpx.Client) -> None:
    created = wharf("topics", "create", "cli-orders", "--queues", "3")
    assert created.exit_code == 0, created.stderr
    assert "cli-orders" in created.stdout and "3" in created.stdout
    assert client.get("/v1/topics/cli-orders").json()["read_queues"] == 3

    listed = wharf("topics", "list")
    assert listed.exit_code == 0
    (row,) = [line.split() for line in listed.stdout.splitlines() if "cli-orders" in line]
    assert row == ["cli-orders", "3", "3", "rw-", "no"]
    as_json = json.loads(wharf("topics", "list", "--json").stdout)
    assert {"name": "cli-orders", "read_queues": 3, "write_queues": 3, "perm": 6, "order": False} in as_json

    client.post("/v1/topics/cli-orders/messages", json={"body": "one", "queue_id": 1})
    described = json.loads(wharf("topics", "describe", "cli-orders", "--json").stdout)
    assert described["name"] == "cli-orders"
    assert [(queue["queue_id"], queue["max_offset"]) for queue in described["queues"]] == [
        (0, 0),
        (1, 1),
        (2, 0),
    ]
    table = wharf("topics", "describe", "cli-orders").stdout
    assert [line.split()[:4] for line in table.splitlines() if line.split()[:1] == ["1"]] == [
        ["1", "0", "1", "1"]
    ]

    deleted = wharf("topics", "delete", "cli-orders")
    assert (deleted.exit_code, deleted.stdout) == (0, "deleted topic cli-orders\n")
    assert client.get("/v1/topics/cli-orders").status_code == 404


def test_create_answers_json(wharf: Wharf) -> None:
    created = json.loads(wharf("topics", "create", "cli-json", "--json").stdout)
    assert created == {"name": "cli-json", "read_queues": 4, "write_queues": 4, "perm": 6, "order": False}


def test_a_missing_topic_is_the_envelope_message_and_exit_status_1(wharf: Wharf) -> None:
    answer = wharf("topics", "describe", "never-created")
    assert answer.exit_code == 1
    assert answer.stdout == ""
    assert answer.stderr == "wharf: topic 'never-created' not found (40402)\n"


def test_a_conflicting_create_is_refused(wharf: Wharf) -> None:
    assert wharf("topics", "create", "cli-twice", "--queues", "2").exit_code == 0
    again = wharf("topics", "create", "cli-twice", "--queues", "5")
    assert again.exit_code == 1
    assert again.stderr.startswith("wharf: ") and again.stderr.endswith("(40901)\n")
    assert len(again.stderr.splitlines()) == 1


def test_usage_errors_exit_2(wharf: Wharf) -> None:
    assert wharf("topics", "create").exit_code == 2  # no name
    assert wharf("topics", "create", "cli-zero", "--queues", "0").exit_code == 2
    assert wharf("topics", "list", "--user", "no-colon").exit_code == 2
    assert wharf("topics", "remove", "x").exit_code == 2
