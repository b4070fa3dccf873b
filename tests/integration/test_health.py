"""Health verdicts on real Spark: falling behind, killed driver, idle under the deferrable sensor."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from spark_jobs.event_generator import generate_events
from streams import wait_for
import stream_actions

pytestmark = pytest.mark.spark


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

SLOW_SCRIPT = '''
import sys, time
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
source, checkpoint = sys.argv[1:3]

def slow_sink(batch, batch_id):
    batch.count()
    time.sleep(3)  # a deliberately slow stage: every batch takes ~3 s with a 1 s trigger

(spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(source).writeStream
 .foreachBatch(slow_sink).option("checkpointLocation", checkpoint).trigger(processingTime="1 second")
 .start().awaitTermination())
'''


def test_falling_behind_is_reported_then_a_sigkilled_driver_is_failed_within_two_polls(streams, tmp_path):
    script = tmp_path / "slow_job.py"
    script.write_text(SLOW_SCRIPT)
    source = streams.path("in")
    generate_events(source, count=3000, files=30, run="slow")  # 30 batches of backlog
    ui_port = _free_port()
    spec = streams.spec("slow", str(script), [source, streams.path("ckpt")], health={"min_batches": 2},
                        spark_conf={"spark.ui.enabled": "true", "spark.ui.port": str(ui_port),
                                    "spark.sql.shuffle.partitions": 2})
    hook = streams.hook(spec)
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    ready_at = time.monotonic()

    verdict = wait_for(lambda: (v := hook.health()).state.value == "FALLING_BEHIND" and v, 30,
                       "FALLING_BEHIND within a few trigger intervals")
    assert time.monotonic() - ready_at < 15
    codes = {r.code for r in verdict.reasons}
    assert "BATCH_LONGER_THAN_TRIGGER" in codes
    reason = next(r for r in verdict.reasons if r.code == "BATCH_LONGER_THAN_TRIGGER")
    assert reason.values["median_batch_s"] > 2.5 and reason.values["trigger_interval_s"] == 1.0

    # Spark's own streaming gauges, on by default, are scrapeable by Prometheus from the driver.
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/metrics/prometheus", timeout=10) as resp:
        scraped = resp.read().decode()
    assert "spark_streaming" in scraped and "inputRate_total" in scraped and "latency" in scraped

    # SIGKILL the whole driver (spark-submit JVM and Python driver): FAILED within two polls.
    os.killpg(record.submit_pid, signal.SIGKILL)
    polls = []
    for _ in range(2):
        time.sleep(1.0)
        polls.append(hook.health())
    assert polls[-1].state.value == "FAILED", [p.summary() for p in polls]
    assert polls[-1].reasons[0].code == "DRIVER_GONE"
    assert not hook.alive(record)


DAG_FILE = """
from datetime import datetime
from airflow.sdk import DAG
from airflow_streaming.sensors.health import SparkStreamHealthSensor

with DAG("idle_watch", schedule=None, start_date=datetime(2026, 1, 1)):
    SparkStreamHealthSensor(task_id="watch", spec={spec!r}, health_mode="watch", watch_seconds={seconds},
                          poke_interval=5, deferrable=True)
"""


@pytest.mark.long(covered_by="tests/integration/test_health.py::"
                           "test_falling_behind_is_reported_then_a_sigkilled_driver_is_failed_within_two_polls")
@pytest.mark.airflow
def test_idle_stream_stays_idle_past_twice_the_stall_limit_under_the_deferrable_sensor(streams, airflow_db, tmp_path):
    # A stall threshold of 6 s (instead of the default 120 s) lets a 15 s window cover it twice over. Spark
    # reports an idle query every spark.sql.streaming.noDataProgressEventInterval (10 s by default, 2 s
    # here): the threshold must stay above that interval, or an idle query would look stalled.
    spec = streams.etl_spec("idle", health={"stall_min_seconds": 6, "stall_trigger_intervals": 5},  # no input
                            spark_conf={"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "false",
                                        "spark.sql.streaming.noDataProgressEventInterval": "2000"})
    window = 15
    from airflow_streaming.health.thresholds import HealthThresholds

    stall_after = HealthThresholds.from_mapping(spec.health).stall_after(spec.trigger_interval)
    assert 2 * stall_after <= window, stall_after
    os.makedirs(streams.path("input", "idle"))
    hook = streams.hook(spec)
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    assert hook.health().state.value == "IDLE"

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "idle_watch.py").write_text(DAG_FILE.format(spec=spec.to_dict(), seconds=window))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "idle_watch"], env=env,
                         capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert time.monotonic() - started >= window
    assert "stream idle: IDLE" in output and "STALLED" not in output
    assert f"stayed healthy for the {window}s window" in output
    final = hook.health()
    assert final.state.value == "IDLE", final.summary()
    assert hook.alive(record)
