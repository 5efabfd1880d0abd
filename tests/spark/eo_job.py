"""Spark jobs the exactly-once tests run in their own process (a driver to SIGKILL, a session of its
own): ``python -m tests.spark.eo_job batch|stream ...``.

``--hold before|after``: the writer's commit of the first write (batch) or of micro-batch
``--hold-batch`` (stream) writes ``--marker`` and then waits forever - before committing (the
driver dies between the tasks' writes and its commit) or after (the driver dies between the
commit and Spark's checkpoint): the test SIGKILLs the process group then.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from spark_jobs.datasource import WharfDataSource
from spark_jobs.options import WriteOptions
from spark_jobs.session import wharf_session
from spark_jobs.writer import WharfStreamWriter, WharfWriter


def hold(marker: str, what: str) -> None:
    Path(marker).write_text(what)
    while True:
        time.sleep(1)


def failing(batches: Iterator[Any], after_rows: int, partition: int) -> Iterator[Any]:
    """``batches``, failing once ``after_rows`` rows were taken by the writer (which has stored
    some of them as transactions by then): in the first attempt of every task when ``partition``
    is -1, else in every attempt of that partition."""
    context = TaskContext.get()
    assert context is not None
    fails = context.attemptNumber() == 0 if partition < 0 else context.partitionId() == partition
    passed = 0
    for batch in batches:
        if fails and passed >= after_rows:
            raise RuntimeError(f"the task fails after {passed} rows")
        yield batch
        passed += batch.num_rows
    if fails:
        raise RuntimeError(f"the task fails after {passed} rows")


class HeldWriter(WharfWriter):
    hold_when: str = ""
    marker: str = ""
    fail_after: int = -1
    fail_partition: int = -1

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        if self.fail_after >= 0:
            iterator = failing(iterator, self.fail_after, self.fail_partition)
        return super().write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.hold_when == "before":
            hold(self.marker, "before")
        super().commit(messages)
        if self.hold_when == "after":
            hold(self.marker, "after")


class HeldStreamWriter(WharfStreamWriter):
    hold_when: str = ""
    hold_batch: int = 0
    marker: str = ""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        held = batchId == self.hold_batch and self.hold_when
        if held == "before":
            hold(self.marker, f"before {batchId}")
        super().commit(messages, batchId)
        if held == "after":
            hold(self.marker, f"after {batchId}")


class HeldSource(WharfDataSource):
    """``wharf_held``: the wharf source whose writers hold (``hold``, ``marker``, ``holdBatch``) or
    fail (``failAfter`` rows, in ``failPartition`` or in every first attempt) as the options say."""

    @classmethod
    def name(cls) -> str:
        return "wharf_held"

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        writer = HeldWriter(WriteOptions.parse(self.options), schema, overwrite)
        writer.hold_when = self.options.get("hold", "")
        writer.marker = self.options.get("marker", "")
        writer.fail_after = int(self.options.get("failafter", "-1"))
        writer.fail_partition = int(self.options.get("failpartition", "-1"))
        return writer

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        writer = HeldStreamWriter(WriteOptions.parse(self.options), schema)
        writer.hold_when = self.options.get("hold", "")
        writer.hold_batch = int(self.options.get("holdbatch", "0"))
        writer.marker = self.options.get("marker", "")
        return writer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("batch", "stream"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--source", help="stream: the topic read")
    parser.add_argument("--rows", type=int, default=1000, help="batch: rows written")
    parser.add_argument("--checkpoint")
    parser.add_argument("--group", default="")
    parser.add_argument("--guarantee", default="exactly_once")
    parser.add_argument("--hold", default="")
    parser.add_argument("--hold-batch", default="0")
    parser.add_argument("--marker", default="")
    parser.add_argument("--batch-size", default="100")
    parser.add_argument("--per-trigger", default="500")
    args = parser.parse_args()
    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}
    spark: SparkSession = wharf_session("wharf-exactly-once", "local[2,4]", **conf)
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(HeldSource)
    options = {
        "url": args.url,
        "topic": args.target,
        "deliveryGuarantee": args.guarantee,
        "batchSize": args.batch_size,
        "hold": args.hold,
        "holdBatch": args.hold_batch,
        "marker": args.marker,
    }
    if args.group:
        options["producerGroup"] = args.group
    if args.mode == "batch":
        frame = spark.range(args.rows, numPartitions=4).selectExpr("concat('row-', id) AS body")
        frame.write.format("wharf_held").options(**options).mode("append").save()
        return
    stream = (
        spark.readStream.format("wharf")
        .option("url", args.url)
        .option("topic", args.source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.per_trigger)
        .load()
        .select("body")
    )
    query = (
        stream.writeStream.format("wharf_held")
        .options(**options)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )
    query.processAllAvailable()
    query.stop()


if __name__ == "__main__":
    main()
