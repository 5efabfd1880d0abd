"""Export a topic to Parquet, partitioned by the UTC date its messages were stored.

    python -m spark_jobs.export_parquet --url http://127.0.0.1:8080 --topic orders --output /data/orders
    spark-submit spark_jobs/export_parquet.py --url ... --topic orders --output /data/orders

The output has the source's columns plus ``date`` (the partition column); re-running with
``--starting-offsets`` as JSON continues where an earlier export stopped (the job prints the
ending offsets it read to, as JSON, for exactly that).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.session import job_arguments, topic_reader, wharf_session


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = job_arguments("export_parquet", __doc__.split("\n")[0])
    parser.add_argument("--output", required=True, help="Parquet directory (a path or URI Spark can write)")
    parser.add_argument("--mode", default="append", choices=["append", "overwrite"])
    parser.add_argument("--min-partitions", type=int, default=None)
    return parser.parse_args(argv)


def read_topic(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    reader = topic_reader(spark, args)
    if args.min_partitions:
        reader = reader.option("minPartitions", str(args.min_partitions))
    return reader.load()


def export(spark: SparkSession, args: argparse.Namespace) -> dict[str, object]:
    """Write the topic's messages under ``args.output``; returns the row count and the offsets read to."""
    frame = read_topic(spark, args).withColumn("date", F.to_date(F.col("store_timestamp")))
    frame.cache()
    try:
        frame.write.mode(args.mode).partitionBy("date").parquet(args.output)
        summary = frame.groupBy("broker", "queue_id").agg(
            F.count(F.lit(1)).alias("rows"), F.max("queue_offset").alias("last")
        )
        rows = 0
        ending: dict[str, int] = {}
        for row in summary.collect():
            rows += row["rows"]
            key = f"{row['broker']}:{row['queue_id']}" if row["broker"] else str(row["queue_id"])
            ending[key] = row["last"] + 1
    finally:
        frame.unpersist()
    return {"rows": rows, "ending_offsets": {args.topic: ending}}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # Dates are UTC dates whatever the machine's zone.
    spark = wharf_session("wharf-export-parquet", args.master, **{"spark.sql.session.timeZone": "UTC"})
    try:
        print(json.dumps(export(spark, args)))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
