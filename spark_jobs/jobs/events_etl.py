"""Streaming ETL (v1): JSON event lines -> flattened Parquet partitioned by date; malformed lines quarantined.

Arguments: ``--input DIR --output DIR --quarantine DIR [--max-files-per-trigger N] [--watermark DELAY]``.

``--watermark DELAY`` (e.g. ``"10 minutes"``) adds ``withWatermark("event_time", DELAY)`` to the parsed
events. The query stays stateless (nothing is dropped or held back: no operator uses the watermark), but
Spark tracks it and writes it into each batch's offsets (``batchWatermarkMs``), so a completeness rule of
event time (``hourly``...) can close periods of this stream (docs/assets.md). Without the argument the plan
is exactly the one it always was, so existing checkpoints are unaffected.

Output layout: ``<output>/date=YYYY-MM-DD/batch_id=N/part-*.parquet``. Each micro-batch overwrites
exactly its own ``batch_id`` partitions (dynamic partition overwrite), so a batch that Spark replays
after a crash rewrites the same files instead of adding duplicates; and the first batch of a run drops
the partitions of every uncommitted batch (its own id and above), so a rollback that replays batches
with other boundaries adds no duplicates either: exactly once end to end.
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
    parser.add_argument("--watermark", default=None,
                        help="a delay such as '10 minutes': track an event-time watermark (stateless)")
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
    if getattr(ns, "watermark", None):  # callers with their own argument parser (bench/bare_etl.py) have none
        parsed = parsed.withWatermark("event_time", ns.watermark)
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


def drop_batches_from(spark: SparkSession, first: int, *roots: str) -> list[str]:
    """Delete the ``batch_id=N`` partitions with ``N >= first`` under each root (``date=*/batch_id=N`` or
    ``batch_id=N``), through the driver's Hadoop FileSystem (any scheme). Returns what was deleted.

    Spark runs batch ``first`` only when ``first - 1`` is the checkpoint's last committed batch, so any
    partition from ``first`` on was written by a batch that never committed: the run a rollback undid
    (its batches had other boundaries than the ones about to be replayed), or the batch a crash cut.
    """
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()  # noqa: SLF001 - py4j is the driver's only way in
    deleted: list[str] = []

    def batch_of(name: str) -> int | None:
        return int(name.split("=", 1)[1]) if name.startswith("batch_id=") and name[9:].isdigit() else None

    for root in roots:
        path = jvm.org.apache.hadoop.fs.Path(root)
        fs = path.getFileSystem(conf)
        if not fs.exists(path):
            continue
        for status in fs.listStatus(path):
            name = status.getPath().getName()
            children = [status] if batch_of(name) is not None else (
                fs.listStatus(status.getPath()) if status.isDirectory() and name.startswith("date=") else [])
            for child in children:
                batch = batch_of(child.getPath().getName())
                if batch is not None and batch >= first and fs.delete(child.getPath(), True):
                    deleted.append(child.getPath().toString())
    return deleted


def write_batch(ns: argparse.Namespace, flatten_fn: Any = flatten):
    """The foreachBatch function: idempotent on batch id, and exactly once across a rollback.

    A batch overwrites its own ``batch_id`` partitions, so a replay of the same batch rewrites the same
    files. A rollback replays batches with *other* boundaries (the old version restarts from the
    snapshot, and may read more or fewer files per batch than the version it replaces): so the first
    batch a run executes first drops every partition of its id and above (see :func:`drop_batches_from`).
    """
    first_of_run: list[int] = []

    def _write(batch: DataFrame, batch_id: int) -> None:
        if not first_of_run:
            first_of_run.append(batch_id)
            dropped = drop_batches_from(batch.sparkSession, batch_id, ns.output, ns.quarantine)
            if dropped:
                print(f"events_etl: dropped {len(dropped)} partition(s) of uncommitted batches >= {batch_id} "
                      f"(a rollback or a crash left them): {dropped[:5]}", flush=True)
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
