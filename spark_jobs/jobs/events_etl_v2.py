"""Streaming ETL (v2): v1 plus an ``event_hour`` column and a ``job_version`` column.

A compatible change (projection only, no state): it can take over v1's checkpoint.
Same arguments and output layout as :mod:`spark_jobs.jobs.events_etl`.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.jobs import events_etl


def flatten_v2(df: DataFrame) -> DataFrame:
    return events_etl.flatten(df).withColumn("event_hour", F.hour("event_time")).withColumn("job_version", F.lit("v2"))


def build(spark: SparkSession, args: list[str], ctx: Any):
    ns = events_etl.parse_args(args)
    return events_etl.parsed_events(spark, ns).writeStream.foreachBatch(events_etl.write_batch(ns, flatten_v2))
