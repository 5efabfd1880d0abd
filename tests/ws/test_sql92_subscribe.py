"""A WebSocket subscriber with a SQL92 filter: only matching messages are sent, the others are
read past; a bad expression closes the socket with the error and its position."""

from __future__ import annotations

import httpx

from tests.ws.wsclient import WsBroker, produce


def test_an_expression_lets_only_matching_messages_through(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    expression = "region = 'eu' AND amount > 100"
    with ws.subscribe(topic=topic, queues="0", filter_type="sql92", filter=expression, credit=10) as socket:
        for region, amount in [("us", "500"), ("eu", "150"), ("eu", "20"), ("eu", "abc"), ("eu", "1000")]:
            produce(
                client,
                topic,
                f"{region}-{amount}",
                queue_id=0,
                properties={"region": region, "amount": amount},
            )
        received = socket.messages(2)
        assert [m["body"] for m in received] == ["eu-150", "eu-1000"]
        assert socket.status()["queues"][0]["offset"] == 5  # the others were read past, not sent


def test_a_group_subscriber_filters_with_an_expression(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    with ws.subscribe(topic=topic, group="ws-sql", filter_type="sql92", filter="n >= 2", credit=10) as socket:
        for n in range(4):
            produce(client, topic, f"n{n}", properties={"n": str(n)})
        assert sorted(m["body"] for m in socket.messages(2)) == ["n2", "n3"]


def test_a_bad_expression_closes_the_socket_with_where_it_goes_wrong(ws: WsBroker, topic: str) -> None:
    with ws.connect("/v1/ws/subscribe", topic=topic, filter_type="sql92", filter="amount > > 1") as socket:
        code, reason = socket.closed()
    assert code == 4400
    assert reason.startswith("40015 SQL92 filter, line 1, column 10: unexpected '>'")
