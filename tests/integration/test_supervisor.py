"""Supervision on real Spark: a SIGKILLed driver is restarted from its checkpoint (exactly once);
a deterministic failure is not retried and gives up once."""

from __future__ import annotations

import os
import signal

import pytest

from airflow_streaming.supervision.policy import RestartPolicy
from airflow_streaming.supervision.supervisor import load_ledger, supervise
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from streams import wait_for

pytestmark = pytest.mark.spark

POLICY = RestartPolicy(max_attempts=3, backoff_initial_s=1, backoff_max_s=5)


def test_driver_killed_mid_batch_is_restarted_from_its_checkpoint_exactly_once(streams):
    inp, out = streams.path("input", "sup"), streams.path("output", "sup")
    spec = streams.spec("sup", "events_etl", ["--input", inp, "--output", out, "--quarantine",
                                               streams.path("quarantine", "sup"), "--max-files-per-trigger", "1"])
    hook = streams.hook(spec)
    fed = generate_events(inp, count=4000, files=20, run="sup")
    record = hook.submit()
    hook.wait_until_ready(record)
    # Kill -9 while a batch is in flight.
    wait_for(lambda: (d := hook.status()) and d.queries and d.queries[0].status.get("isTriggerActive"), 60,
             "a batch in flight")
    os.killpg(record.submit_pid, signal.SIGKILL)
    wait_for(lambda: hook.health().state.value == "FAILED", 30, "FAILED verdict")

    events: list[dict] = []
    first = supervise(hook, POLICY, events.append, max_wait_s=10)
    assert first.action == "RESTARTED" and first.new_run_id != record.run_id, first
    assert [e["kind"] for e in events] == ["RESTARTING"] and events[0]["attempt"] == 1
    # A second pass (a retried or duplicated supervisor task) does not restart again.
    again = supervise(hook, POLICY, events.append)
    assert again.action != "RESTARTED"
    assert hook.driver_record().run_id == first.new_run_id

    new_record = hook.driver_record()
    hook.wait_until_ready(new_record)
    wait_for(lambda: set(read_etl_output(out).event_ids) >= set(fed.event_ids), 180, "all input processed")
    recovered = supervise(hook, POLICY, events.append)
    assert recovered.action == "RECOVERED" and events[-1]["kind"] == "RECOVERED"
    assert hook.stop().graceful
    output = read_etl_output(out)
    assert output.duplicates == {} and output.rows == fed.valid  # nothing lost, nothing duplicated
    assert load_ledger(hook).failures and record.run_id in load_ledger(hook).handled_run_ids


AGG = '''
import sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.getOrCreate()
src, ckpt = sys.argv[1:3]
events = spark.readStream.schema("event_id STRING, device_id STRING, signal DOUBLE").json(src)
agg = events.groupBy("device_id").agg({aggs})
agg.writeStream.outputMode("update").format("noop").option("checkpointLocation", ckpt) \\
    .trigger(processingTime="1 second").start().awaitTermination()
'''


def test_deterministic_failure_is_not_retried_and_gives_up_once(streams, tmp_path):
    src, ckpt = streams.path("in"), streams.path("agg-ckpt")
    v1, v2 = tmp_path / "v1.py", tmp_path / "v2.py"
    v1.write_text(AGG.format(aggs='F.count("*").alias("n")'))
    v2.write_text(AGG.format(aggs='F.count("*").alias("n"), F.sum("signal").alias("s")'))
    generate_events(src, count=50, run="one")
    hook1 = streams.hook(streams.spec("agg", str(v1), [src, ckpt]))
    record = hook1.submit()
    hook1.wait_until_ready(record)
    wait_for(lambda: (hook1.status().totals["batches"] >= 1), 60, "v1 batch")
    assert hook1.stop().graceful

    generate_events(src, count=50, run="two")
    hook = streams.hook(streams.spec("agg", str(v2), [src, ckpt]))  # an incompatible redeploy
    bad = hook.submit()
    wait_for(lambda: hook.health().state.value == "FAILED", 120, "the incompatible version to fail")
    events: list[dict] = []
    passes = [supervise(hook, POLICY, events.append) for _ in range(2)]
    gave_up = [e for e in events if e["kind"] == "GAVE_UP"]
    assert len(gave_up) == 1 and not [e for e in events if e["kind"] == "RESTARTING"], (passes, events)
    assert gave_up[0]["error_class"] == "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"
    assert any("not retried" in r for r in gave_up[0]["health_reasons"])
    assert hook.driver_record().run_id == bad.run_id  # nothing was resubmitted
