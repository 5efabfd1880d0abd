"""Batch reads through the ``wharf`` data source against a live broker: exact rows per range."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from spark_jobs.errors import DataLossError
from spark_jobs.options import ReadOptions
from spark_jobs.planning import OffsetRange
from spark_jobs.reader import read_range
from spark_jobs.schema import SCHEMA
from tests.api.server import BrokerProcess
from tests.spark.conftest import make_topic, produce

pytestmark = pytest.mark.slow

Reader = Callable[..., DataFrame]


def fill(
    client: httpx.Client, topic: str, per_queue: dict[int, int]
) -> dict[tuple[int, int], dict[str, Any]]:
    """Produce ``per_queue[q]`` messages into queue q; the expected row of each (queue, offset)."""
    messages = []
    for queue_id, count in per_queue.items():
        for index in range(count):
            messages.append(
                {
                    "body": f"q{queue_id}-m{index}",
                    "queue_id": queue_id,
                    "tags": "even" if index % 2 == 0 else "odd",
                    "keys": [f"k{queue_id}", f"i{index}"],
                    "properties": {"index": str(index)},
                }
            )
    results = produce(client, topic, messages)
    expected = {}
    for message, result in zip(messages, results, strict=True):
        expected[(result["queue_id"], result["queue_offset"])] = {
            "body": message["body"].encode(),
            "tags": message["tags"],
            "keys": message["keys"],
            "properties": message["properties"],
            "msg_id": result["msg_id"],
            "unique_id": result["unique_id"],
        }
    return expected


def rows_by_position(frame: DataFrame) -> dict[tuple[int, int], Any]:
    rows = frame.collect()
    by_position = {(row["queue_id"], row["queue_offset"]): row for row in rows}
    assert len(by_position) == len(rows), "a message was read twice"
    return by_position


def positions(frame: DataFrame) -> set[tuple[int, int]]:
    return set(rows_by_position(frame))


def test_reads_every_message_of_every_queue_with_its_fields(
    client: httpx.Client, topic: str, wharf: Reader
) -> None:
    expected = fill(client, topic, {0: 7, 1: 3, 2: 0, 3: 12})
    frame = wharf(topic)
    assert frame.schema == SCHEMA
    rows = rows_by_position(frame)
    assert set(rows) == set(expected)
    for position, row in rows.items():
        want = expected[position]
        assert row["topic"] == topic
        assert row["broker"] == "broker-a"
        assert bytes(row["body"]) == want["body"]
        assert row["tags"] == want["tags"]
        assert row["keys"] == want["keys"]
        assert row["properties"] == want["properties"]
        assert row["msg_id"] == want["msg_id"]
        assert row["unique_id"] == want["unique_id"]
        assert row["born_timestamp"] <= row["store_timestamp"]
        assert row["reconsume_times"] == 0


def test_one_partition_per_queue_range_and_min_partitions_splits_them(
    client: httpx.Client, topic: str, wharf: Reader
) -> None:
    expected = fill(client, topic, {0: 40, 1: 10, 2: 0, 3: 0})
    assert wharf(topic).rdd.getNumPartitions() == 2  # the empty queues plan nothing
    split = wharf(topic, minPartitions=10, maxMessagesPerPull=3)
    assert split.rdd.getNumPartitions() == 10
    assert positions(split) == set(expected)


def test_json_offsets_read_exact_ranges(client: httpx.Client, topic: str, wharf: Reader) -> None:
    fill(client, topic, {0: 10, 1: 10, 2: 10, 3: 10})
    frame = wharf(
        topic,
        startingOffsets=json.dumps({topic: {"0": 3, "1": -2, "2": 10}}),
        endingOffsets='{"0": 7, "1": 2, "3": -1}',
    )
    assert positions(frame) == (
        {(0, offset) for offset in range(3, 7)}
        | {(1, 0), (1, 1)}
        | {(3, offset) for offset in range(10)}  # queue 3: earliest to latest; queue 2: 10..10
    )


def test_ending_offsets_latest_is_fixed_when_the_query_is_planned(
    client: httpx.Client, topic: str, wharf: Reader
) -> None:
    fill(client, topic, {0: 5, 1: 0, 2: 0, 3: 0})
    frame = wharf(topic, endingOffsets='{"0": 4}')
    fill(client, topic, {0: 3, 1: 0, 2: 0, 3: 0})
    assert positions(frame) == {(0, offset) for offset in range(4)}


def test_starting_timestamp_reads_from_the_first_message_stored_at_or_after_it(
    client: httpx.Client, topic: str, wharf: Reader
) -> None:
    fill(client, topic, {0: 4, 1: 4, 2: 0, 3: 0})
    first_batch_ms = max(
        q["last_store_timestamp"] or 0 for q in client.get(f"/v1/topics/{topic}/queues").json()["queues"]
    )
    while time.time() * 1000 <= first_batch_ms + 1:
        time.sleep(0.001)  # the next messages must carry a later store timestamp
    later = fill(client, topic, {0: 2, 1: 0, 2: 3, 3: 0})
    assert positions(wharf(topic, startingTimestamp=first_batch_ms + 1)) == set(later)
    assert positions(wharf(topic, startingTimestamp=0, endingTimestamp=first_batch_ms + 1)) == {
        (queue_id, offset) for queue_id in (0, 1) for offset in range(4)
    }


def test_tags_option_becomes_the_pull_filter(client: httpx.Client, topic: str, wharf: Reader) -> None:
    expected = fill(client, topic, {0: 9, 1: 4, 2: 0, 3: 1})
    frame = wharf(topic, tags="odd", maxMessagesPerPull=2)
    assert positions(frame) == {position for position, row in expected.items() if row["tags"] == "odd"}
    assert wharf(topic, tags="*").count() == len(expected)


def _pushed(frame: DataFrame) -> str:
    """The executed plan's text: a pushed filter no longer appears in a Filter above the scan."""
    return str(frame._jdf.queryExecution().executedPlan().toString())


