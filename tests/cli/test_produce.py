"""``wharf produce``: lines or NDJSON from a file or standard input, in batches sent where the topic's
route says, with tags and keys; it prints how many were acknowledged, and a progress bar on standard
error for a file or an input longer than a screen."""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path

import httpx

from tests.cli.conftest import Wharf, stored_messages


def test_a_file_of_lines_goes_out_in_batches_over_the_route(
    wharf: Wharf, client: httpx.Client, topic: str, tmp_path: Path
) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"line {n}\n" for n in range(40)))
    sent = wharf(
        "produce", topic, str(lines), "--batch", "10", "--tags", "TagA", "--key", "k1", "--key", "k2"
    )
    assert sent.exit_code == 0, sent.stderr
    assert sent.stdout == "40 messages acknowledged\n"
    # The progress bar, drawn once at the end when standard error is not a terminal.
    assert "40 messages" in sent.stderr and "sending" in sent.stderr
    stored = stored_messages(client, topic)
    assert sorted(message["body"] for message in stored) == sorted(f"line {n}" for n in range(40))
    assert {(message["tags"], tuple(message["keys"])) for message in stored} == {("TagA", ("k1", "k2"))}
    # One batch per request, each to the next queue of the route (4 queues): 10 lines each, in order.
    assert Counter(message["queue_id"] for message in stored) == {0: 10, 1: 10, 2: 10, 3: 10}
    for queue_id in range(4):
        bodies = [message["body"] for message in stored if message["queue_id"] == queue_id]
        assert bodies == sorted(bodies, key=lambda body: int(body.split()[1]))


def test_standard_input_lines_skip_blank_lines_and_keep_their_bytes(
    wharf: Wharf, client: httpx.Client, topic: str
) -> None:
    sent = wharf("produce", topic, "-", stdin="first\n\n  spaced  \r\nlast without newline")
    assert (sent.exit_code, sent.stdout) == (0, "3 messages acknowledged\n")
    assert sent.stderr == ""  # shorter than a screen: no progress bar
    stored = stored_messages(client, topic)
    assert sorted(message["body"] for message in stored) == ["  spaced  ", "first", "last without newline"]
    assert {message["tags"] for message in stored} == {""}


def test_ndjson_from_standard_input_in_batches(wharf: Wharf, client: httpx.Client, topic: str) -> None:
    objects = [
        {"body": "plain"},
        {"body": base64.b64encode(b"\x00\xffbinary").decode(), "encoding": "base64", "tags": "Bin"},
        {"body": "keyed", "keys": "a b", "properties": {"source": "cli"}, "unique_id": "cli-unique-1"},
        {"body": "listed", "keys": ["c"]},
        {"body": "five"},
    ]
    text = "\n".join(json.dumps(item) for item in objects) + "\n\n"
    sent = wharf("produce", topic, "--ndjson", "--batch", "2", "--tags", "Default", "--json", stdin=text)
    assert sent.exit_code == 0, sent.stderr
    assert json.loads(sent.stdout) == {"topic": topic, "acknowledged": 5, "flush_disk_timeouts": 0}
    stored = {message["body"]: message for message in stored_messages(client, topic)}
    assert stored["plain"]["tags"] == "Default"
    binary = stored[base64.b64encode(b"\x00\xffbinary").decode()]
    assert (binary["encoding"], binary["tags"]) == ("base64", "Bin")
    assert stored["keyed"]["keys"] == ["a", "b"]
    assert stored["keyed"]["properties"] == {"source": "cli"}
    assert stored["keyed"]["unique_id"] == "cli-unique-1"
    assert stored["listed"]["keys"] == ["c"]
    # Three batches of at most two: three requests, so three queues.
    assert len({message["queue_id"] for message in stored.values()}) == 3


def test_a_long_standard_input_gets_the_progress_bar(wharf: Wharf, topic: str) -> None:
    sent = wharf("produce", topic, stdin="".join(f"{n}\n" for n in range(300)))
    assert sent.stdout == "300 messages acknowledged\n"
    assert "300 messages" in sent.stderr


def test_a_bad_ndjson_line_is_a_usage_error_after_what_was_sent(
    wharf: Wharf, client: httpx.Client, topic: str
) -> None:
    text = '{"body": "a"}\n{"body": "b"}\n{"body": "c", "colour": "red"}\n'
    sent = wharf("produce", topic, "--ndjson", "--batch", "2", stdin=text)
    assert sent.exit_code == 2
    assert sent.stdout == "2 messages acknowledged\n"
    assert "line 3: unknown field 'colour'" in sent.stderr
    assert sorted(message["body"] for message in stored_messages(client, topic)) == ["a", "b"]
    for bad in (
        "not json",
        '["body"]',
        '{"body": 1}',
        '{"body": "!", "encoding": "base64"}',
        '{"body": "x", "keys": 3}',
    ):
        assert wharf("produce", topic, "--ndjson", stdin=bad + "\n").exit_code == 2, bad


def test_a_topic_without_a_route_is_a_broker_error(wharf: Wharf, tmp_path: Path) -> None:
    sent = wharf("produce", "cli-no-such-topic", stdin="x\n")
    assert sent.exit_code == 1
    assert sent.stderr == "wharf: no broker serves topic 'cli-no-such-topic' (40402)\n"
    missing = wharf("produce", "cli-no-such-topic", str(tmp_path / "absent.txt"))
    assert missing.exit_code == 2 and "cannot read" in missing.stderr
