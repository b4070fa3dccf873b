"""A driver stuck inside a batch: the stop times out, kills it, reports an unclean checkpoint, and
the restart replays the batch with the same id - the output still holds every line exactly once."""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest

from airflow_streaming.control import contract
from spark_jobs.event_generator import generate_events
from streams import current_status, wait_for
import stream_actions

pytestmark = pytest.mark.spark

STUCK_SCRIPT = '''
import os, sys, time
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
source, sink, checkpoint, stuck_flag = sys.argv[1:5]

def write(batch, batch_id):
    if os.path.exists(stuck_flag):
        time.sleep(600)  # a batch that never finishes (a hung sink)
    batch.write.mode("overwrite").parquet(f"{sink}/batch_id={batch_id}")  # idempotent on batch id

query = (spark.readStream.format("text").load(source).writeStream.foreachBatch(write)
         .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
query.awaitTermination()
'''


def test_stop_timeout_kills_then_restart_replays_the_batch_exactly_once(streams, tmp_path):
    script = tmp_path / "stuck_job.py"
    script.write_text(STUCK_SCRIPT)
    flag = tmp_path / "stuck"
    flag.write_text("1")
    source, sink, ckpt = streams.path("in"), streams.path("out"), streams.path("ckpt")
    fed = generate_events(source, count=100, files=2, run="stuck")
    hook = streams.hook(streams.spec("stuck", str(script), [source, sink, ckpt, str(flag)], stop_timeout=5))

    record = stream_actions.submit(hook)
    wait_for(lambda: (d := hook.status()) is not None and d.run_id == record.run_id and d.queries
             and d.queries[0].status.get("isTriggerActive"), 120, "the first batch to start (and hang)")
    wait_for(lambda: hook.batch_position().last_planned == 0, 30, "batch 0 planned")

    report = stream_actions.stop(hook)
    assert report.killed and not report.graceful
    assert report.position.last_planned == 0 and report.position.last_committed is None
    assert not report.position.clean and report.position.next_batch_id == 0
    assert not hook.alive(record)
    assert hook.running_driver() is None, "a killed driver's lease is stale: the stream can be redeployed"

    flag.unlink()
    record2 = stream_actions.submit(hook)
    hook.wait_until_ready(record2)
    wait_for(lambda: hook.batch_position().last_committed == 0, 60, "batch 0 replayed and committed")
    progress = current_status(hook, record2.run_id).queries[0].recent_progress
    assert progress[0]["batchId"] == 0, "the restart replays the cancelled batch with the same id"
    report2 = stream_actions.stop(hook)
    assert report2.graceful and report2.position.clean and report2.exit_code == contract.EXIT_GRACEFUL

    rows = ds.dataset(sink, format="parquet", partitioning="hive").to_table().column("value").to_pylist()
    assert len(rows) == len(set(rows)) == fed.valid
