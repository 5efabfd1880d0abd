"""``wharf groups list|lag``, ``wharf message ID`` and ``wharf message --key K --topic T``."""

from __future__ import annotations

import json

import httpx

from tests.cli.conftest import Wharf


def test_groups_list_and_lag(wharf: Wharf, client: httpx.Client, topic: str) -> None:
    messages = [{"body": f"m{n}", "queue_id": 0} for n in range(6)] + [{"body": "q1", "queue_id": 1}]
    client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert (
        wharf("consume", topic, "-g", "cli-lag", "--from", "first", "--max", "4", "--commit").exit_code == 0
    )

    groups = json.loads(wharf("groups", "list", "--json").stdout)
    # The member's heartbeat made the group's retry topic, whose queue it reads too.
    assert {"group": "cli-lag", "topics": ["%RETRY%cli-lag", topic]} in groups
    lines = wharf("groups", "list").stdout.splitlines()
    assert any(
        line.split()[:1] == ["cli-lag"] and topic in line and "%RETRY%cli-lag" in line for line in lines
    )

    rows = json.loads(wharf("groups", "lag", "cli-lag", "--json").stdout)
    by_queue = {row["queue_id"]: (row["committed_offset"], row["max_offset"], row["lag"]) for row in rows}
    # Four printed and committed by the member; the lag is the rest. Joining fixed the start of
    # the empty queues too.
    assert sum(lag for _, _, lag in by_queue.values()) == 3
    assert by_queue[2] == (0, 0, 0) and by_queue[3] == (0, 0, 0)
    table = wharf("groups", "lag", "cli-lag").stdout
    assert ["total", "3"] in [line.split() for line in table.splitlines()]

    missing = wharf("groups", "lag", "cli-nobody")
    assert (missing.exit_code, missing.stderr) == (
        1,
        "wharf: group 'cli-nobody' has no committed offsets (40405)\n",
    )


def test_message_by_id_and_by_key(wharf: Wharf, client: httpx.Client, topic: str) -> None:
    produced = client.post(
        f"/v1/topics/{topic}/messages",
        json={
            "messages": [
                {"body": "found me", "keys": ["order-7"], "tags": "T"},
                {"body": "other", "keys": ["x"]},
            ]
        },
    ).json()["results"]
    msg_id = produced[0]["msg_id"]

    by_id = wharf("message", msg_id, "--json")
    assert json.loads(by_id.stdout) == client.get(f"/v1/messages/{msg_id}").json()
    shown = wharf("message", msg_id).stdout
    assert ["body", "found", "me"] in [line.split() for line in shown.splitlines()]

    by_key = json.loads(wharf("message", "--key", "order-7", "--topic", topic, "--json").stdout)
    assert [(found["msg_id"], found["body"]) for found in by_key] == [(msg_id, "found me")]
    table = wharf("message", "--key", "order-7", "--topic", topic).stdout
    assert "found me" in table and "order-7" in table


def test_message_errors(wharf: Wharf) -> None:
    assert wharf("message").exit_code == 2
    assert wharf("message", "00" * 16, "--key", "k").exit_code == 2
    assert wharf("message", "--key", "k").exit_code == 2  # no --topic
    bad = wharf("message", "not-an-id")
    assert bad.exit_code == 1 and bad.stderr.endswith("(40009)\n")
