"""Streaming ETL (v1): JSON event lines -> flattened Parquet partitioned by date; malformed lines quarantined.

Arguments: ``--input DIR --output DIR --quarantine DIR [--max-files-per-trigger N]``.

Output layout: ``<output>/date=YYYY-MM-DD/batch_id=N/part-*.parquet``. Each micro-batch overwrites
exactly its own ``batch_id`` partitions (dynamic partition overwrite), so a batch that Spark replays
after a crash rewrites the same files instead of adding duplicates: exactly once end to end.
Malformed lines go to ``<quarantine>/batch_id=N/`` as JSON (raw line, reason, source file) and are
counted in the query's observed metric ``quarantined_rows``.
"""

from __future__ import annotations

import argparse
from typing import Any

from airflow_streaming import faults
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.jobs.events_schema import EVENT_SCHEMA, event_time


def parse_args(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="events_etl")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--quarantine", required=True)
    parser.add_argument("--max-files-per-trigger", type=int, default=100)
    return parser.parse_args(args)


def parsed_events(spark: SparkSession, ns: argparse.Namespace) -> DataFrame:
    """Raw lines with the parsed record and a ``_reason`` column (null for valid records)."""
    lines = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", ns.max_files_per_trigger)
        .load(ns.input)
        .withColumn("_source_file", F.input_file_name())
    )
    parsed = lines.withColumn("r", F.from_json("value", EVENT_SCHEMA, {"mode": "PERMISSIVE"})).withColumn(
        "event_time", event_time(F.col("r.ts"))
    )
    reason = (
        F.when(F.col("r").isNull() | F.col("r.event_id").isNull(), F.lit("not a JSON event"))
        .when(F.col("event_time").isNull(), F.lit("bad or missing ts"))
        .when(F.col("r.device_id").isNull(), F.lit("missing device_id"))
    )
    return parsed.withColumn("_reason", reason).observe(
        "quality", F.count(F.col("_reason")).alias("quarantined_rows"), F.count(F.lit(1)).alias("lines")
    )


def flatten(df: DataFrame) -> DataFrame:
    return df.select(
        F.col("r.event_id").alias("event_id"),
        F.col("r.device_id").alias("device_id"),
        F.col("r.event_type").alias("event_type"),
        F.col("event_time"),
        F.col("r.signal").alias("signal"),
        F.col("r.attrs.firmware").alias("firmware"),
        F.col("r.attrs.site").alias("site"),
        F.to_date("event_time").alias("date"),
    )


def write_batch(ns: argparse.Namespace, flatten_fn: Any = flatten):
    """The foreachBatch function: idempotent on batch id."""

    def _write(batch: DataFrame, batch_id: int) -> None:
        # Named fault points (inactive unless a test configures them): the batch is planned (its offsets
        # are logged) but nothing is written yet / its output is written but not committed.
        faults.hit("driver.batch", f"batch={batch_id}:before_write;")
        batch = batch.persist()
        try:
            good = flatten_fn(batch.filter(F.col("_reason").isNull())).withColumn("batch_id", F.lit(batch_id))
            (good.write.mode("overwrite").option("partitionOverwriteMode", "dynamic")
             .partitionBy("date", "batch_id").parquet(ns.output))
            faults.hit("driver.batch", f"batch={batch_id}:after_write;")
            bad = batch.filter(F.col("_reason").isNotNull()).select(
                F.col("value").alias("raw_line"), F.col("_reason").alias("reason"),
                F.col("_source_file").alias("source_file"), F.lit(batch_id).alias("batch_id"),
            )
            (bad.write.mode("overwrite").option("partitionOverwriteMode", "dynamic")
             .partitionBy("batch_id").json(ns.quarantine))
        finally:
            batch.unpersist()

    return _write


def build(spark: SparkSession, args: list[str], ctx: Any):
    ns = parse_args(args)
    return parsed_events(spark, ns).writeStream.foreachBatch(write_batch(ns))
