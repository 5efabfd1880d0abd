"""``wharf consume``: a group reads from its committed offsets (``--from`` where it has none), prints
one message per line, stops at the end of every queue or after ``--max`` unless ``--follow``, and
commits only with ``--commit``."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from app.cli.consume import interrupts_deferred
from tests.api.server import BrokerProcess
from tests.cli.conftest import Wharf, run_wharf, wharf_process
from tests.store.conftest import wait_until


def produce(client: httpx.Client, topic: str, bodies: list[str], queue_id: int = 0) -> None:
    messages = [{"body": body, "queue_id": queue_id} for body in bodies]
    assert client.post(f"/v1/topics/{topic}/messages", json={"messages": messages}).status_code == 200


def committed(client: httpx.Client, group: str, topic: str) -> dict[int, int | None]:
    answer = client.get(f"/v1/groups/{group}/offsets", params={"topic": topic}).json()
    return {row["queue_id"]: row["committed_offset"] for row in answer["offsets"]}


def test_from_first_max_and_commit_then_the_group_goes_on(
    wharf: Wharf, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, [f"m{n}" for n in range(5)])
    first = wharf("consume", topic, "--group", "cli-billing", "--from", "first", "--max", "3", "--commit")
    assert first.exit_code == 0, first.stderr
    assert first.stdout == "m0\nm1\nm2\n"
    # Joining fixed the group's start on every queue (--from first); the commit moved queue 0.
    assert committed(client, "cli-billing", topic) == {0: 3, 1: 0, 2: 0, 3: 0}
    rest = wharf("consume", topic, "-g", "cli-billing", "--commit")
    assert rest.stdout == "m3\nm4\n"  # to the end of every queue, then it stops
    assert committed(client, "cli-billing", topic)[0] == 5
    assert wharf("consume", topic, "-g", "cli-billing").stdout == ""


def test_a_consume_is_a_member_that_shares_the_queues_and_leaves(
    wharf: Wharf, client: httpx.Client, topic: str
) -> None:
    # Another member holds the group's first half of the queues (its id sorts before "wharf-...").
    join = {"client_id": "another", "subscriptions": {topic: "*"}, "consume_from": "first"}
    assert client.post("/v1/groups/cli-members/heartbeat", json=join).status_code == 200
    for queue_id in range(4):
        produce(client, topic, [f"q{queue_id}"], queue_id=queue_id)
    printed = wharf("consume", topic, "-g", "cli-members", "--from", "first")
    assert printed.exit_code == 0, printed.stderr
    assert printed.stdout == "q2\nq3\n"  # its own queues only, committed as a member
    assert committed(client, "cli-members", topic) == {0: 0, 1: 0, 2: 1, 3: 1}
    # It left: the other member owns every queue again.
    (member,) = client.get("/v1/groups/cli-members").json()["members"]
    assigned = [item for item in member["assignments"] if item["topic"] == topic]
    assert (member["client_id"], len(assigned)) == ("another", 4)
    # Reading every queue stays an explicit mode, without joining.
    every = wharf("consume", topic, "-g", "cli-members", "--from", "first", "--all-queues")
    assert sorted(every.stdout.splitlines()) == ["q0", "q1"]
    assert len(client.get("/v1/groups/cli-members").json()["members"]) == 1


def test_without_commit_no_offset_moves(wharf: Wharf, client: httpx.Client, topic: str) -> None:
    produce(client, topic, ["a", "b"], queue_id=2)
    for _ in range(2):
        assert wharf("consume", topic, "-g", "cli-peek", "--from", "first", "--all-queues").stdout == "a\nb\n"
    assert client.get("/v1/groups/cli-peek/offsets").status_code == 404


def test_json_lines_are_the_api_message_objects(wharf: Wharf, client: httpx.Client, topic: str) -> None:
    client.post(
        f"/v1/topics/{topic}/messages",
        json={"body": "hello", "queue_id": 1, "tags": "T", "keys": ["k"], "properties": {"p": "v"}},
    )
    client.post(f"/v1/topics/{topic}/messages", json={"body": "/w==", "encoding": "base64", "queue_id": 1})
    printed = wharf("consume", topic, "-g", "cli-json", "--from", "first", "--json")
    lines = [json.loads(line) for line in printed.stdout.splitlines()]
    pulled = client.get(f"/v1/topics/{topic}/queues/1/messages", params={"offset": 0}).json()["messages"]
    assert lines == pulled
    plain = wharf("consume", topic, "-g", "cli-plain", "--from", "first")
    assert plain.stdout == "hello\n/w==\n"  # not UTF-8: base64, as the API shows it


def test_from_a_time_is_accepted_and_a_bad_one_is_a_usage_error(
    wharf: Wharf, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, ["young"])
    # A young queue (its first message still in memory) is read from 0 whatever the policy.
    assert wharf("consume", topic, "-g", "cli-time", "--from", "2001-01-01T00:00:00Z").stdout == "young\n"
    refused = wharf("consume", topic, "-g", "cli-time", "--from", "yesterday")
    assert refused.exit_code == 2 and "--from" in refused.stderr
    assert wharf("consume", topic).exit_code == 2  # no --group


def test_a_missing_topic_is_a_broker_error(wharf: Wharf) -> None:
    answer = wharf("consume", "cli-never", "-g", "g")
    assert (answer.exit_code, answer.stderr) == (1, "wharf: no broker serves topic 'cli-never' (40402)\n")


def read_line(process: subprocess.Popen[str], timeout_s: float = 30.0) -> str:
    """The child's next line of output; fails the test when none comes in time."""
    stdout = process.stdout
    assert stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not lines:
        process.kill()
        pytest.fail(f"no line from wharf consume in {timeout_s} s")
    return lines[0]


