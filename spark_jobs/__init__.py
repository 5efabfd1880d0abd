"""Spark on Wharf: the ``wharf`` PySpark data source and example jobs (see spark_jobs/README.md)."""

from spark_jobs.datasource import WharfDataSource

__all__ = ["WharfDataSource"]
