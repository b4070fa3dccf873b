"""An unmodified user script (its own session, query and awaitTermination) gets the full lifecycle."""

from __future__ import annotations

import pytest

from airflow_streaming.control import contract
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import committed_sink_files
from streams import current_status, totals, wait_for
import stream_actions

pytestmark = pytest.mark.spark

USER_SCRIPT = '''
import sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("plain-user-job").getOrCreate()
source, sink, checkpoint = sys.argv[1:4]
lines = spark.readStream.format("text").load(source)
query = (lines.writeStream.format("parquet").option("path", sink)
         .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
query.awaitTermination()
print("user script: query terminated, exiting")
'''


def test_unmodified_user_script_reports_status_and_stops_gracefully(streams, tmp_path):
    import pyarrow.dataset as ds

    script = tmp_path / "user_job.py"
    script.write_text(USER_SCRIPT)
    source, sink, ckpt = streams.path("in"), streams.path("out"), streams.path("user-ckpt")
    fed = generate_events(source, count=120, files=2, run="user")
    hook = streams.hook(streams.spec("userjob", str(script), [source, sink, ckpt]))
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    wait_for(lambda: (totals(hook, record.run_id) or {}).get("input_rows", 0) >= 120, 90, "user query progress")
    doc = current_status(hook, record.run_id)
    assert doc.state == contract.RUNNING and len(doc.queries) == 1
    assert doc.queries[0].recent_progress[-1]["sink"]["description"].startswith("FileSink")

    # The lease protects the user's stream as well.
    assert "holds the lease" in (hook.running_driver() or "")

    report = stream_actions.stop(hook)
    assert report.graceful and report.exit_code == contract.EXIT_GRACEFUL
    doc = hook.status()
    assert doc.state == contract.STOPPED and doc.exit["reason"] == "graceful stop"
    assert doc.exit["checkpoints"] == [f"file:{ckpt}"]
    assert "user script: query terminated, exiting" in hook.log_tail(record.run_id, 400)

    # The sink holds each input line exactly once.
    rows = ds.dataset(committed_sink_files(sink), format="parquet").to_table().column("value").to_pylist()
    assert len(rows) == len(set(rows)) == fed.valid
