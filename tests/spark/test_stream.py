"""Structured Streaming from a topic: new messages reach a running query, and checkpoints resume."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from tests.api.server import BrokerProcess
from tests.spark.conftest import make_topic, produce

pytestmark = pytest.mark.slow


class Collected:
    """A foreachBatch sink that keeps (queue_id, queue_offset, body) of every row it was given."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, bytes]] = []
        self.batches = 0
        self._lock = threading.Lock()

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = [(r["queue_id"], r["queue_offset"], bytes(r["body"])) for r in frame.collect()]
        with self._lock:
            self.rows.extend(rows)
            self.batches += 1


@pytest.fixture
def start(spark: SparkSession, broker: BrokerProcess, tmp_path: Path) -> Iterator[Any]:
    queries: list[StreamingQuery] = []

    def start_query(
        topic: str, sink: Collected, checkpoint: str = "checkpoint", **options: str
    ) -> StreamingQuery:
        reader = spark.readStream.format("wharf").option("url", broker.url).option("topic", topic)
        for name, value in options.items():
            reader = reader.option(name, value)
        query = (
            reader.load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        queries.append(query)
        return query

    yield start_query
    for query in queries:
        query.stop()


def bodies(rows: list[tuple[int, int, bytes]]) -> list[bytes]:
    return sorted(row[2] for row in rows)


def test_a_running_query_picks_up_messages_produced_after_it_started(
    client: httpx.Client, topic: str, start: Any
) -> None:
    produce(client, topic, [{"body": "before"}])
    sink = Collected()
    query = start(topic, sink)  # startingOffsets defaults to latest
    query.processAllAvailable()
    assert sink.rows == []
    produced = produce(client, topic, [{"body": f"after-{i}"} for i in range(10)])
    query.processAllAvailable()
    assert bodies(sink.rows) == sorted(f"after-{i}".encode() for i in range(10))
    assert {(row[0], row[1]) for row in sink.rows} == {(r["queue_id"], r["queue_offset"]) for r in produced}
    progress = query.lastProgress
    assert progress is not None and progress["sources"][0]["endOffset"] is not None


def test_a_restarted_query_resumes_from_its_checkpoint(client: httpx.Client, topic: str, start: Any) -> None:
    first_sink = Collected()
    first = start(topic, first_sink, startingOffsets="earliest")
    produce(client, topic, [{"body": f"one-{i}"} for i in range(6)])
    first.processAllAvailable()
    first.stop()
    produce(client, topic, [{"body": f"two-{i}"} for i in range(5)])
    second_sink = Collected()
    second = start(topic, second_sink, startingOffsets="earliest")
    second.processAllAvailable()
    assert bodies(first_sink.rows) == sorted(f"one-{i}".encode() for i in range(6))
    assert bodies(second_sink.rows) == sorted(f"two-{i}".encode() for i in range(5))


def test_max_offsets_per_trigger_caps_each_micro_batch(client: httpx.Client, topic: str, start: Any) -> None:
    produce(client, topic, [{"body": f"m{i}", "queue_id": i % 2} for i in range(20)])
    sink = Collected()
    query = start(topic, sink, startingOffsets="earliest", maxOffsetsPerTrigger="6")
    query.processAllAvailable()
    assert bodies(sink.rows) == sorted(f"m{i}".encode() for i in range(20))
    assert sink.batches >= 4
    assert all(progress["numInputRows"] <= 6 for progress in query.recentProgress)


def test_tags_option_filters_the_stream(client: httpx.Client, topic: str, start: Any) -> None:
    sink = Collected()
    query = start(topic, sink, startingOffsets="earliest", tags="keep")
    produce(client, topic, [{"body": f"m{i}", "tags": "keep" if i % 3 == 0 else "drop"} for i in range(12)])
    query.processAllAvailable()
    assert bodies(sink.rows) == sorted(f"m{i}".encode() for i in range(0, 12, 3))


def test_a_stream_can_be_written_to_another_topic(
    spark: SparkSession, broker: BrokerProcess, client: httpx.Client, topic: str, tmp_path: Path
) -> None:
    target = make_topic(client, "stream-target")
    query = (
        spark.readStream.format("wharf")
        .option("url", broker.url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select("body", "tags", "keys")
        .writeStream.format("wharf")
        .option("url", broker.url)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "copy"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        produce(client, topic, [{"body": f"m{i}", "tags": "t", "keys": [f"k{i}"]} for i in range(15)])
        query.processAllAvailable()
    finally:
        query.stop()
    copied = client.get(f"/v1/topics/{target}/queues").json()["queues"]
    messages = []
    for queue in copied:
        answer = client.get(
            f"/v1/topics/{target}/queues/{queue['queue_id']}/messages",
            params={"offset": 0, "max_messages": 100},
        ).json()
        messages.extend(answer["messages"])
    assert sorted((m["body"], m["tags"], m["keys"]) for m in messages) == sorted(
        (f"m{i}", "t", [f"k{i}"]) for i in range(15)
    )
