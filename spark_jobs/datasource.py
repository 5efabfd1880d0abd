"""``WharfDataSource``: the PySpark data source registered as format ``"wharf"``.

    from spark_jobs import WharfDataSource
    spark.dataSource.register(WharfDataSource)
    df = spark.read.format("wharf").option("url", "http://127.0.0.1:8080").option("topic", "orders").load()

Options are listed in spark_jobs/README.md; the source reads in batches (:mod:`spark_jobs.reader`)
and as a stream (:mod:`spark_jobs.stream`), and writes both ways (:mod:`spark_jobs.writer`).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_jobs.options import ReadOptions, WriteOptions
from spark_jobs.reader import WharfBatchReader, WharfPushdownReader
from spark_jobs.schema import SCHEMA
from spark_jobs.stream import WharfStreamReader
from spark_jobs.writer import WharfStreamWriter, WharfWriter


class WharfDataSource(DataSource):
    """Reads a topic's queues over the broker's HTTP API, and produces DataFrame rows to a topic."""

    @classmethod
    def name(cls) -> str:
        return "wharf"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = ReadOptions.parse(self.options)
        if options.push_filters:
            return WharfPushdownReader(options, schema)
        return WharfBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        return WharfStreamReader(ReadOptions.parse(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return WharfWriter(WriteOptions.parse(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        return WharfStreamWriter(WriteOptions.parse(self.options), schema)
