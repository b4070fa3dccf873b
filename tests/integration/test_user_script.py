"""An unmodified user script (its own session, query and awaitTermination) gets the full lifecycle."""

from __future__ import annotations

import os

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


TRIGGER_SCRIPT = '''
import argparse
from pyspark.sql import SparkSession

parser = argparse.ArgumentParser()
parser.add_argument("source"); parser.add_argument("sink"); parser.add_argument("checkpoint")
parser.add_argument("--trigger", default="12 seconds")
ns = parser.parse_args()
spark = SparkSession.builder.appName("a-team-job").getOrCreate()
lines = spark.readStream.format("text").load(ns.source)
writer = (lines.writeStream.queryName("team_orders").format("parquet").option("path", ns.sink)
          .option("checkpointLocation", ns.checkpoint))
writer = writer.trigger(availableNow=True) if ns.trigger == "available-now" else writer.trigger(processingTime=ns.trigger)
writer.start().awaitTermination()
'''


def _sink_rows(sink: str) -> list[str]:
    import pyarrow.dataset as ds

    return ds.dataset(committed_sink_files(sink), format="parquet").to_table().column("value").to_pylist()


def test_an_available_now_script_ends_as_a_finished_run_that_the_supervisor_leaves_alone(streams, tmp_path):
    """Deployed through the product's deploy: the job processes what is there and ends by itself - a finished
    run (exit 0, ``finished``), judged STOPPED/FINISHED, not a failure, and the supervisor's decision is to do
    nothing. Asked (``restart_policy.restart_finished``), a supervisor pass starts it again from its checkpoint
    - a rerun, not a failure: no attempt counted, no failure notified - and it takes only the new input."""
    from airflow_streaming.lifecycle.ledger_file import load_ledger
    from airflow_streaming.lifecycle.observe import observe
    from airflow_streaming.lifecycle.operations import deploy_stream
    from airflow_streaming.lifecycle.supervisor import supervise
    from airflow_streaming.reconcile.decision import Act
    from airflow_streaming.supervision.policy import RestartPolicy

    script = tmp_path / "team_backfill.py"
    script.write_text(TRIGGER_SCRIPT)
    source, sink, ckpt = streams.path("ain"), streams.path("aout"), streams.path("a-ckpt")
    fed = generate_events(source, count=80, files=3, run="avail")
    spec = streams.spec("teambackfill", str(script), [source, sink, ckpt, "--trigger", "available-now"])
    hook = streams.hook(spec)
    result = deploy_stream(spec)
    wait_for(lambda: (doc := current_status(hook, result["run_id"])) is not None and doc.state == contract.STOPPED,
             120, "the job to finish by itself")
    doc = current_status(hook, result["run_id"])
    assert doc.exit["code"] == contract.EXIT_GRACEFUL and doc.exit.get("finished") is True, doc.exit
    assert doc.queries[0].trigger == {"kind": "available_now", "interval_s": None}
    wait_for(lambda: not hook.alive(hook.driver_record()), 60, "the driver process to exit")
    verdict = hook.health()
    assert verdict.state.value == "STOPPED" and verdict.reasons[0].code == "FINISHED", verdict
    decision = observe(hook, RestartPolicy()).decide(RestartPolicy())
    assert decision.act == Act.NOTHING, decision
    events: list = []
    left = supervise(hook, RestartPolicy(), notify=events.append)
    assert left.action == "NOTHING" and "finished by itself" in left.reason and not events, (left, events)
    rows = _sink_rows(sink)
    assert len(rows) == len(set(rows)) == fed.valid

    more = generate_events(source, count=50, files=2, run="avail2")
    asked = RestartPolicy(restart_finished=True)
    rerun = supervise(hook, asked, notify=events.append)
    assert rerun.action == "RERUN" and rerun.new_run_id and rerun.new_run_id != result["run_id"], rerun
    assert not events, events  # not a failure: nothing notified
    wait_for(lambda: (doc := hook.status()) is not None and doc.run_id == rerun.new_run_id
             and doc.state == contract.STOPPED, 120, "the rerun to finish by itself")
    wait_for(lambda: not hook.alive(hook.driver_record()), 60, "the rerun's driver process to exit")
    assert current_status(hook, rerun.new_run_id).exit.get("finished") is True
    assert not load_ledger(hook).failures, "a rerun was counted as a failure"
    rows = _sink_rows(sink)
    assert len(rows) == len(set(rows)) == fed.valid + more.valid  # resumed from the checkpoint: exactly once


SLOW_START_SCRIPT = '''
import sys, time
from pyspark.sql import SparkSession

source, sink, checkpoint, started = sys.argv[1:5]
spark = SparkSession.builder.appName("a-slow-starting-job").getOrCreate()
open(started, "w").close()
time.sleep(6)  # loading reference data, warming a cache...: the stop arrives now, before the query exists
query = (spark.readStream.format("text").load(source).writeStream.format("parquet").option("path", sink)
         .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
query.awaitTermination()
'''


