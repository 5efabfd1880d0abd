"""Skipping dead letters (POST /v1/groups/{group}/dlq/skip): the group's mark on %DLQ%<group> passes
over them, up to one offset or all, never back, and a resend of all starts after them."""

from __future__ import annotations

import httpx
import pytest


def dead_letters(client: httpx.Client, group: str, topic: str, count: int) -> None:
    """``count`` messages of ``topic`` sent straight to ``group``'s dead letters (no reconsume)."""
    assert client.post("/v1/topics", json={"name": topic, "queues": 1}).status_code == 201
    assert client.put(f"/v1/groups/{group}/config", json={"max_reconsume_times": 0}).status_code == 200
    messages = [{"body": f"{topic}-{n}"} for n in range(count)]
    assert client.post(f"/v1/topics/{topic}/messages", json={"messages": messages}).status_code == 200
    for offset in range(count):
        place = {"topic": topic, "queue_id": 0, "offset": offset}
        assert client.post(f"/v1/groups/{group}/retry", json=place).json()["status"] == "DEAD_LETTER"


def skip(client: httpx.Client, group: str, **body: object) -> httpx.Response:
    return client.post(f"/v1/groups/{group}/dlq/skip", json=body)


def mark(client: httpx.Client, group: str) -> int:
    return int(client.get(f"/v1/groups/{group}/dlq").json()["resent_until"])


def test_skipping_up_to_one_offset_then_all_and_a_resend_starts_after_them(client: httpx.Client) -> None:
    dead_letters(client, "skippers", "skip-source", 5)
    answer = skip(client, "skippers", through_offset=1)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"group": "skippers", "skipped": 2, "resent_until": 2}
    # Never back: an offset below the mark passes nothing.
    assert skip(client, "skippers", through_offset=0).json() == {
        "group": "skippers",
        "skipped": 0,
        "resent_until": 2,
    }
    # The letters stay listed; a resend of all sends only those past the mark.
    assert len(client.get("/v1/groups/skippers/dlq").json()["dead_letters"]) == 5
    resent = client.post("/v1/groups/skippers/dlq/resend", json={"all": True}).json()["resent"]
    assert [letter["topic"] for letter in resent] == ["skip-source"] * 3
    back = client.get("/v1/topics/skip-source/queues/0/messages", params={"offset": 5}).json()["messages"]
    assert [message["body"] for message in back] == ["skip-source-2", "skip-source-3", "skip-source-4"]

    dead_letters(client, "skippers-all", "skip-all-source", 3)
    assert skip(client, "skippers-all", all=True).json() == {
        "group": "skippers-all",
        "skipped": 3,
        "resent_until": 3,
    }
    assert client.post("/v1/groups/skippers-all/dlq/resend", json={"all": True}).json()["resent"] == []
    # Past the end: up to the last letter there is, no further.
    assert skip(client, "skippers-all", through_offset=99).json()["resent_until"] == 3
    assert mark(client, "skippers-all") == 3


def test_a_group_without_dead_letters_skips_nothing(client: httpx.Client) -> None:
    assert skip(client, "nobody-died", all=True).json() == {
        "group": "nobody-died",
        "skipped": 0,
        "resent_until": 0,
    }


@pytest.mark.parametrize(
    ("body", "status"),
    [({}, 400), ({"all": True, "through_offset": 1}, 400), ({"through_offset": -1}, 422), ({"to": 3}, 422)],
)
def test_a_skip_names_all_or_one_offset(client: httpx.Client, body: dict[str, object], status: int) -> None:
    answer = skip(client, "skip-bad", **body)
    assert answer.status_code == status, answer.text