def test_filters_on_tags_queue_and_offset_are_pushed_into_the_read(
    client: httpx.Client, topic: str, wharf: Reader
) -> None:
    expected = fill(client, topic, {0: 9, 1: 4, 2: 6, 3: 1})
    frame = wharf(topic, pushFilters="true")
    tagged = frame.filter("tags = 'even'")
    assert "= even" not in _pushed(tagged)
    assert positions(tagged) == {p for p, row in expected.items() if row["tags"] == "even"}
    narrowed = frame.filter(
        "tags in ('odd', 'none') and queue_id in (0, 2) and queue_offset >= 2 and queue_offset < 7"
    )
    assert narrowed.rdd.getNumPartitions() == 2
    assert positions(narrowed) == {
        (queue_id, offset)
        for (queue_id, offset), row in expected.items()
        if row["tags"] == "odd" and queue_id in (0, 2) and 2 <= offset < 7
    }
    # A filter the broker cannot express stays with Spark and still holds.
    unpushed = frame.filter("tags like 'ev%' and queue_id = 3")
    assert positions(unpushed) == {(3, 0)}
    assert frame.filter("tags = 'even' and tags = 'odd'").count() == 0


def test_a_user_schema_selects_columns(
    client: httpx.Client, spark: SparkSession, broker: BrokerProcess, topic: str
) -> None:
    fill(client, topic, {0: 2, 1: 0, 2: 0, 3: 0})
    frame = (
        spark.read.format("wharf")
        .schema("queue_offset bigint, body binary")
        .option("url", broker.url)
        .option("topic", topic)
        .load()
    )
    assert sorted((row[0], bytes(row[1])) for row in frame.collect()) == [(0, b"q0-m0"), (1, b"q0-m1")]


def test_an_empty_topic_reads_no_rows(client: httpx.Client, topic: str, wharf: Reader) -> None:
    frame = wharf(topic)
    assert frame.count() == 0
    assert frame.schema == SCHEMA


def test_an_unknown_topic_fails_the_query_with_the_brokers_answer(wharf: Reader) -> None:
    with pytest.raises(PySparkException, match="not found"):
        wharf("no-such-topic").count()