@pytest.mark.slow
def test_follow_waits_for_new_messages(broker: BrokerProcess, client: httpx.Client, topic: str) -> None:
    produce(client, topic, ["before"])
    process = wharf_process(
        "consume", topic, "-g", "cli-follow", "--from", "first", "--follow", "--max", "3", url=broker.url
    )
    try:
        assert read_line(process) == "before\n"
        # Caught up, it waits: a pull held on each of the 4 queues and the group's retry queue
        # (without --follow it stops here).
        wait_until(lambda: client.get("/v1/stats").json()["held_pulls"] == 5, what="five held pulls")
        assert process.poll() is None
        produce(client, topic, ["after-1", "after-2"], queue_id=3)
        assert read_line(process) == "after-1\n"
        assert read_line(process) == "after-2\n"
        assert process.wait(30) == 0
    finally:
        process.kill()
        process.communicate()


@pytest.mark.slow
@pytest.mark.parametrize("mode", [(), ("--all-queues",)], ids=["member", "all-queues"])
def test_ctrl_c_commits_what_was_printed_and_exits_130(
    broker: BrokerProcess, client: httpx.Client, topic: str, mode: tuple[str, ...]
) -> None:
    produce(client, topic, ["one", "two"], queue_id=1)
    # The child takes SIGINT's disposition from this process: when the test run was started with it
    # ignored (in the background of a shell without job control), so would the command be. A
    # handler here is reset to the default in the child, as a terminal's foreground job has it.
    command = ("consume", topic, "-g", "cli-interrupted", "--from", "first", "--follow", "--commit", *mode)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = wharf_process(*command, url=broker.url)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        assert read_line(process) == "one\n"
        assert read_line(process) == "two\n"
        process.send_signal(signal.SIGINT)
        _, errors = process.communicate(timeout=30)
        assert process.returncode == 130, errors
        assert "Traceback" not in errors
    finally:
        process.kill()
    assert committed(client, "cli-interrupted", topic)[1] == 2


@pytest.fixture(scope="module")
def retaining_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker that keeps no CommitLog segment but the one being written, once asked to clean."""
    process = BrokerProcess(tmp_path_factory.mktemp("retaining") / "store", file_reserved_time_h=0).start()
    yield process
    process.stop()


def iso(milliseconds: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=milliseconds)).isoformat()


@pytest.mark.slow
def test_from_reaches_the_broker_on_a_queue_past_its_beginning(retaining_broker: BrokerProcess) -> None:
    """Once retention has cut a queue's head, a new group starts where --from says."""
    with httpx.Client(base_url=retaining_broker.url, timeout=30.0) as client:
        assert client.post("/v1/topics", json={"name": "aged", "queues": 1}).status_code == 201
        for _ in range(8):  # fills three or more 1 MiB segments
            produce(client, "aged", ["x" * 300_000])
        stamps = []
        for n in range(3):
            # Each stored in a later millisecond than the one before.
            wait_until(lambda: not stamps or time.time() * 1000 > stamps[-1] + 1, what="the next millisecond")
            produce(client, "aged", [f"m{n}"])
            (last,) = client.get("/v1/topics/aged/queues").json()["queues"]
            stamps.append(last["last_store_timestamp"])
        assert client.post("/v1/admin/clean").json()["commitlog_segments"] >= 1
        (queue,) = client.get("/v1/topics/aged/queues").json()["queues"]
        assert queue["min_offset"] > 0

    def consume(*options: str) -> list[str]:
        answer = run_wharf(retaining_broker.url, "consume", "aged", *options)
        assert answer.exit_code == 0, answer.stderr
        return answer.stdout.splitlines()

    assert consume("-g", "cli-default") == []
    assert consume("-g", "cli-last", "--from", "last") == []
    assert consume("-g", "cli-time", "--from", iso(stamps[1])) == ["m1", "m2"]
    assert consume("-g", "cli-ms", "--from", str(stamps[2])) == ["m2"]
    first = consume("-g", "cli-first", "--from", "first")
    assert len(first) == queue["max_offset"] - queue["min_offset"] and first[-3:] == ["m0", "m1", "m2"]


def test_a_sigint_inherited_as_ignored_stays_ignored_while_a_batch_is_printed() -> None:
    """Started with SIGINT ignored, the command is deaf to it throughout, not only while it prints."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_deferred():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
