"""A SparkSession set up for Wharf jobs: the venv's Python on the workers, the source registered."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

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
