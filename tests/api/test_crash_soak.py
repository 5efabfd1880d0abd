"""Crash soak: producers and consumers keep working through a broker that is SIGKILLed again and again.

A real broker process runs under SYNC_FLUSH with small segments. Producer threads POST batches of
messages with unique ids and retry on connection errors with the same ids and bodies; consumer
threads pull every queue through the HTTP API as one group, committing each offset with the next
pull, and start again from the group's committed offset after a connection error. Meanwhile the
test SIGKILLs the broker at a random moment after some progress and starts it again on the same
store, round after round. After each restart, with the consumers held back, it reads every queue's
max offset and the group's committed offsets.

Afterwards the queues are read back whole and checked:

* every acknowledged message is at its acknowledged queue offset with its body and unique id;
* every message a consumer received is the one stored at that offset (no offset was given twice);
* each queue reads from 0 to its max offset without a gap, and every body stored was sent;
* no body is stored twice, although producers resend (with the same unique id) whatever a
  connection error left unanswered: the idempotency window outlives the restarts;
* max offsets never went backwards across a restart, and a restart never lost an acknowledged
  offset; committed offsets never went backwards either: a restart loads at least what was in the
  offset file just before the kill, and at least what the previous restart loaded.

Under ASYNC_FLUSH the same holds (a quarter of the rounds, at least 5), since SIGKILL leaves the
page cache: what a power loss may lose there is bounded in tests/store/test_power_loss.py.
``WHARF_SOAK_ROUNDS`` (default 20) sets the rounds, ``WHARF_SOAK_SEED`` repeats the random choices
(thread timing cannot be repeated); a longer soak::

    WHARF_SOAK_ROUNDS=300 python -m pytest tests/api/test_crash_soak.py
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.api.server import BrokerProcess

ROUNDS = int(os.environ.get("WHARF_SOAK_ROUNDS") or 20)
# SIGKILL loses nothing under ASYNC_FLUSH either (the page cache stays): fewer rounds check that.
ASYNC_ROUNDS = max(5, ROUNDS // 4)
SEED = int(os.environ.get("WHARF_SOAK_SEED") or random.randrange(1 << 32))

pytestmark = [pytest.mark.crash, pytest.mark.slow]

TOPICS = ("soak-a", "soak-b")
QUEUES = 2
PRODUCERS = 3
CONSUMERS = 2
GROUP = "soak-group"
MAX_BATCH = 4
RETRY_PAUSE_S = 0.02
PROGRESS_TIMEOUT_S = 30.0

QueueKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Ack:
    topic: str
    queue_id: int
    queue_offset: int
    unique_id: str
    body: str


@dataclass(slots=True)
class Traffic:
    """What the clients saw; lists and sets are appended to from several threads (atomic under the GIL)."""

    acks: list[Ack] = field(default_factory=list)
    sent: set[str] = field(default_factory=set)
    resent: set[str] = field(default_factory=set)  # unique ids sent again after a connection error
    received: list[tuple[str, int, int, str]] = field(default_factory=list)  # topic, queue, offset, body
    errors: list[str] = field(default_factory=list)


def produce(url: str, name: str, seed: int, stop: threading.Event, traffic: Traffic) -> None:
    rng = random.Random(seed)
    number = 0
    with httpx.Client(base_url=url, timeout=30.0) as client:
        while not stop.is_set():
            topic = rng.choice(TOPICS)
            messages = []
            for _ in range(rng.randint(1, MAX_BATCH)):
                unique_id = f"{name}-{number}"
                number += 1
                messages.append(
                    {"body": f"{unique_id}|".ljust(rng.randint(16, 400), "."), "unique_id": unique_id}
                )
            traffic.sent.update(message["body"] for message in messages)
            while not stop.is_set():  # until answered: a resend carries the same ids and bodies
                try:
                    response = client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
                except httpx.TransportError:
                    traffic.resent.update(message["unique_id"] for message in messages)
                    time.sleep(RETRY_PAUSE_S)
                    continue
                if response.status_code != 200:
                    traffic.errors.append(f"produce answered {response.status_code}: {response.text}")
                    return
                for message, result in zip(messages, response.json()["results"], strict=True):
                    if result["status"] == "SEND_OK":
                        traffic.acks.append(
                            Ack(
                                topic,
                                result["queue_id"],
                                result["queue_offset"],
                                message["unique_id"],
                                message["body"],
                            )
                        )
                break


def consume(
    url: str, queues: list[QueueKey], stop: threading.Event, may_pull: threading.Event, traffic: Traffic
) -> None:
    """Pull ``queues`` round robin as GROUP, committing each next offset with the following pull."""
    positions: dict[QueueKey, int | None] = dict.fromkeys(queues)
    with httpx.Client(base_url=url, timeout=30.0) as client:
        while not stop.is_set():
            for topic, queue_id in queues:
                may_pull.wait()
                position = positions[(topic, queue_id)]
                params: dict[str, str | int] = {"group": GROUP, "from": "first", "max_wait_ms": 100}
                if position is not None:
                    params["commit_offset"] = position
                try:
                    response = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params=params)
                except httpx.TransportError:
                    positions = dict.fromkeys(queues)  # start again from the committed offsets
                    time.sleep(RETRY_PAUSE_S)
                    break
                if response.status_code != 200:
                    traffic.errors.append(f"pull answered {response.status_code}: {response.text}")
                    return
                answer = response.json()
                expected = position
                for message in answer["messages"]:
                    if expected is not None and message["queue_offset"] != expected:
                        traffic.errors.append(
                            f"{topic}/{queue_id}: a pull from {expected} returned offset {message['queue_offset']}"
                        )
                    traffic.received.append((topic, queue_id, message["queue_offset"], message["body"]))
                    expected = message["queue_offset"] + 1
                positions[(topic, queue_id)] = answer["next_offset"]


def queue_offsets(client: httpx.Client) -> tuple[dict[QueueKey, int], dict[QueueKey, int]]:
    """(max offset, committed offset of GROUP) of every queue; a queue without a commit is left out."""
    max_offsets: dict[QueueKey, int] = {}
    for topic in TOPICS:
        response = client.get(f"/v1/topics/{topic}/queues")
        assert response.status_code == 200, response.text
        for queue in response.json()["queues"]:
            max_offsets[(topic, queue["queue_id"])] = queue["max_offset"]
    committed: dict[QueueKey, int] = {}
    response = client.get(f"/v1/groups/{GROUP}/offsets")
    if response.status_code == 200:
        for row in response.json()["offsets"]:
            if row["committed_offset"] is not None:
                committed[(row["topic"], row["queue_id"])] = row["committed_offset"]
    return max_offsets, committed


def persisted_offsets(store_dir: Path) -> dict[QueueKey, int]:
    """GROUP's offsets as the broker last wrote them to disk (the file is replaced atomically)."""
    path = store_dir / "config" / "consumerOffset.json"
    if not path.exists():
        return {}
    table = json.loads(path.read_bytes())["offsetTable"]
    return {
        (key.rsplit("@", 1)[0], int(queue_id)): offset
        for key, queues in table.items()
        if key.endswith(f"@{GROUP}")
        for queue_id, offset in queues.items()
    }


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PROGRESS_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def read_back(client: httpx.Client) -> dict[QueueKey, list[dict[str, object]]]:
    """Every message of every queue, from offset 0 to the max, checking there is no gap."""
    stored: dict[QueueKey, list[dict[str, object]]] = {}
    for topic in TOPICS:
        for queue_id in range(QUEUES):
            messages: list[dict[str, object]] = []
            while True:
                response = client.get(
                    f"/v1/topics/{topic}/queues/{queue_id}/messages",
                    params={"offset": len(messages), "max_messages": 1000},
                )
                assert response.status_code == 200, response.text
                answer = response.json()
                if answer["status"] != "FOUND":
                    assert len(messages) == answer["max_offset"], (
                        f"{topic}/{queue_id} stops at {len(messages)} ({answer['status']}), its max offset is "
                        f"{answer['max_offset']}"
                    )
                    break
                for message in answer["messages"]:
                    assert message["queue_offset"] == len(messages), f"{topic}/{queue_id} has a gap"
                    messages.append(message)
            stored[(topic, queue_id)] = messages
    return stored


