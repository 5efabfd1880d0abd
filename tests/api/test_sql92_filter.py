"""SQL92 filters end to end over HTTP: a queue pull, a group member's subscription (heartbeat and
group pull), and pop, which also takes a tag filter now. A bad expression is a 400 that says where
it goes wrong."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests.ws.wsclient import held_pulls, wait_for

EU_OVER_100 = "region = 'eu' AND amount > 100"

# (body, properties): only the first and the last match EU_OVER_100.
MESSAGES: list[tuple[str, dict[str, str]]] = [
    ("eu-150", {"region": "eu", "amount": "150"}),
    ("us-150", {"region": "us", "amount": "150"}),
    ("eu-50", {"region": "eu", "amount": "50"}),
    ("no-region", {"amount": "500"}),
    ("eu-lots", {"region": "eu", "amount": "lots"}),
    ("eu-99.5", {"region": "eu", "amount": "99.5"}),
    ("eu-1000", {"region": "eu", "amount": "1000"}),  # as text '1000' < '150'; as a number it is more
]
MATCHING = ["eu-150", "eu-1000"]


def produce(client: httpx.Client, topic: str, queue_id: int | None = 0) -> None:
    where = {"queue_id": queue_id} if queue_id is not None else {}
    messages = [{"body": body, "properties": properties, **where} for body, properties in MESSAGES]
    answer = client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert answer.status_code == 200, answer.text


def pull(client: httpx.Client, topic: str, **params: Any) -> httpx.Response:
    return client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0, **params})


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return [message["body"] for message in messages]


def assert_bad_filter(answer: httpx.Response, line: int, column: int) -> None:
    assert answer.status_code == 400, answer.text
    error = answer.json()
    assert error["error_code"] == 40015
    assert (error["line"], error["column"]) == (line, column)
    assert f"line {line}, column {column}" in error["message"]


def test_a_pull_hands_out_only_what_the_expression_matches(client: httpx.Client, topic: str) -> None:
    produce(client, topic)
    answer = pull(client, topic, filter_type="sql92", filter=EU_OVER_100)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert bodies(body["messages"]) == MATCHING
    assert body["next_offset"] == len(MESSAGES)
    # Without a filter, and with the tag filter that stays the default, everything comes.
    assert bodies(pull(client, topic).json()["messages"]) == [body for body, _ in MESSAGES]
    assert len(pull(client, topic, tags="*").json()["messages"]) == len(MESSAGES)


def test_a_pull_filters_on_tags_and_properties_together(client: httpx.Client, topic: str) -> None:
    messages = [
        {"body": "a1", "tags": "a", "properties": {"n": "1"}, "queue_id": 0},
        {"body": "b1", "tags": "b", "properties": {"n": "1"}, "queue_id": 0},
        {"body": "a2", "tags": "a", "properties": {"n": "2"}, "queue_id": 0},
        {"body": "none", "properties": {"n": "1"}, "queue_id": 0},
    ]
    assert client.post(f"/v1/topics/{topic}/messages", json={"messages": messages}).status_code == 200
    expression = "TAGS IN ('a', 'b') AND n = 1"
    assert bodies(pull(client, topic, filter_type="sql92", filter=expression).json()["messages"]) == [
        "a1",
        "b1",
    ]
    assert bodies(pull(client, topic, filter_type="sql92", filter="TAGS IS NULL").json()["messages"]) == [
        "none"
    ]


def test_a_held_pull_passes_over_arrivals_that_do_not_match(client: httpx.Client, topic: str) -> None:
    params = {"offset": 0, "filter_type": "sql92", "filter": EU_OVER_100, "max_wait_ms": 20_000}
    with (
        httpx.Client(base_url=str(client.base_url), timeout=30) as other,
        ThreadPoolExecutor(1) as pool,
    ):
        held = pool.submit(other.get, f"/v1/topics/{topic}/queues/0/messages", params=params)
        assert wait_for(lambda: held_pulls(client) > 0)
        for body, properties in [MESSAGES[1], MESSAGES[0]]:  # one that does not match, then one that does
            message = {"body": body, "properties": properties, "queue_id": 0}
            assert client.post(f"/v1/topics/{topic}/messages", json=message).status_code == 200
        answer = held.result(timeout=30).json()
    assert bodies(answer["messages"]) == ["eu-150"]
    assert answer["next_offset"] == 2


def test_a_bad_expression_is_a_400_with_its_position(client: httpx.Client, topic: str) -> None:
    assert_bad_filter(pull(client, topic, filter_type="sql92", filter="region = 'eu' AND amount >"), 1, 27)
    assert_bad_filter(pull(client, topic, filter_type="sql92", filter="amount > 'ten'"), 1, 10)
    assert_bad_filter(pull(client, topic, filter_type="sql92", filter="a = 1\nOR b ~ 2"), 2, 6)
    missing = pull(client, topic, filter_type="sql92")
    assert missing.status_code == 400 and missing.json()["error_code"] == 40012
    unknown = pull(client, topic, filter_type="xpath", filter="a")
    assert unknown.status_code == 422
    # A tag expression keeps its own code.
    assert pull(client, topic, tags="a ||").json()["error_code"] == 40004


def heartbeat(client: httpx.Client, group: str, topic: str, subscription: object) -> httpx.Response:
    return client.post(
        f"/v1/groups/{group}/heartbeat",
        json={"client_id": "worker-1", "subscriptions": {topic: subscription}, "consume_from": "first"},
    )


def test_a_group_member_subscribes_with_an_expression(client: httpx.Client, topic: str) -> None:
    produce(client, topic, queue_id=None)  # spread over the topic's queues
    produce(client, topic, queue_id=None)
    subscription = {"type": "sql92", "expression": EU_OVER_100}
    joined = heartbeat(client, "sql-group", topic, subscription)
    assert joined.status_code == 200, joined.text
    got: list[str] = []
    for _ in range(20):
        answer = client.get(
            "/v1/groups/sql-group/messages", params={"client_id": "worker-1", "max_messages": 3}
        ).json()
        if not answer["messages"] and got:
            break
        got += bodies(answer["messages"])
        offsets = [
            {"topic": o["topic"], "queue_id": o["queue_id"], "offset": o["next_offset"]}
            for o in answer["offsets"]
        ]
        commit = client.put(
            "/v1/groups/sql-group/offsets",
            json={"client_id": "worker-1", "generation": answer["generation"], "offsets": offsets},
        )
        assert commit.status_code in (200, 204), commit.text
    assert sorted(got) == sorted(MATCHING * 2)
    member = client.get("/v1/groups/sql-group").json()["members"][0]
    assert member["subscriptions"][topic] == subscription


def test_a_heartbeat_with_a_bad_expression_is_refused(client: httpx.Client, topic: str) -> None:
    assert_bad_filter(heartbeat(client, "bad-sql", topic, {"type": "sql92", "expression": "a = = 1"}), 1, 5)
    assert heartbeat(client, "bad-sql", topic, {"type": "xpath", "expression": "a"}).status_code == 422
    # A tag subscription stays a plain string.
    assert heartbeat(client, "tag-sql", topic, "TagA || TagB").status_code == 200
    assert client.get("/v1/groups/tag-sql").json()["members"][0]["subscriptions"][topic] == "TagA || TagB"


def pop(client: httpx.Client, group: str, topic: str, **fields: Any) -> httpx.Response:
    body = {"max_messages": 32, "invisible_ms": 60_000, "consume_from": "first", **fields}
    return client.post(f"/v1/groups/{group}/topics/{topic}/pop", json=body)


def test_pop_takes_an_expression(client: httpx.Client, topic: str) -> None:
    produce(client, topic)
    answer = pop(client, "sql-pop", topic, filter_type="sql92", filter=EU_OVER_100)
    assert answer.status_code == 200, answer.text
    assert bodies(answer.json()["messages"]) == MATCHING
    # What the filter passed over is done for the group: nothing else comes to it.
    assert pop(client, "sql-pop", topic, filter_type="sql92", filter=EU_OVER_100).json()["messages"] == []
    assert_bad_filter(pop(client, "sql-pop", topic, filter_type="sql92", filter="amount >> 1"), 1, 9)


def test_pop_takes_a_tag_filter(client: httpx.Client, topic: str) -> None:
    messages = [
        {"body": f"{tags}-{i}", "tags": tags, "queue_id": 0} for i in range(3) for tags in ("a", "b", "c")
    ]
    assert client.post(f"/v1/topics/{topic}/messages", json={"messages": messages}).status_code == 200
    answer = pop(client, "tag-pop", topic, tags="a || c")
    assert answer.status_code == 200, answer.text
    assert sorted(bodies(answer.json()["messages"])) == ["a-0", "a-1", "a-2", "c-0", "c-1", "c-2"]
    assert pop(client, "tag-pop", topic, tags="a ||").json()["error_code"] == 40004
    assert pop(client, "tag-pop", topic, filter_type="sql92", tags="a").json()["error_code"] == 40012
