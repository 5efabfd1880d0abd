"""A SparkSession set up for Wharf jobs (the venv's Python on the workers, the source registered),
and the options and the topic read every job shares."""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import DataFrameReader, SparkSession

from spark_jobs.datasource import WharfDataSource


def wharf_session(app_name: str, master: str | None = None, **conf: str) -> SparkSession:
    """A session (``local[*]`` unless ``master`` or spark-submit says otherwise) with ``wharf`` registered.

    Spark's Python workers must import this project, so they run the interpreter running this
    code unless PYSPARK_PYTHON says otherwise. Filter pushdown for Python sources is switched on,
    so readers given ``pushFilters=true`` may take filters into their pulls."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit the JVM is already up with its --master; run alone, default to local[*].
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    builder = builder.config("spark.sql.python.filterPushdown.enabled", "true")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.dataSource.register(WharfDataSource)
    return spark


def job_arguments(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with the options every job takes: the brokers, the credentials, the topic to read,
    where its read starts and ends, and the Spark master."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--url", required=True, help="broker address, or several separated by commas")
    parser.add_argument(
        "--user",
        default=os.environ.get("WHARF_USER"),
        help="accessKey:secretKey for a broker with an ACL (default: $WHARF_USER)",
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--starting-offsets", default="earliest", help="earliest, or JSON per queue")
    parser.add_argument("--ending-offsets", default="latest", help="latest, or JSON per queue")
    parser.add_argument("--master", default=None, help="Spark master (default local[*] outside spark-submit)")
    return parser


def topic_reader(spark: SparkSession, args: argparse.Namespace) -> DataFrameReader:
    """A batch read of ``args.topic`` from ``args.starting_offsets`` to ``args.ending_offsets``."""
    return (
        spark.read.format("wharf")
        .option("url", args.url)
        .option("user", args.user or "")
        .option("topic", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .option("endingOffsets", args.ending_offsets)
    )
