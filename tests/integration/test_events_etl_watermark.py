"""``events_etl --watermark``: the stateless ETL tracks an event-time watermark on a real Spark.

The job gains no state and drops nothing (every valid row reaches the sink, malformed lines the quarantine),
but each batch's offsets carry the watermark Spark tracked (``batchWatermarkMs``), computed from the valid
rows' event times (a malformed line's null counts as the epoch in ``eventTime.min`` only); without the argument the watermark stays 0, as before."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from airflow_streaming.checkpoint.committed import read_committed
from airflow_streaming.control.local import LocalStorage
from spark_jobs.event_generator import generate_events
from spark_jobs.jobs import events_etl

pytestmark = pytest.mark.spark

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
START_MS = int(START.timestamp() * 1000)


def test_parse_args_watermark_is_optional():
    base = ["--input", "i", "--output", "o", "--quarantine", "q"]
    assert events_etl.parse_args(base).watermark is None
    assert events_etl.parse_args([*base, "--watermark", "10 minutes"]).watermark == "10 minutes"


def _run(spark, root, args: list[str]) -> list[dict]:
    query = (events_etl.build(spark, args, None).option("checkpointLocation", f"{root}/ckpt")
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    return [json.loads(p.json) for p in query.recentProgress]


@pytest.mark.parametrize("watermark", ["10 minutes", None])
def test_the_stateless_query_tracks_the_watermark(tmp_path, watermark):
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").appName("events-etl-watermark")
             .config("spark.sql.shuffle.partitions", "1").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    root = str(tmp_path)
    # 3 files of 100 events one minute apart (00:00 .. 04:59), a malformed line every 10th: one file a batch.
    generate_events(f"{root}/in", count=300, files=3, run="wm", malformed_every=10, event_time_start=START,
                    event_time_step=60.0)
    args = ["--input", f"{root}/in", "--output", f"{root}/out", "--quarantine", f"{root}/q",
            "--max-files-per-trigger", "1"] + (["--watermark", watermark] if watermark else [])
    try:
        progress = _run(spark, root, args)
        rows = spark.read.parquet(f"{root}/out").count()
        quarantined = spark.read.json(f"{root}/q").count()
    finally:
        spark.stop()

    assert rows == 300 and quarantined == 33  # stateless: nothing dropped, nothing held back
    batches = read_committed(LocalStorage(), f"{root}/ckpt", progress=progress).batches
    assert [b.batch_id for b in batches] == [0, 1, 2] and all(b.committed for b in batches)
    marks = [b.watermark_ms for b in batches]
    if watermark is None:
        assert marks == [0, 0, 0]
        return
    minute = 60_000
    # Batch N runs with the watermark of batches 0..N-1: their newest event time minus 10 minutes.
    assert marks == [0, START_MS + 89 * minute, START_MS + 189 * minute], marks
    # Only the valid rows' event times move it, but Spark counts a malformed line (null event time) as the
    # epoch in the batch's eventTime.min: the reader takes that for no earliest event (not 1970).
    assert [p["eventTime"]["min"] for p in progress] == ["1970-01-01T00:00:00.000Z"] * 3
    assert [b.first_event_ms for b in batches] == [None, None, None]
    assert sum(p["numInputRows"] for p in progress) == 333
