"""``GET /v1/topics/{topic}/events``: a topic followed as Server-Sent Events, read with curl and
httpx-sse - queue order, exact resumption with Last-Event-ID, filters, the ``from`` forms, group
commits, heartbeats, bad input, a client that stops reading, and a graceful shutdown."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from app.api.event_cursor import encode_cursor
from tests.api.server import BrokerProcess
from tests.api.sse import events, message, new_topic, parse_lines, positions, produce, stream
from tests.ws.wsclient import wait_for

MAX_QUEUED_BYTES = 64 * 1024
SEND_TIMEOUT_S = 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("events") / "store",
        commitlog_file_size=64 * 1024 * 1024,
        hold_check_interval_ms=60_000,
        sse_heartbeat_s=0.2,
        sse_max_queued_bytes=MAX_QUEUED_BYTES,
        sse_send_timeout_s=SEND_TIMEOUT_S,
    ).start()
    yield process
    process.stop()


def pulled(client: httpx.Client, topic: str, queue_id: int) -> list[dict[str, object]]:
    response = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": 0})
    assert response.status_code == 200, response.text
    messages: list[dict[str, object]] = response.json()["messages"]
    return messages


def test_curl_follows_a_topic_in_queue_order(broker: BrokerProcess, client: httpx.Client) -> None:
    topic = new_topic(client, "curl")
    produce(client, topic, [{"body": f"m{i}", "tags": f"Tag{i % 3}", "queue_id": i % 4} for i in range(40)])
    curl = subprocess.Popen(
        ["curl", "-sN", "--max-time", "60", f"{broker.url}/v1/topics/{topic}/events?from=first"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert curl.stdout is not None
    lines: list[str] = []
    try:
        while sum(1 for line in lines if line.startswith("data:")) < 40:
            line = curl.stdout.readline()
            assert line, "curl's stream ended early"
            lines.append(line.rstrip("\n"))
    finally:
        curl.kill()
        curl.wait()
    parsed = parse_lines(lines + [""])
    assert parsed[0] == {"retry": "3000"}
    received = [event for event in parsed if "data" in event]
    messages = [orjson.loads(event["data"]) for event in received]
    for queue_id in range(4):
        mine = [m for m in messages if m["queue_id"] == queue_id]
        # In queue order, each exactly as a JSON pull shows it.
        assert mine == pulled(client, topic, queue_id)
    assert [event["event"] for event in received] == [m["tags"] for m in messages]
    assert all(event["id"] for event in received)


def test_httpx_sse_sees_each_message_once_with_its_tags_as_the_event(client: httpx.Client) -> None:
    topic = new_topic(client, "httpx-sse")
    produce(client, topic, [{"body": "tagged", "tags": "TagA"}, {"body": "plain"}])
    received = events(client, topic, 2, **{"from": "first"})
    by_body = {message(event)["body"]: event.event for event in received}
    assert by_body == {"tagged": "TagA", "plain": "message"}
    assert len({event.id for event in received}) == 2


def test_a_dropped_stream_resumes_with_last_event_id_across_1000_messages_and_20_reconnects(
    client: httpx.Client,
) -> None:
    topic = new_topic(client, "resume")
    received = []
    last_id: str | None = None
    produced = 0
    for reconnect in range(20):
        if produced < 1000:
            # Messages keep arriving while the client comes and goes.
            produce(client, topic, [{"body": f"n{produced + i}", "tags": "T"} for i in range(100)])
            produced += 100
        count = 50
        params: dict[str, str] = {"from": "first"} if last_id is None else {"last_event_id_header": last_id}
        if reconnect % 2:
            params = {"last_event_id": last_id} if last_id is not None else params  # the query form
        batch = events(client, topic, count, **params)
        # The stream had more to send than was read: what the client dropped must come again.
        received.extend(batch)
        last_id = batch[-1].id
    seen = positions(received)
    assert len(seen) == 1000
    assert len(set(seen)) == 1000, "an event came twice"
    for queue_id in range(4):
        offsets = [offset for queue, offset in seen if queue == queue_id]
        assert offsets == list(range(len(offsets))), f"queue {queue_id} lost or reordered events"
    assert sorted(message(event)["body"] for event in received) == sorted(f"n{i}" for i in range(1000))


def test_tag_and_sql92_filters_select_the_events(client: httpx.Client) -> None:
    topic = new_topic(client, "filters", queues=1)
    produce(
        client,
        topic,
        [
            {"body": "a1", "tags": "A", "properties": {"region": "eu"}},
            {"body": "b1", "tags": "B", "properties": {"region": "us"}},
            {"body": "a2", "tags": "A", "properties": {"region": "us"}},
            {"body": "c1", "tags": "C", "properties": {"region": "eu"}},
        ],
    )
    tagged = events(client, topic, 2, tags="A || C", **{"from": "first"})
    assert [message(event)["body"] for event in tagged] == ["a1", "a2"]
    sql = events(client, topic, 2, filter_type="sql92", filter="region = 'eu'", **{"from": "first"})
    assert [message(event)["body"] for event in sql] == ["a1", "c1"]
    # Resuming a filtered stream goes on after the last matching event.
    again = events(client, topic, 1, tags="A || C", last_event_id_header=tagged[-1].id)
    assert [message(event)["body"] for event in again] == ["c1"]


def test_from_first_last_a_time_and_a_group(client: httpx.Client) -> None:
    topic = new_topic(client, "from", queues=1)
    produce(client, topic, [{"body": "old0"}, {"body": "old1"}])
    earlier = int(pulled(client, topic, 0)[1]["store_timestamp"])  # type: ignore[call-overload]
    assert wait_for(lambda: time.time() * 1000 > earlier + 1)  # the next store time is later
    produce(client, topic, [{"body": "old2"}, {"body": "old3"}])
    stored = pulled(client, topic, 0)
    assert [message(event)["body"] for event in events(client, topic, 1, **{"from": "first"})] == ["old0"]
    from_time = events(client, topic, 2, **{"from": str(stored[2]["store_timestamp"])})
    assert [message(event)["body"] for event in from_time] == ["old2", "old3"]
    # A group's committed offset: set by a pull that commits 3.
    response = client.get(
        f"/v1/topics/{topic}/queues/0/messages", params={"group": "g-from", "commit_offset": 3, "offset": 3}
    )
    assert response.status_code == 200, response.text
    assert [message(e)["body"] for e in events(client, topic, 1, group="g-from", **{"from": "first"})] == [
        "old3"
    ]
    # from=last: only what arrives after the stream opened.
    opened = stream(client, topic, **{"from": "last"})
    assert next(opened).retry == 3000
    produce(client, topic, [{"body": "new"}])
    event = next(e for e in opened if e.data)
    opened.close()
    assert message(event)["body"] == "new"


def test_commit_true_commits_the_groups_offsets_as_events_are_written(client: httpx.Client) -> None:
    topic = new_topic(client, "commit", queues=2)
    produce(client, topic, [{"body": f"c{i}", "queue_id": i % 2} for i in range(6)])

    def committed(group: str) -> dict[int, int]:
        response = client.get(f"/v1/groups/{group}/offsets", params={"topic": topic})
        if response.status_code == 404:
            return {}
        assert response.status_code == 200, response.text
        return {e["queue_id"]: e["committed_offset"] for e in response.json()["offsets"]}

    events(client, topic, 6, group="g-peek", **{"from": "first"})
    assert set(committed("g-peek").values()) <= {None}, "a stream without commit=true committed"
    events(client, topic, 6, group="g-commit", commit="true", **{"from": "first"})
    assert wait_for(lambda: committed("g-commit") == {0: 3, 1: 3})
    # The next stream of the group starts after what was committed.
    produce(client, topic, [{"body": "next", "queue_id": 1}])
    assert [message(e)["body"] for e in events(client, topic, 1, group="g-commit", commit="true")] == ["next"]


def test_an_id_past_a_queues_end_resumes_at_its_end(client: httpx.Client) -> None:
    """An id names offsets of the log it was read from: past a queue's end once the broker cut its
    log to follow a new master that had not stored as much. The stream starts at the end: the next
    message stored there is the first event, nothing is skipped."""
    topic = new_topic(client, "past-end", queues=1)
    produce(client, topic, [{"body": "kept0"}, {"body": "kept1"}])
    opened = stream(client, topic, last_event_id=encode_cursor({0: 9}))
    assert next(opened).retry == 3000  # the stream has started: its offsets are fixed
    produce(client, topic, [{"body": "stored-next"}])
    event = next(e for e in opened if e.data)
    opened.close()
    assert (message(event)["body"], message(event)["queue_offset"]) == ("stored-next", 2)


def test_a_committing_stream_resumes_at_the_groups_offset_where_it_is_below_the_id(
    client: httpx.Client,
) -> None:
    """A stream with commit has committed past every event it wrote: a committed offset below a
    resumed id was moved back since, as a cut of the log to follow a new master moves it
    (tests/ha/test_cut_cursors.py), and the messages from there on are read again. Without commit
    the id alone says where."""
    topic = new_topic(client, "commit-resume", queues=1)
    produce(client, topic, [{"body": f"r{i}"} for i in range(4)])
    read = events(client, topic, 4, group="g-resume", commit="true", **{"from": "first"})

    def move_back(offset: int) -> None:
        moved = {"offsets": [{"topic": topic, "queue_id": 0, "offset": offset}]}
        assert client.put("/v1/groups/g-resume/offsets", json=moved).status_code == 200

    move_back(1)
    again = events(client, topic, 1, group="g-resume", commit="true", last_event_id_header=read[-2].id)
    assert message(again[0])["body"] == "r1"
    move_back(0)
    peeked = events(client, topic, 1, group="g-resume", last_event_id_header=read[1].id)
    assert message(peeked[0])["body"] == "r2"


def test_a_ping_comment_keeps_an_idle_stream_open(client: httpx.Client) -> None:
    topic = new_topic(client, "ping", queues=1)
    with client.stream("GET", f"/v1/topics/{topic}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        assert next(lines) == "retry: 3000"
        assert next(line for line in lines if line) == ": ping"


@pytest.mark.parametrize(
    ("params", "headers", "status", "code"),
    [
        ({"from": "yesterday"}, {}, 400, 40012),
        ({"last_event_id": "not a cursor!"}, {}, 400, 40013),
        ({}, {"Last-Event-ID": "AAAA"}, 400, 40013),
        ({"queue_id": "9"}, {}, 404, 40403),
        ({"commit": "true"}, {}, 400, 40001),
        ({"tags": "A ||"}, {}, 400, 40004),
        ({"filter_type": "sql92", "filter": "region = "}, {}, 400, 40015),
        ({"filter_type": "xml"}, {}, 422, 42201),
        ({"queue_id": "-1"}, {}, 422, 42201),
    ],
)
def test_bad_input_is_refused_in_the_error_envelope(
    client: httpx.Client, params: dict[str, str], headers: dict[str, str], status: int, code: int
) -> None:
    topic = new_topic(client, "bad", queues=2)
    response = client.get(f"/v1/topics/{topic}/events", params=params, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["error_code"] == code


def test_an_unknown_topic_is_404(client: httpx.Client) -> None:
    response = client.get("/v1/topics/no-such-topic/events")
    assert response.status_code == 404
    assert response.json()["error_code"] == 40402


def test_a_client_that_stops_reading_is_closed_and_the_broker_holds_a_bounded_backlog(
    broker: BrokerProcess, client: httpx.Client
) -> None:
    topic = new_topic(client, "stops-reading", queues=1)
    body = "x" * 65536
    with socket.create_connection(("127.0.0.1", broker.port)) as sock:
        sock.sendall(f"GET /v1/topics/{topic}/events?from=first HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        # 32 MiB: more than the kernel's socket buffers take, so the broker's writes must wait.
        for _ in range(32):
            produce(client, topic, [{"body": body}] * 16)
        closed = re.compile(rf"event stream of {re.escape(repr(topic))} closed: .* (\d+) bytes wait for it")
        assert wait_for(lambda: closed.search(broker.log()) is not None, timeout_s=60)
        sock.settimeout(30)
        received = 0
        while chunk := sock.recv(1024 * 1024):  # the broker closed the connection: this ends
            received += len(chunk)
    found = closed.search(broker.log())
    assert found is not None
    # What waited in the broker for this client: the bound, passed by one event at most.
    assert int(found[1]) <= MAX_QUEUED_BYTES + len(body) + 1024
    assert received < 32 * len(body) * 16 // 2


def test_a_graceful_shutdown_ends_the_stream_cleanly(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "store", hold_check_interval_ms=60_000).start()
    try:
        with httpx.Client(base_url=process.url, timeout=30) as own:
            topic = new_topic(own, "shutdown", queues=2)
            produce(own, topic, [{"body": "before"}])
            opened = stream(own, topic, **{"from": "first"})
            assert next(opened).retry == 3000
            first = next(e for e in opened if e.data)
            assert message(first)["body"] == "before"
            assert process.stop() == 0
            # The response ends (no error): an EventSource reconnects from here.
            assert [e for e in opened if e.data] == []
    finally:
        process.stop()
