"""Count a topic's messages by tag and minute, and write the counts to a topic or a Parquet table.

    python -m spark_jobs.tag_counts --url http://127.0.0.1:8080 --topic orders --output-topic order-counts
    python -m spark_jobs.tag_counts --url http://127.0.0.1:8080 --topic orders --output-table /data/counts

A count row is ``tag`` (empty for untagged messages), ``minute`` (the UTC minute the messages were
stored in) and ``count``. Written to a topic, each row is one message: the row as a JSON body,
tagged with its tag (``untagged`` for none) and keyed by its minute.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.session import job_arguments, topic_reader, wharf_session

UNTAGGED = "untagged"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = job_arguments("tag_counts", __doc__.split("\n")[0])
    output = parser.add_mutually_exclusive_group(required=True)
    output.add_argument("--output-topic", help="produce the counts to this topic (same broker)")
    output.add_argument("--output-table", help="write the counts as Parquet here (overwritten)")
    return parser.parse_args(argv)


def tag_counts(messages: DataFrame) -> DataFrame:
    """Messages per (tag, store minute), ordered by minute then tag."""
    return (
        messages.groupBy(
            F.col("tags").alias("tag"), F.date_trunc("minute", "store_timestamp").alias("minute")
        )
        .count()
        .orderBy("minute", "tag")
    )


def as_messages(counts: DataFrame) -> DataFrame:
    """Count rows shaped for the wharf writer: a JSON body, the tag, the minute as key."""
    minute_text = F.date_format("minute", "yyyy-MM-dd'T'HH:mm'Z'")
    return counts.select(
        F.to_json(F.struct(F.col("tag"), minute_text.alias("minute"), F.col("count"))).alias("body"),
        F.when(F.col("tag") == "", F.lit(UNTAGGED)).otherwise(F.col("tag")).alias("tags"),
        F.array(minute_text).alias("keys"),
    )


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    """Compute and write the counts; returns how many count rows were written."""
    messages = topic_reader(spark, args).load()
    counts = tag_counts(messages).cache()
    try:
        if args.output_topic:
            (
                as_messages(counts)
                .write.format("wharf")
                .option("url", args.url)
                .option("user", args.user or "")
                .option("topic", args.output_topic)
                .mode("append")
                .save()
            )
        else:
            counts.write.mode("overwrite").parquet(args.output_table)
        return counts.count()
    finally:
        counts.unpersist()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    spark = wharf_session("wharf-tag-counts", args.master, **{"spark.sql.session.timeZone": "UTC"})
    try:
        print(f"{run(spark, args)} count rows written")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