def test_a_stop_asked_while_the_script_starts_its_query_stops_it_gracefully(streams, tmp_path):
    """The stop request (the run marker removed) arrives while the script is still getting ready, before its
    query exists. Before: the launcher's stop watcher found no query to stop and gave up, the query then ran on
    - the stop timed out and the driver was killed. Now the request waits for the query and stops it at a
    micro-batch boundary: a graceful stop, exit 0, the sink exactly what was fed."""
    script = tmp_path / "slow_start.py"
    script.write_text(SLOW_START_SCRIPT)
    source, sink, ckpt = streams.path("sin"), streams.path("sout"), streams.path("s-ckpt")
    started = tmp_path / "session-started"
    fed = generate_events(source, count=60, files=2, run="slow")
    hook = streams.hook(streams.spec("slowstart", str(script), [source, sink, ckpt, str(started)],
                                     stop_timeout=30))
    record = stream_actions.submit(hook)
    wait_for(started.exists, 120, "the script's session to start")
    report = stream_actions.stop(hook, kill_on_timeout=False)  # raises if the stop times out
    assert report.graceful and report.exit_code == contract.EXIT_GRACEFUL, report
    doc = current_status(hook, record.run_id)
    assert doc.state == contract.STOPPED and doc.exit["reason"] == "graceful stop", doc.exit
    # Deployed again, it resumes from its checkpoint: every line once, nothing lost, nothing twice.
    started.unlink()
    again = stream_actions.submit(hook)
    hook.wait_until_ready(again)
    wait_for(lambda: len(_rows_if_any(sink)) >= fed.valid, 120, "the rest of the input after the restart")
    assert stream_actions.stop(hook).graceful
    rows = _rows_if_any(sink)
    assert len(rows) == len(set(rows)) == fed.valid


def _rows_if_any(sink: str) -> list[str]:
    return _sink_rows(sink) if committed_sink_files(sink) else []


HEAVY_BATCH_SCRIPT = '''
import sys, time
from pyspark.sql import SparkSession

source, sink, checkpoint, files_per_batch = sys.argv[1:5]
spark = SparkSession.builder.appName("a-heavy-batch-job").getOrCreate()


def enrich_and_write(batch, batch_id):
    batch.write.mode("overwrite").parquet(f"{sink}/batch={batch_id}")  # idempotent on the batch id
    time.sleep(1.5)  # a lookup service called per batch: every batch outlasts the 1 s trigger


query = (spark.readStream.format("text").option("maxFilesPerTrigger", files_per_batch).load(source).writeStream
         .foreachBatch(enrich_and_write).option("checkpointLocation", checkpoint)
         .trigger(processingTime="1 second").start())
query.awaitTermination()
'''


def test_a_query_whose_batches_outlast_its_trigger_is_stopped_after_its_batch_not_killed(streams, tmp_path):
    """Every batch of this team's job takes longer than its trigger interval, so Spark starts the next batch as
    soon as one ends: the query is never idle. Before: the graceful stop waited for an idle moment that never
    came and the driver was killed at the stop timeout (a suite run, 2026-11-28, on a loaded machine). Now the
    query is asked to end after the batch in flight: a graceful stop, exit 0, the checkpoint clean (the last
    planned batch committed), long before the timeout; deployed again, it resumes: every line exactly once."""
    import pyarrow.dataset as ds

    script = tmp_path / "heavy_batches.py"
    script.write_text(HEAVY_BATCH_SCRIPT)
    source, sink, ckpt = streams.path("hin"), streams.path("hout"), streams.path("h-ckpt")
    fed = generate_events(source, count=240, files=60, run="heavy")  # one file a batch: two minutes of batches
    spec = streams.spec("heavybatches", str(script), [source, sink, ckpt, "1"], stop_timeout=45)
    hook = streams.hook(spec)

    def rows() -> list[str]:
        if not os.path.isdir(sink):
            return []
        return ds.dataset(sink, format="parquet", partitioning="hive").to_table(columns=["value"]).column(
            "value").to_pylist()

    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    wait_for(lambda: (hook.batch_position(ckpt).last_committed or -1) >= 2, 120, "three committed batches")
    doc = current_status(hook, record.run_id)
    took = [p["durationMs"]["triggerExecution"] for p in doc.queries[0].recent_progress if p.get("numInputRows")]
    assert took and min(took) > 1000, took  # the premise: every batch outlasts the 1 s trigger

    report = stream_actions.stop(hook, kill_on_timeout=False)  # raises if the stop times out
    assert report.graceful and report.exit_code == contract.EXIT_GRACEFUL and not report.killed, report
    position = hook.batch_position(ckpt)
    assert position.clean and position.last_planned == position.last_committed, position
    assert len(rows()) < fed.valid  # stopped with input left: the restart below has work to do

    # Deployed again with larger batches (the rest in one or two), it resumes from the clean checkpoint.
    hook = streams.hook(streams.spec("heavybatches", str(script), [source, sink, ckpt, "100"]))
    again = stream_actions.submit(hook)
    hook.wait_until_ready(again)
    wait_for(lambda: len(rows()) >= fed.valid, 120, "the rest of the input after the restart")
    assert stream_actions.stop(hook, kill_on_timeout=False).graceful
    got = rows()
    assert len(got) == len(set(got)) == fed.valid
