"""Graceful shutdown of a real broker process on SIGTERM and SIGINT (app/server.py).

A stop signal answers held pulls at once (200, no messages, the same next offset), ends every
WebSocket with 1001 (a producer after answering every frame it took in), lets in-flight produces
finish, closes the store (consumer offsets and checkpoint written, abort file removed), leaves the
route registry and exits with status 0; the next start takes the normal recovery path and says so. A shutdown that cannot
finish (a disk that stopped answering) still exits, leaving the abort file: the next start
recovers as after a crash.
"""

from __future__ import annotations

import random
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.exceptions import ConnectionClosed

from tests.api.server import BrokerProcess
from tests.ws.wsclient import Socket, WsBroker, held_pulls, new_topic, produce, wait_for

pytestmark = pytest.mark.slow

EXIT_DEADLINE_S = 60.0  # far above the shutdown timeout: only a hang reaches it
NORMAL_RECOVERY = "recovery: normal (clean shutdown)"
ABNORMAL_RECOVERY = "recovery: abnormal (the abort file is present"


def stop_with(broker: BrokerProcess, stop_signal: signal.Signals) -> int:
    """Send ``stop_signal`` and wait for the exit; its status."""
    process = broker.process
    assert process is not None
    process.send_signal(stop_signal)
    return process.wait(EXIT_DEADLINE_S)


def restart(broker: BrokerProcess) -> str:
    """Start the broker again on its store; the log lines of the new run."""
    broker.process = None
    before = len(broker.log())
    broker.start()
    return broker.log()[before:]


def read_queue(client: httpx.Client, topic: str, queue_id: int) -> dict[int, str]:
    """Every message of a queue: offset -> body."""
    found: dict[int, str] = {}
    offset = 0
    while True:
        answer = client.get(
            f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": offset, "max_messages": 500}
        ).json()
        for message in answer["messages"]:
            found[message["queue_offset"]] = message["body"]
        if answer["next_offset"] == offset:
            return found
        offset = answer["next_offset"]


class PipelinedProducer(threading.Thread):
    """Sends produce frames in bursts over one socket and collects the results, until the close."""

    def __init__(self, socket: Socket) -> None:
        super().__init__()
        self.socket = socket
        self.results: dict[str, dict[str, Any]] = {}
        self.close_code: int | None = None

    def run(self) -> None:
        connection = self.socket.connection
        number = 0
        try:
            while True:
                burst = [f"frame-{number + i}" for i in range(10)]
                number += len(burst)
                for frame_id in burst:
                    connection.send(orjson.dumps({"id": frame_id, "body": frame_id}).decode())
                for _ in burst:
                    result = orjson.loads(connection.recv(timeout=30))["results"]
                    self.results.update((item["id"], item) for item in result)
                    if len(self.results) >= number:
                        break
        except ConnectionClosed:
            pass
        try:  # results sent before the close frame are still read
            while True:
                for item in orjson.loads(connection.recv(timeout=30))["results"]:
                    self.results[item["id"]] = item
        except ConnectionClosed as closed:
            self.close_code = closed.rcvd.code if closed.rcvd is not None else None


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_answers_pulls_and_closes_sockets_with_1001(
    tmp_path: Path, stop_signal: signal.Signals
) -> None:
    broker = BrokerProcess(
        tmp_path / "store",
        log_level="info",
        hold_check_interval_ms=60_000,
        max_wait_ms=60_000,
        # A produce waits for its group commit: the signal most likely finds a batch being stored.
        flush_mode="SYNC",
    ).start()
    try:
        with httpx.Client(base_url=broker.url, timeout=60) as client:
            pulled = new_topic(client, "pulled", queues=1)
            produce(client, pulled, "a", "b", "c")
            pushed = new_topic(client, "pushed", queues=1)
            answers: list[httpx.Response] = []
            pull = threading.Thread(
                target=lambda: answers.append(
                    client.get(
                        f"/v1/topics/{pulled}/queues/0/messages", params={"offset": 3, "max_wait_ms": 60_000}
                    )
                )
            )
            pull.start()
            assert wait_for(lambda: held_pulls(client) == 1)
            ws = WsBroker(broker)
            # No credit: the subscriber waits on its client, not in the hold service.
            subscriber = ws.subscribe(topic=pulled, credit=0)
            producer = PipelinedProducer(ws.produce(pushed))
            producer.start()
            assert wait_for(lambda: len(producer.results) >= 50, timeout_s=30)

            assert stop_with(broker, stop_signal) == 0, broker.log()[-3000:]
            pull.join(EXIT_DEADLINE_S)
            producer.join(EXIT_DEADLINE_S)
            code, _ = subscriber.closed()

        (answer,) = answers
        assert answer.status_code == 200
        assert answer.json()["messages"] == [] and answer.json()["next_offset"] == 3
        assert code == 1001
        assert producer.close_code == 1001
        assert {item.get("status") for item in producer.results.values()} == {"SEND_OK"}
        assert not (broker.store_dir / "abort").exists()

        log = restart(broker)
        assert NORMAL_RECOVERY in log
        with httpx.Client(base_url=broker.url, timeout=60) as client:
            stored = read_queue(client, pushed, 0)
        # Every frame the broker took in was stored and answered; none was stored unanswered.
        assert sorted(stored.values()) == sorted(producer.results)
        assert all(stored[item["queue_offset"]] == frame_id for frame_id, item in producer.results.items())
    finally:
        broker.stop()