def test_several_brokers_are_read_through_the_route(
    spark: SparkSession, two_brokers: tuple[BrokerProcess, BrokerProcess]
) -> None:
    first, second = two_brokers
    with httpx.Client(timeout=30.0) as http:
        for process, count in ((first, 3), (second, 5)):
            produced = http.post(
                f"{process.url}/v1/topics/spread/messages",
                json={"messages": [{"body": f"{process.port}-{i}"} for i in range(count)]},
            )
            assert produced.status_code == 200, produced.text
    frame = (
        spark.read.format("wharf")
        .option("url", first.url)
        .option("topic", "spread")
        .option("startingOffsets", '{"broker-b:0": 1}')
        .load()
    )
    rows = frame.select("broker", "queue_id", "queue_offset", "body").collect()
    got = sorted((row["broker"], row["queue_id"], row["queue_offset"], bytes(row["body"])) for row in rows)
    assert [row[:3] for row in got] == [
        ("broker-a", 0, 0),
        ("broker-a", 0, 1),
        ("broker-a", 1, 0),
        ("broker-b", 0, 1),
        ("broker-b", 0, 2),
        ("broker-b", 1, 0),
        ("broker-b", 1, 1),
    ]
    assert {row[3].split(b"-")[0] for row in got if row[0] == "broker-b"} == {str(second.port).encode()}


@pytest.fixture(scope="module")
def trimmed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A live broker whose oldest CommitLog segments retention deleted: an admin asked it to clean,
    with no reserved time and two segments a pass, so every queue's min offset moved past them."""
    tmp_path = tmp_path_factory.mktemp("trimmed")
    process = BrokerProcess(
        tmp_path / "store",
        commitlog_file_size=4096,
        consumequeue_file_entries=16,
        file_reserved_time_h=0,
        delete_files_max_per_pass=2,
        destroy_forcibly_interval_ms=0,
    ).start()
    try:
        with httpx.Client(base_url=process.url, timeout=30.0) as http:
            topic = make_topic(http, "trimmed", queues=2)
            produce(http, topic, [{"body": "x" * 100 + str(i), "queue_id": i % 2} for i in range(120)])
            assert len(list((tmp_path / "store" / "commitlog").iterdir())) > 3
            report = http.post("/v1/admin/clean").json()
            assert report["commitlog_segments"] == 2, report
            queues = http.get(f"/v1/topics/{topic}/queues").json()["queues"]
        assert all(0 < queue["min_offset"] < queue["max_offset"] == 60 for queue in queues)
        yield process, topic, {queue["queue_id"]: queue["min_offset"] for queue in queues}
    finally:
        process.stop()


def test_deleted_segments_earliest_reads_what_is_left(trimmed: Any, wharf: Reader) -> None:
    process, topic, first = trimmed
    assert positions(wharf(topic, url=process.url)) == {
        (queue_id, offset) for queue_id in (0, 1) for offset in range(first[queue_id], 60)
    }


def test_deleted_segments_fail_a_read_planned_from_before_them(trimmed: Any, wharf: Reader) -> None:
    process, topic, first = trimmed
    with pytest.raises(PySparkException, match="deleted by retention"):
        wharf(topic, url=process.url, startingOffsets='{"0": 0, "1": 0}').count()
    skipped = wharf(topic, url=process.url, startingOffsets='{"0": 0, "1": 0}', failOnDataLoss="false")
    assert positions(skipped) == {(q, offset) for q in (0, 1) for offset in range(first[q], 60)}


def test_a_range_deleted_after_planning_fails_or_skips_on_the_executor(trimmed: Any) -> None:
    process, topic, first = trimmed
    piece = OffsetRange(topic, "", process.url, 0, 0, 60)
    strict = ReadOptions.parse({"url": process.url, "topic": topic, "maxMessagesPerPull": "7"})
    with pytest.raises(DataLossError, match=rf"offsets 0\.\.{first[0] - 1} are no longer stored"):
        list(read_range(piece, strict, SCHEMA, None))
    lenient = ReadOptions.parse({"url": process.url, "topic": topic, "failOnDataLoss": "false"})
    batches = list(read_range(piece, lenient, SCHEMA, None))
    offsets = [offset for batch in batches for offset in batch.column("queue_offset").to_pylist()]
    assert offsets == list(range(first[0], 60))
