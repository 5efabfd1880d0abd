"""Spark benchmark: rows per second read through the ``wharf`` data source, against local Parquet.

Run from the repository root (Java 17+ and the ``spark`` extra installed)::

    .venv/bin/python -m bench.spark [--messages 1000000] [--repeats 3] [--quick] [--json out.json]

In one run it starts a broker on a temporary store, produces ``--messages`` messages (100-byte
bodies, a tag out of four, one key, one user property) into 4 queues in binary batches, then:

* ``wharf``: a Spark batch read of the whole topic through the data source (``local[*]``), every
  column, into Spark's ``noop`` sink, which consumes every row and writes nothing;
* ``parquet``: the same rows, written once to a local Parquet file by Spark, read back the same way:
  the baseline, what Spark does on this machine when reading costs almost nothing;
* ``executor``: one queue read with the executor's read function alone, in this process, without
  Spark: the part of ``wharf``'s cost that is pulling and decoding.

Each figure is the median of ``--repeats`` reads; the ratio is wharf over parquet.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from pyspark.sql import DataFrame
from wharf_client.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch

from bench import harness
from bench.harness import Result, Stopwatch, print_table
from spark_jobs.options import ReadOptions
from spark_jobs.planning import OffsetRange
from spark_jobs.reader import read_range
from spark_jobs.schema import SCHEMA
from spark_jobs.session import wharf_session
from tests.api.server import BrokerProcess

TOPIC = "bench-spark"
QUEUES = 4
TAGS = ("TagA", "TagB", "TagC", "TagD")
BATCH = 10_000


def produce(url: str, count: int) -> float:
    """Produce ``count`` messages; messages per second."""
    body = b"x" * 100
    with httpx.Client(base_url=url, timeout=120.0) as client:
        created = client.post("/v1/topics", json={"name": TOPIC, "queues": QUEUES})
        created.raise_for_status()
        with Stopwatch() as watch:
            for first in range(0, count, BATCH):
                batch = [
                    IncomingMessage(
                        body=body, tags=TAGS[i % 4], keys=[f"order-{i}"], properties={"n": str(i)}
                    )
                    for i in range(first, min(first + BATCH, count))
                ]
                response = client.post(
                    f"/v1/topics/{TOPIC}/messages",
                    content=encode_batch(batch),
                    headers={"Content-Type": BATCH_MEDIA_TYPE},
                )
                response.raise_for_status()
    return count / watch.seconds


def timed_noop(frame_factory: Callable[[], DataFrame]) -> float:
    with Stopwatch() as watch:
        frame_factory().write.format("noop").mode("overwrite").save()
    return watch.seconds


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = harness.arguments("spark", __doc__, "100,000 messages, 2 repeats", raw=True)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[*]")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.messages, args.repeats = 100_000, 2
    work = Path(tempfile.mkdtemp(prefix="wharf-bench-spark-", dir=Path(__file__).resolve().parent.parent))
    broker = BrokerProcess(
        work / "store", commitlog_file_size=256 * 1024 * 1024, consumequeue_file_entries=300_000
    ).start()
    spark = None
    try:
        produce_rate = produce(broker.url, args.messages)
        print(f"produced {args.messages:,} messages at {produce_rate:,.0f} msg/s", flush=True)
        spark = wharf_session(
            "wharf-bench",
            args.master,
            **{
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.session.timeZone": "UTC",
            },
        )
        spark.sparkContext.setLogLevel("ERROR")

        def wharf() -> DataFrame:
            return spark.read.format("wharf").option("url", broker.url).option("topic", TOPIC).load()

        parquet_path = str(work / "parquet")
        wharf().write.parquet(parquet_path)
        rows = spark.read.parquet(parquet_path).count()
        assert rows == args.messages, f"parquet holds {rows} rows, not {args.messages}"

        def parquet() -> DataFrame:
            return spark.read.parquet(parquet_path)

        timed_noop(wharf)  # warm the Python workers and the JVM once
        timed_noop(parquet)
        wharf_samples, parquet_samples = [], []
        for _ in range(args.repeats):  # interleaved, so both see the same machine
            wharf_samples.append(args.messages / timed_noop(wharf))
            parquet_samples.append(args.messages / timed_noop(parquet))

        options = ReadOptions.parse({"url": broker.url, "topic": TOPIC})
        queue_rows = httpx.get(f"{broker.url}/v1/topics/{TOPIC}/queues").json()["queues"][0]["max_offset"]
        executor_samples = []
        for _ in range(args.repeats):
            piece = OffsetRange(TOPIC, "", broker.url, 0, 0, queue_rows)
            started = time.perf_counter()
            read = sum(batch.num_rows for batch in read_range(piece, options, SCHEMA, None))
            executor_samples.append(read / (time.perf_counter() - started))

        baseline = Result("spark read, local parquet", "rows/s", parquet_samples, alias="parquet")
        results = [
            Result(
                "spark read, wharf source",
                "rows/s",
                wharf_samples,
                note=f"{args.messages:,} messages in {QUEUES} queues, every column, noop sink, {args.master}",
            ).against(baseline),  # fmt: skip
            baseline,
            Result(
                "executor read_range, one queue",
                "rows/s",
                executor_samples,
                note="pull (binary, 5000 per page, next page prefetched) + decode + Arrow, no Spark",
            ),
            Result("produce (binary batches of 10,000)", "msg/s", [produce_rate]),
        ]
        print_table(results, "Spark: reading a topic through the wharf data source")
        harness.report(
            "spark",
            args.json,
            argv,
            results,
            {
                "messages": args.messages,
                "repeats": args.repeats,
                "master": args.master,
                "cpus": os.cpu_count(),
            },
        )
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
