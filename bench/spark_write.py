"""Spark write benchmark: rows per second written through the ``wharf`` data source, exactly once
against at least once.

Run from the repository root (Java 17+ and the ``spark`` extra installed)::

    .venv/bin/python -m bench.spark_write [--rows 1000000] [--repeats 2] [--quick] [--json out.json]

A broker (``python -m app``, the store's defaults) on a temporary store, a topic of 4 queues, and a
local Spark session (``local[2]``). Each repeat writes ``--rows`` rows (100-byte bodies, 4
partitions, ``batchSize`` 1,000) to a fresh topic with ``deliveryGuarantee=at_least_once`` (a
plain produce per batch, visible at once) and with ``exactly_once`` (a batch transaction per batch,
committed by the driver), interleaved. Figures are rows per second from the write's start to its
end (the driver's commit included); the ratio is exactly once over at least once.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import httpx

from bench import harness
from bench.harness import Result, Target, print_table
from bench.http_setup import broker_settings
from spark_jobs.session import wharf_session
from tests.api.server import BrokerProcess

QUEUES = 4
TARGET = Target(0.7, on_ratio=True)
GUARANTEES = ("at_least_once", "exactly_once")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="100,000 rows, one repeat")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.repeats = 100_000, 1
    started = time.perf_counter()
    load = os.getloadavg()[0]
    spark = wharf_session("wharf-write-bench", "local[2]", **{"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    rates: dict[str, list[float]] = {name: [] for name in GUARANTEES}
    with harness.scratch_dir("spark-write-bench-", harness.scratch_parent()) as root:
        broker = BrokerProcess(root / "store", **broker_settings()).start()
        try:
            frame = spark.range(args.rows, numPartitions=4).selectExpr(
                "concat(lpad(cast(id AS string), 12, '0'), repeat('x', 88)) AS body"
            )
            frame = frame.cache()
            frame.count()
            with httpx.Client(base_url=broker.url, timeout=60) as client:
                for repeat in range(args.repeats):
                    for guarantee in GUARANTEES:
                        topic = f"bench-write-{guarantee.replace('_', '-')}-{repeat}"
                        client.post("/v1/topics", json={"name": topic, "queues": QUEUES}).raise_for_status()
                        began = time.perf_counter()
                        frame.write.format("wharf").option("url", broker.url).option("topic", topic).option(
                            "deliveryGuarantee", guarantee
                        ).option("batchSize", "1000").mode("append").save()
                        elapsed = time.perf_counter() - began
                        queues = client.get(f"/v1/topics/{topic}/queues").json()["queues"]
                        stored = sum(queue["max_offset"] for queue in queues)
                        assert stored == args.rows, f"{guarantee}: {stored} messages for {args.rows} rows"
                        rates[guarantee].append(args.rows / elapsed)
        finally:
            broker.stop()
            spark.stop()
    at_least = Result(f"at_least_once, {args.rows:,} rows", "rows/s", rates["at_least_once"])
    at_least.alias = "at_least_once"
    exactly = Result(f"exactly_once, {args.rows:,} rows", "rows/s", rates["exactly_once"])
    exactly.against(at_least)
    exactly.target = TARGET
    results = [at_least, exactly]
    print_table(results, f"Spark writes through wharf (1-min load average {load:.1f} at start)")
    if args.json is not None:
        harness.report("spark_write", args.json, argv, results, {"args": {"rows": args.rows}}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