@pytest.mark.parametrize(("flush_mode", "rounds"), [("SYNC", ROUNDS), ("ASYNC", ASYNC_ROUNDS)])
@pytest.mark.timeout(120 + 30 * ROUNDS)
def test_acknowledged_messages_survive_repeated_sigkills(
    tmp_path: Path, flush_mode: str, rounds: int
) -> None:
    print(f"WHARF_SOAK_SEED={SEED}")
    rng = random.Random(SEED)
    broker = BrokerProcess(
        tmp_path / "store",
        flush_mode=flush_mode,
        commitlog_file_size=256 * 1024,
        consumequeue_file_entries=256,
        consumer_offset_persist_interval_ms=100,
        hold_check_interval_ms=100,
    ).start()
    traffic = Traffic()
    stop, may_pull = threading.Event(), threading.Event()
    may_pull.set()
    queues = [(topic, queue_id) for topic in TOPICS for queue_id in range(QUEUES)]
    threads = [
        threading.Thread(target=produce, args=(broker.url, f"p{i}", SEED + i, stop, traffic), daemon=True)
        for i in range(PRODUCERS)
    ] + [
        threading.Thread(
            target=consume, args=(broker.url, queues[i::CONSUMERS], stop, may_pull, traffic), daemon=True
        )
        for i in range(CONSUMERS)
    ]
    max_seen: dict[QueueKey, int] = {}
    committed_seen: dict[QueueKey, int] = {}
    try:
        with httpx.Client(base_url=broker.url, timeout=30.0) as client:
            for topic in TOPICS:
                response = client.post("/v1/topics", json={"name": topic, "queues": QUEUES})
                assert response.status_code == 201, response.text
            for thread in threads:
                thread.start()
            for round_no in range(rounds):
                acks, received = len(traffic.acks), len(traffic.received)
                wait_for(
                    lambda acks=acks, received=received: (
                        len(traffic.acks) > acks and len(traffic.received) > received
                    ),
                    "progress since the last restart",
                )
                time.sleep(rng.uniform(0.0, 0.4))  # a random moment to crash at, not a wait for anything
                max_before, _ = queue_offsets(client)
                persisted = persisted_offsets(broker.store_dir)
                may_pull.clear()
                broker.kill()
                acked_before: dict[QueueKey, int] = {}
                for ack in list(traffic.acks):
                    key = (ack.topic, ack.queue_id)
                    acked_before[key] = max(acked_before.get(key, -1), ack.queue_offset)
                broker.start()
                max_after, committed_after = queue_offsets(client)
                may_pull.set()
                for key, offset in max_before.items():
                    assert max_after[key] >= offset, (
                        f"round {round_no}: {key} max offset went {offset} -> {max_after[key]}"
                    )
                for key, offset in acked_before.items():
                    assert max_after[key] > offset, (
                        f"round {round_no}: {key} lost acknowledged offset {offset}"
                    )
                for key, offset in persisted.items():
                    assert committed_after.get(key, -1) >= offset, (
                        f"round {round_no}: {key} was persisted at {offset}, the restart loaded "
                        f"{committed_after.get(key)}"
                    )
                for key, offset in committed_seen.items():
                    assert committed_after.get(key, -1) >= offset, (
                        f"round {round_no}: {key} committed offset went {offset} -> {committed_after.get(key)}"
                    )
                max_seen.update(max_after)
                committed_seen.update(committed_after)
            stop.set()
            may_pull.set()
            for thread in threads:
                thread.join(30)
            stored = read_back(client)
    finally:
        stop.set()
        may_pull.set()
        broker.stop()
    assert not traffic.errors, traffic.errors[:5]

    bodies = Counter(str(m["body"]) for messages in stored.values() for m in messages)
    for (topic, queue_id), messages in stored.items():
        for message in messages:
            assert message["body"] in traffic.sent, f"{topic}/{queue_id} holds a body nobody sent: {message}"
    for ack in traffic.acks:
        messages = stored[(ack.topic, ack.queue_id)]
        assert ack.queue_offset < len(messages), f"acknowledged {ack} is lost"
        message = messages[ack.queue_offset]
        assert (message["body"], message["unique_id"]) == (ack.body, ack.unique_id), (
            f"{ack.topic}/{ack.queue_id} offset {ack.queue_offset} holds {message['unique_id']}, not {ack.unique_id}"
        )
    for topic, queue_id, offset, body in traffic.received:
        assert stored[(topic, queue_id)][offset]["body"] == body, (
            f"a consumer received {body[:20]!r} at {topic}/{queue_id} offset {offset}, which now holds another"
        )
    twice = {body: count for body, count in bodies.items() if count > 1}
    assert not twice, (
        f"{len(twice)} bodies stored twice (of {len(traffic.resent)} resent ids): {list(twice)[:5]}"
    )
    print(
        f"{rounds} SIGKILLs under {flush_mode}: {len(traffic.acks)} acks, {len(traffic.received)} deliveries, "
        f"{sum(bodies.values())} stored, {len(twice)} resent bodies stored twice"
    )


def test_a_resent_unique_id_is_stored_once_across_a_restart(tmp_path: Path) -> None:
    """A producer that never saw its answer (the broker died) resends the same unique id to the
    restarted broker: the message must not be stored a second time."""
    broker = BrokerProcess(tmp_path / "store", flush_mode="SYNC").start()
    try:
        request = {"messages": [{"body": "once", "unique_id": "resent-after-crash", "queue_id": 0}]}
        with httpx.Client(base_url=broker.url, timeout=30.0) as client:
            first = client.post("/v1/topics/resent/messages", json=request)
            assert first.status_code == 200, first.text
            broker.kill()
            broker.start()
            again = client.post("/v1/topics/resent/messages", json=request)
            assert again.status_code == 200, again.text
            queues = client.get("/v1/topics/resent/queues").json()["queues"]
        assert again.json()["results"][0]["queue_offset"] == first.json()["results"][0]["queue_offset"]
        assert queues[0]["max_offset"] == 1, "the resent message was stored twice"
    finally:
        broker.stop()
