"""What users do to the cluster during a nemesis run, each in a thread of its own, each operation
and its outcome written to the history: producers (some with sharding keys, sent in order one at a
time), a group consuming concurrently, a group consuming in order, a pop consumer, and a sampler of
every broker's role and epoch."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson

from app.client import GroupConsumer, OutgoingMessage, Producer, RouteCache
from app.client.errors import BrokerError, BrokerUnavailableError, WharfClientError
from tests.chaos.cluster import TOPIC, Cluster
from tests.chaos.history import History

CLIENT_ERRORS = (
    httpx.HTTPError,
    BrokerError,
    BrokerUnavailableError,
    WharfClientError,
    KeyError,
    LookupError,
)
GROUPS = {"g1": "group", "o1": "ordered", "p1": "pop"}
KEYS_PER_PRODUCER = 3
BATCH = 10
POP_INVISIBLE_MS = 5_000


class Workload:
    def __init__(self, cluster: Cluster, history: History) -> None:
        self.cluster = cluster
        self.history = history
        self.producing = threading.Event()
        self.stopping = threading.Event()
        self.acknowledged: set[str] = set()
        self.delivered: dict[str, set[str]] = {group: set() for group in GROUPS}
        self.names = {node.url: node.name for node in cluster.nodes}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.history.add("groups", groups=GROUPS)
        self.producing.set()
        runs: list[tuple[str, Callable[[], None]]] = [
            ("producer-1", lambda: self._produce("producer-1")),
            ("keyed-1", lambda: self._produce_keyed("keyed-1")),
            ("keyed-2", lambda: self._produce_keyed("keyed-2")),
            ("g1-1", lambda: self._consume("g1-1", "g1", "concurrently")),
            ("g1-2", lambda: self._consume("g1-2", "g1", "concurrently")),
            ("o1-1", lambda: self._consume("o1-1", "o1", "orderly")),
            ("o1-2", lambda: self._consume("o1-2", "o1", "orderly")),
            ("p1-1", lambda: self._pop("p1-1", "p1")),
            ("sampler", self._sample),
        ]
        for name, run in runs:
            thread = threading.Thread(target=run, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop_producing(self) -> None:
        self.producing.clear()

    def missing(self) -> dict[str, int]:
        """How many acknowledged messages each group has not received yet."""
        with self._lock:
            return {group: len(self.acknowledged - delivered) for group, delivered in self.delivered.items()}

    def drain(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not any(self.missing().values()):
                return True
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        self.producing.clear()
        self.stopping.set()
        for thread in self._threads:
            thread.join(30)

    # -- producers -------------------------------------------------------------------------------

    def _acked(self, message_id: str, status: str) -> None:
        if status == "SEND_OK":
            with self._lock:
                self.acknowledged.add(message_id)

    def _send(
        self,
        producer: Producer,
        process: str,
        batch: list[tuple[str, str | None, int | None]],
        key: str | None,
    ) -> bool:
        """Send ``batch`` ((id, key, seq) each) and record each message's outcome; True when every
        one was answered SEND_OK."""
        messages = [
            OutgoingMessage(
                orjson.dumps({"id": message_id, "key": k, "seq": seq}),
                keys=[message_id],
                unique_id=message_id,
            )
            for message_id, k, seq in batch
        ]
        try:
            results = producer.send_batch(TOPIC, messages, sharding_key=key)
        except CLIENT_ERRORS as error:
            for message_id, k, seq in batch:
                self.history.add(
                    "send", process=process, id=message_id, key=k, seq=seq, status="error",
                    broker_name=None, queue_id=None, queue_offset=None, error=str(error)[:200],
                )  # fmt: skip
            return False
        for (message_id, k, seq), result in zip(batch, results, strict=True):
            self.history.add(
                "send", process=process, id=message_id, key=k, seq=seq, status=result.status,
                broker_name=result.broker_name, queue_id=result.queue_id,
                queue_offset=result.queue_offset, error=None,
            )  # fmt: skip
            self._acked(message_id, result.status)
        return all(result.status == "SEND_OK" for result in results)

    def _produce(self, process: str) -> None:
        with Producer(self.cluster.bootstrap, timeout_s=3.0, route_ttl_s=1.0) as producer:
            number = 0
            while self.producing.is_set():
                batch = [(f"{process}-{number}-{i}", None, None) for i in range(BATCH)]
                number += 1
                if not self._send(producer, process, batch, None):
                    time.sleep(0.1)
                time.sleep(0.03)

    def _produce_keyed(self, process: str) -> None:
        """Per key, message n+1 only once message n was answered SEND_OK; a message answered
        anything else is sent again with the same id."""
        keys = [f"{process}-k{n}" for n in range(KEYS_PER_PRODUCER)]
        seqs = dict.fromkeys(keys, 0)
        with Producer(self.cluster.bootstrap, timeout_s=3.0, route_ttl_s=1.0) as producer:
            turn = 0
            while self.producing.is_set():
                key = keys[turn % len(keys)]
                turn += 1
                seq = seqs[key]
                if self._send(producer, process, [(f"{key}-{seq}", key, seq)], key):
                    seqs[key] = seq + 1
                else:
                    time.sleep(0.1)
                time.sleep(0.01)

    # -- consumers -------------------------------------------------------------------------------

    def _deliver(self, process: str, group: str, mode: str, address: str, message: dict[str, Any]) -> None:
        body = orjson.loads(message["body"])
        self.history.add(
            "deliver", process=process, group=group, mode=mode, id=body["id"], key=body["key"],
            seq=body["seq"], broker_name=self.names.get(address), queue_id=message["queue_id"],
            queue_offset=message["queue_offset"], reconsume_times=message.get("reconsume_times", 0),
        )  # fmt: skip
        with self._lock:
            self.delivered[group].add(body["id"])

    def _consume(self, process: str, group: str, consume_mode: str) -> None:
        mode = "ordered" if consume_mode == "orderly" else "group"
        consumer: GroupConsumer | None = None
        assignments: object = None
        while not self.stopping.is_set():
            try:
                if consumer is None:
                    consumer = GroupConsumer(
                        self.cluster.bootstrap, group, {TOPIC: "*"}, client_id=process,
                        consume_from="first", consume_mode=consume_mode, timeout_s=3.0,
                    )  # fmt: skip
                batch = consumer.poll(max_messages=64, max_wait_ms=300)
                if consumer.assignments != assignments:
                    assignments = {address: list(queues) for address, queues in consumer.assignments.items()}
                    self.history.add(
                        "rebalance", process=process, group=group, generation=batch.generation,
                        queues=sorted(f"{self.names.get(a)}:{q['queue_id']}" for a, qs in assignments.items() for q in qs),
                    )  # fmt: skip
                for message in batch.messages:
                    self._deliver(process, group, mode, batch.address, message)
                if batch.offsets:
                    ok = consumer.commit(batch)
                    self.history.add("commit", process=process, group=group, ok=ok, reason=None)
            except CLIENT_ERRORS as error:
                self.history.add("commit", process=process, group=group, ok=False, reason=str(error)[:200])
                time.sleep(0.2)
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close()

    def _pop(self, process: str, group: str) -> None:
        with httpx.Client(timeout=5.0) as http:
            routes = RouteCache(http, self.cluster.bootstrap)
            while not self.stopping.is_set():
                try:
                    addresses = sorted(
                        {queue.address for queue in routes.get(TOPIC, refresh=True).read_queues}
                    )
                    for address in addresses:
                        self._pop_once(http, process, group, address)
                except CLIENT_ERRORS:
                    time.sleep(0.2)

    def _pop_once(self, http: httpx.Client, process: str, group: str, address: str) -> None:
        answer = http.post(
            f"{address}/v1/groups/{group}/topics/{TOPIC}/pop",
            json={
                "max_messages": 32,
                "max_wait_ms": 200,
                "invisible_ms": POP_INVISIBLE_MS,
                "consume_from": "first",
            },
        )
        if answer.status_code != 200:
            time.sleep(0.2)
            return
        messages = answer.json()["messages"]
        for message in messages:
            self._deliver(process, group, "pop", address, message)
        if not messages:
            return
        handles = [message["receipt_handle"] for message in messages]
        acked = http.post(
            f"{address}/v1/groups/{group}/topics/{TOPIC}/ack", json={"receipt_handles": handles}
        )
        statuses = (
            [result["status"] for result in acked.json()["results"]]
            if acked.status_code == 200
            else ["failed"] * len(messages)
        )
        for message, status in zip(messages, statuses, strict=True):
            self.history.add(
                "ack", process=process, group=group, id=orjson.loads(message["body"])["id"], ok=status == "ok"
            )

    # -- the cluster's view of itself ------------------------------------------------------------

    def _sample(self) -> None:
        seen: dict[str, tuple[object, object]] = {}
        while not self.stopping.is_set():
            for node in self.cluster.nodes:
                status = node.ha(timeout_s=0.5)
                if status is None:
                    continue
                observed = (status["role"], status["epoch"])
                if seen.get(node.label) != observed:
                    seen[node.label] = observed
                    self.history.add(
                        "ha", broker_name=node.name, broker_id=node.broker_id,
                        role=status["role"], epoch=status["epoch"],
                    )  # fmt: skip
            time.sleep(0.25)
