"""Device signal aggregation (v1, stateful): event-time windows per device, appended to Parquet.

Arguments: ``--input DIR --output DIR [--window "1 minute"] [--watermark "30 seconds"]
[--max-files-per-trigger N]``.

``withWatermark`` + ``window`` + ``groupBy(device_id)`` with ``count`` and ``avg``; in append mode a
window is written once, after the watermark passes its end. The file sink (``_spark_metadata``)
makes the output exactly once across restarts. Lines that are not valid events are dropped and
counted in the observed metric ``quarantined_rows``.
"""

from __future__ import annotations

import argparse
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.jobs.events_schema import EVENT_SCHEMA, event_time


def parse_args(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="device_signals")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--window", default="1 minute")
    parser.add_argument("--watermark", default="30 seconds")
    parser.add_argument("--max-files-per-trigger", type=int, default=100)
    return parser.parse_args(args)


def windowed_counts(spark: SparkSession, ns: argparse.Namespace) -> DataFrame:
    lines = spark.readStream.format("text").option("maxFilesPerTrigger", ns.max_files_per_trigger).load(ns.input)
    parsed = lines.select(F.from_json("value", EVENT_SCHEMA).alias("r")).select(
        "r.event_id", "r.device_id", "r.signal", event_time(F.col("r.ts")).alias("event_time")
    )
    valid = F.col("event_id").isNotNull() & F.col("device_id").isNotNull() & F.col("event_time").isNotNull()
    events = parsed.observe("quality", F.count(F.when(~valid | valid.isNull(), 1)).alias("quarantined_rows")).filter(valid)
    return (
        events.withWatermark("event_time", ns.watermark)
        .groupBy(F.window("event_time", ns.window), F.col("device_id"))
        .agg(F.count(F.lit(1)).alias("events"), F.avg("signal").alias("avg_signal"))
        .select(
            F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
            "device_id", "events", "avg_signal",
        )
    )


def build(spark: SparkSession, args: list[str], ctx: Any):
    ns = parse_args(args)
    return windowed_counts(spark, ns).writeStream.format("parquet").outputMode("append").option("path", ns.output)
