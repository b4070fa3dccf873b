"""Completeness from a checkpoint written by a real Spark: a windowed aggregation with a watermark, one file
per micro-batch, stopped and restarted; the reader's watermarks are those Spark's progress reports, and
the complete periods are exactly the windows the sink holds, each reported once."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pytest

from airflow_streaming.checkpoint.committed import read_committed
from airflow_streaming.completeness import closed_periods, parse_rule
from airflow_streaming.control.local import LocalStorage

pytestmark = pytest.mark.spark


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).astimezone(timezone.utc).timestamp() * 1000)


def write(directory, n: int, times: list[str]) -> None:
    """Input file ``n``: the file source takes files oldest first (by modification time), one per batch."""
    tmp = os.path.join(directory, f".{n}.tmp")  # hidden while written: the file source skips dot-files
    with open(tmp, "w") as fh:
        fh.writelines(json.dumps({"ts": f"2026-01-01T{t}Z", "v": 1}) + "\n" for t in times)
    os.utime(tmp, (1_700_000_000 + n, 1_700_000_000 + n))
    os.replace(tmp, os.path.join(directory, f"{n}.json"))


def run(spark, source, sink, checkpoint) -> list[dict]:
    from pyspark.sql import functions as F

    events = (spark.readStream.schema("ts TIMESTAMP, v INT").option("maxFilesPerTrigger", 1).json(source)
              .withWatermark("ts", "10 seconds").groupBy(F.window("ts", "1 minute")).count()
              .select(F.col("window.start").alias("start"), F.col("window.end").alias("end"), "count"))
    query = (events.writeStream.format("parquet").outputMode("append").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(sink))
    query.awaitTermination(60)
    assert query.exception() is None
    # As JSON, the way the driver's status file keeps them (pyspark's progress objects are dicts whose
    # plain dict methods do not see their fields).
    return [json.loads(p.json) for p in query.recentProgress]


def test_complete_periods_are_the_windows_in_the_sink(tmp_path):
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").appName("completeness")
             .config("spark.sql.shuffle.partitions", "1").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    source, sink, checkpoint = (str(tmp_path / n) for n in ("in", "out", "ckpt"))
    os.makedirs(source)
    rule, storage = parse_rule({"period": "every:1m"}), LocalStorage()
    try:
        # The first batch spans two windows: the first watermark (10:01:40) closes 10:00-10:01 at once.
        write(source, 1, ["10:00:05", "10:00:30", "10:01:05", "10:01:50"])
        write(source, 2, ["10:02:10", "10:02:50"])
        # Late: the batch of file 3 drops rows of windows that ended at or before the previous batch's
        # watermark (10:01:40); its own watermark (10:02:40) closes 10:01-10:02.
        write(source, 3, ["10:03:30", "10:00:20"])
        first = run(spark, source, sink, checkpoint)
        # A watcher looks at the checkpoint between the runs, and again after (passing its last event back).
        reported = closed_periods(rule, read_committed(storage, checkpoint, progress=first).batches, None)
        # The stream stops (a driver restart, an upgrade) and goes on with more data.
        write(source, 4, ["10:05:00", "10:04:10"])
        second = run(spark, source, sink, checkpoint)
        windows = sorted(r[0] for r in spark.read.parquet(sink).selectExpr("unix_millis(start)").collect())
    finally:
        spark.stop()

    progress = first + second
    read = read_committed(storage, checkpoint, progress=progress)
    assert read.skipped == [] and read.batches and all(b.committed for b in read.batches)
    by_id = {b.batch_id: b for b in read.batches}
    # The watermark of offsets/<N> is the one batch N ran with, as its progress reports it.
    for p in progress:
        assert by_id[p["batchId"]].watermark_ms == ms(p["eventTime"]["watermark"]), p["batchId"]
    assert {p["batchId"] for p in progress} == set(by_id)
    assert max(b.watermark_ms for b in read.batches) == ms("2026-01-01T10:04:50+00:00")

    # Each period is reported once, in order, whether looked at once or between the runs.
    assert reported and max(b.batch_id for b in read.batches) >= len(first)
    reported += closed_periods(rule, read.batches, reported[-1].key)
    assert closed_periods(rule, read.batches, reported[-1].key) == []
    assert reported == closed_periods(rule, read.batches, None)
    # Exactly the windows the sink holds (Spark's file sink lists only committed output).
    assert [e.key.start for e in reported] == windows
    assert windows == [ms(f"2026-01-01T10:0{m}:00+00:00") for m in range(4)]
    # Every proof is a committed batch whose watermark reached the period's end.
    assert all(by_id[e.batch_id].watermark_ms >= e.key.end for e in reported)
    # Counts from the progress: the late row is counted once, all rows of the batches before the last proof are.
    assert sum(e.late_rows for e in reported) == 1 == sum(
        op["numRowsDroppedByWatermark"] for p in progress for op in p["stateOperators"])
    last_proof = reported[-1].batch_id
    assert sum(e.input_rows for e in reported) == sum(p["numInputRows"] for p in progress if p["batchId"] < last_proof)
