"""Device signal aggregation (v2): v1 plus a ``signal_band`` column derived after the aggregation.

A compatible change: the stateful operator, its keys and its aggregates are unchanged, so v2 can
continue from v1's checkpoint and state. Same arguments as :mod:`spark_jobs.jobs.device_signals`.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_jobs.jobs import device_signals


def build(spark: SparkSession, args: list[str], ctx: Any):
    ns = device_signals.parse_args(args)
    out = device_signals.windowed_counts(spark, ns).withColumn(
        "signal_band", F.when(F.col("avg_signal") >= 50, F.lit("high")).otherwise(F.lit("low"))
    )
    return out.writeStream.format("parquet").outputMode("append").option("path", ns.output)
