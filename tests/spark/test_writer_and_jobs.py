"""Writing DataFrames to topics, and the example jobs end to end against a live broker."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from spark_jobs import export_parquet, tag_counts
from tests.api.server import BrokerProcess
from tests.spark.conftest import make_topic, produce

pytestmark = pytest.mark.slow


def pull_all(client: httpx.Client, topic: str) -> list[dict[str, object]]:
    messages = []
    for queue in client.get(f"/v1/topics/{topic}/queues").json()["queues"]:
        offset = queue["min_offset"]
        while offset < queue["max_offset"]:
            answer = client.get(
                f"/v1/topics/{topic}/queues/{queue['queue_id']}/messages",
                params={"offset": offset, "max_messages": 500},
            ).json()
            messages.extend(answer["messages"])
            offset = answer["next_offset"]
    return messages


def test_rows_become_messages_with_their_fields(
    spark: SparkSession, broker: BrokerProcess, client: httpx.Client, topic: str
) -> None:
    rows = [(f"body-{i}".encode(), f"tag{i % 3}", [f"key-{i}"], {"n": str(i)}, i % 2) for i in range(2500)]
    frame = spark.createDataFrame(
        rows, "body binary, tags string, keys array<string>, properties map<string,string>, queue_id int"
    ).repartition(3)
    frame.write.format("wharf").option("url", broker.url).option("topic", topic).option(
        "batchSize", "400"
    ).mode("append").save()
    stored = pull_all(client, topic)
    assert sorted(
        (m["body"], m["tags"], m["keys"], m["properties"], m["queue_id"]) for m in stored
    ) == sorted((body.decode(), tags, keys, props, queue_id) for body, tags, keys, props, queue_id in rows)


def test_a_write_routes_like_a_producer_over_every_broker_of_the_topic(
    spark: SparkSession, two_brokers: tuple[BrokerProcess, BrokerProcess]
) -> None:
    first, second = two_brokers
    # Half the rows carry one of three sharding keys; the others go wherever the producer turns next.
    rows = [(f"row-{i}", f"key-{i % 3}" if i % 2 else None) for i in range(40)]
    frame = spark.createDataFrame(rows, "body string, sharding_key string").coalesce(1)
    # Only the first broker is named: the route sends batches to the second one as well.
    frame.write.format("wharf").option("url", first.url).option("topic", "spread").option(
        "batchSize", "5"
    ).mode("append").save()
    key_of = dict(rows)
    places: dict[str | None, set[tuple[str, int]]] = {}
    for process in (first, second):
        with httpx.Client(base_url=process.url, timeout=30.0) as http:
            stored = pull_all(http, "spread")
        assert stored, f"nothing was written to {process.url}"
        for message in stored:
            places.setdefault(key_of.pop(str(message["body"])), set()).add(
                (process.url, int(message["queue_id"]))
            )
    assert key_of == {}, "rows were lost or stored twice"
    keyed = {key: where for key, where in places.items() if key is not None}
    assert len(keyed) == 3 and all(len(where) == 1 for where in keyed.values()), keyed


def test_a_read_frame_can_be_copied_to_another_topic(
    spark: SparkSession, broker: BrokerProcess, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, [{"body": f"m{i}", "tags": "t", "keys": ["k"]} for i in range(30)])
    target = make_topic(client, "copy-target")
    source = spark.read.format("wharf").option("url", broker.url).option("topic", topic).load()
    source.drop("unique_id", "queue_id").write.format("wharf").option("url", broker.url).option(
        "topic", target
    ).mode("append").save()
    assert sorted(m["body"] for m in pull_all(client, target)) == sorted(f"m{i}" for i in range(30))


def test_a_write_refuses_overwrite_and_unknown_columns(
    spark: SparkSession, broker: BrokerProcess, topic: str
) -> None:
    frame = spark.createDataFrame([("x", 1)], "body string, colour int")
    with pytest.raises(PySparkException, match="colour"):
        frame.write.format("wharf").option("url", broker.url).option("topic", topic).mode("append").save()
    with pytest.raises(PySparkException, match="append-only"):
        frame.select("body").write.format("wharf").option("url", broker.url).option("topic", topic).mode(
            "overwrite"
        ).save()


def test_export_parquet_writes_every_message_partitioned_by_date(
    spark: SparkSession, broker: BrokerProcess, client: httpx.Client, topic: str, tmp_path: Path
) -> None:
    produced = produce(client, topic, [{"body": f"m{i}", "tags": "a"} for i in range(50)])
    output = tmp_path / "export"
    args = export_parquet.parse_args(["--url", broker.url, "--topic", topic, "--output", str(output)])
    summary = export_parquet.export(spark, args)
    assert summary["rows"] == 50
    ending = {f"broker-a:{r['queue_id']}": 0 for r in produced}
    for result in produced:
        key = f"broker-a:{result['queue_id']}"
        ending[key] = max(ending[key], result["queue_offset"] + 1)
    assert summary["ending_offsets"] == {topic: ending}
    stored_dates = {
        datetime.fromtimestamp(m["store_timestamp"] / 1000, UTC).date() for m in pull_all(client, topic)
    }
    assert sorted(path.name for path in output.iterdir() if path.name.startswith("date=")) == sorted(
        f"date={day.isoformat()}" for day in stored_dates
    )
    exported = spark.read.parquet(str(output))
    assert sorted(bytes(row["body"]) for row in exported.collect()) == sorted(
        f"m{i}".encode() for i in range(50)
    )
    assert {row["date"] for row in exported.select("date").distinct().collect()} == stored_dates


def test_tag_counts_counts_by_tag_and_minute_into_a_topic_and_a_table(
    spark: SparkSession, broker: BrokerProcess, client: httpx.Client, topic: str, tmp_path: Path
) -> None:
    produce(client, topic, [{"body": str(i), "tags": ["red", "blue", ""][i % 3] or None} for i in range(30)])
    stored = pull_all(client, topic)
    expected: dict[tuple[str, str], int] = {}
    for message in stored:
        minute = datetime.fromtimestamp(message["store_timestamp"] / 1000, UTC).strftime("%Y-%m-%dT%H:%MZ")
        expected[(message["tags"], minute)] = expected.get((message["tags"], minute), 0) + 1

    counts_topic = make_topic(client, "tag-counts")
    args = tag_counts.parse_args(["--url", broker.url, "--topic", topic, "--output-topic", counts_topic])
    assert tag_counts.run(spark, args) == len(expected)
    written = pull_all(client, counts_topic)
    got = {}
    for message in written:
        row = json.loads(message["body"])
        got[(row["tag"], row["minute"])] = row["count"]
        assert message["tags"] == (row["tag"] or tag_counts.UNTAGGED)
        assert message["keys"] == [row["minute"]]
    assert got == expected

    table = tmp_path / "counts"
    args = tag_counts.parse_args(["--url", broker.url, "--topic", topic, "--output-table", str(table)])
    tag_counts.run(spark, args)
    rows = spark.read.parquet(str(table)).collect()
    assert {(r["tag"], r["minute"].strftime("%Y-%m-%dT%H:%MZ")): r["count"] for r in rows} == expected