def test_sigterm_under_sync_produce_load_loses_no_acknowledged_message(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "store",
        log_level="info",
        flush_mode="SYNC",
        # Only the shutdown can write the committed offset below.
        consumer_offset_persist_interval_ms=3_600_000,
    ).start()
    acks: list[tuple[int, int, str]] = []  # queue id, queue offset, body
    refusals: list[str] = []
    stop = threading.Event()

    def load(name: str, seed: int) -> None:
        rng = random.Random(seed)
        number = 0
        with httpx.Client(base_url=broker.url, timeout=60) as client:
            while not stop.is_set():
                bodies = [f"{name}-{number + i}" for i in range(rng.randint(1, 4))]
                number += len(bodies)
                try:
                    answer = client.post(
                        "/v1/topics/load/messages", json={"messages": [{"body": body} for body in bodies]}
                    )
                except httpx.TransportError:
                    return  # the broker stopped taking connections
                if answer.status_code != 200:
                    refusals.append(answer.text)
                    return
                for body, result in zip(bodies, answer.json()["results"], strict=True):
                    if result["status"] == "SEND_OK":
                        acks.append((result["queue_id"], result["queue_offset"], body))

    try:
        with httpx.Client(base_url=broker.url, timeout=60) as client:
            assert client.post("/v1/topics", json={"name": "load", "queues": 4}).status_code == 201
            threads = [threading.Thread(target=load, args=(f"p{n}", n)) for n in range(4)]
            for thread in threads:
                thread.start()
            assert wait_for(lambda: len(acks) >= 200, timeout_s=60)
            committed = {"topic": "load", "queue_id": 0, "offset": 1}
            answer = client.put("/v1/groups/billing/offsets", json={"offsets": [committed]})
            assert answer.status_code == 200, answer.text

            assert stop_with(broker, signal.SIGTERM) == 0, broker.log()[-3000:]
            stop.set()
            for thread in threads:
                thread.join(EXIT_DEADLINE_S)
        assert not refusals
        assert not (broker.store_dir / "abort").exists()
        assert "shutdown: complete" in broker.log()

        log = restart(broker)
        assert NORMAL_RECOVERY in log
        with httpx.Client(base_url=broker.url, timeout=60) as client:
            stored = {queue_id: read_queue(client, "load", queue_id) for queue_id in range(4)}
            offsets = client.get("/v1/groups/billing/offsets", params={"topic": "load"}).json()["offsets"]
        lost = [ack for ack in acks if stored[ack[0]].get(ack[1]) != ack[2]]
        assert not lost, f"{len(lost)} of {len(acks)} acknowledged messages lost: {lost[:5]}"
        assert {
            (item["queue_id"], item["committed_offset"]) for item in offsets if item["queue_id"] == 0
        } == {(0, 1)}
    finally:
        stop.set()
        broker.stop()


def test_a_shutdown_stuck_on_the_disk_still_exits_and_the_next_start_recovers(tmp_path: Path) -> None:
    stall_file = tmp_path / "stall"
    broker = BrokerProcess(
        tmp_path / "store",
        module="tests.api.stalled_disk",
        log_level="info",
        shutdown_timeout_s=3,
        test_stall_file=stall_file,
        test_sync_log=tmp_path / "syncs.log",
    ).start()
    try:
        with httpx.Client(base_url=broker.url, timeout=60) as client:
            topic = new_topic(client, "stuck", queues=1)
            (ack,) = produce(client, topic, "before the stall")
        assert ack["status"] == "SEND_OK"
        stall_file.touch()  # every CommitLog sync from now on blocks, the close's flush too
        assert stop_with(broker, signal.SIGTERM) == 1
        assert "shutdown: not complete within 3 s" in broker.log()
        assert (broker.store_dir / "abort").exists()
        stall_file.unlink()

        broker.module = "app"
        log = restart(broker)
        assert ABNORMAL_RECOVERY in log
        with httpx.Client(base_url=broker.url, timeout=60) as client:
            assert read_queue(client, topic, 0) == {ack["queue_offset"]: "before the stall"}
    finally:
        stall_file.unlink(missing_ok=True)
        broker.stop()


def test_a_stopped_broker_leaves_the_route_registry_at_once(tmp_path: Path) -> None:
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    # Silent brokers leave the routes only after an hour: only the unregistering can remove one.
    timings = {"database_url": registry, "cluster_name": "leaving", "broker_expiry_s": 3600}
    staying = BrokerProcess(tmp_path / "staying", broker_name="staying", **timings)
    leaving = BrokerProcess(tmp_path / "leaving", broker_name="leaving", **timings)
    try:
        staying.start()
        leaving.start()

        def brokers() -> set[str]:
            clusters = httpx.get(f"{staying.url}/v1/clusters", timeout=30).json()["clusters"]
            return {broker["broker_name"] for cluster in clusters for broker in cluster["brokers"]}

        assert brokers() == {"staying", "leaving"}
        assert stop_with(leaving, signal.SIGTERM) == 0
        assert brokers() == {"staying"}
    finally:
        leaving.stop()
        staying.stop()
