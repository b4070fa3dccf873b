"""The driver side and the checkpoint reader on another Spark line (pyspark 3.5.7), with real Spark.

The launcher runs a stateful bundled job under 3.5's spark-submit (status document with progress, health
verdict, graceful stop through the run marker); the checkpoint reader (this interpreter, no Spark) reads
what 3.5 wrote. Needs the 3.5.7 runtime (tests/spark_runtimes.py: skipped without it, a failure with
AIRFLOW_STREAMING_REQUIRE_RUNTIMES=1).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_streaming.checkpoint.reader import read_checkpoint
from airflow_streaming.health.verdict import HealthState, evaluate
from compat_corpus import JOIN, RUNTIME_HEADER, _start
from spark_jobs.event_generator import generate_events
from spark_runtimes import REPO, SPARK_35, runtime

pytestmark = pytest.mark.spark


def _status(ctl: Path) -> dict | None:
    try:
        return json.loads((ctl / "status.json").read_text())
    except (OSError, ValueError):
        return None


@pytest.mark.long(covered_by="tests/integration/test_spark_runtime_upgrade.py::test_stateful_stream_moves_from_spark_35_to_4x_keeps_state_rolls_back_to_its_old_runtime_and_refuses_a_downgrade")
def test_launcher_runs_a_stateful_bundled_job_on_spark_35_and_stops_it_gracefully(tmp_path):
    rt = runtime(SPARK_35)
    ctl, ckpt, inp, out = tmp_path / "ctl", tmp_path / "ckpt", tmp_path / "in", tmp_path / "out"
    ctl.mkdir()
    generate_events(inp, count=120, files=2, run="one", devices=4, malformed_every=10,
                    event_time_start=datetime.now(timezone.utc) - timedelta(minutes=5), event_time_step=1.0)
    (ctl / "RUNNING").write_text(json.dumps({"run_id": "r1", "version": "v1"}))
    argv = [rt.spark_submit, "--master", "local[2]", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.shuffle.partitions=2", str(REPO / "spark_jobs" / "launch.py"),
            "--stream", "signals-35", "--version", "v1", "--run-id", "r1", "--control-dir", str(ctl),
            "--checkpoint", str(ckpt), "--job", "device_signals", "--trigger-seconds", "1",
            "--heartbeat-seconds", "1", "--", "--input", str(inp), "--output", str(out)]
    log = open(tmp_path / "driver.log", "w")
    driver = subprocess.Popen(argv, env=rt.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        running = None
        while time.monotonic() < deadline and driver.poll() is None:
            doc = _status(ctl)
            if doc and doc["state"] == "RUNNING" and doc["totals"]["input_rows"] > 0:
                running = doc
                break
            time.sleep(0.3)
        assert running is not None, (tmp_path / "driver.log").read_text()[-4000:]
        assert "Running Spark version 3.5.7" in (tmp_path / "driver.log").read_text()
        [query] = running["queries"]
        progress = query["recent_progress"][-1]
        assert progress["stateOperators"][0]["numRowsTotal"] > 0 and "durationMs" in progress, progress
        assert running["totals"]["quarantined_rows"] > 0  # observed metrics reach the totals on 3.5 too
        verdict = evaluate(running, now=time.time(), driver_alive=True, trigger_interval=1, heartbeat_interval=1)
        assert verdict.state == HealthState.HEALTHY, verdict

        (ctl / "RUNNING").unlink()  # a graceful stop request
        assert driver.wait(timeout=90) == 0, (tmp_path / "driver.log").read_text()[-4000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        log.close()
    doc = _status(ctl)
    driver_log = (tmp_path / "driver.log").read_text()
    assert doc["state"] == "STOPPED" and doc["exit"]["code"] == 0 and doc["exit"]["reason"] == "graceful stop", doc
    assert "could not read the recent progress" not in driver_log  # settle() read 3.5's recentProgress
    info = read_checkpoint(str(ckpt))
    assert info.clean and doc["exit"]["last_committed_batch"] == info.last_committed_batch >= 0, (doc["exit"], info)


def test_checkpoint_reader_reads_checkpoints_written_by_spark_35(tmp_path):
    """Aggregation and stream-stream join checkpoints written by 3.5: no operator metadata (names unknown),
    the schemas of every store (a join's four live in per-store directories), the offsets' conf."""
    rt = runtime(SPARK_35)
    from compat_corpus import COUNTS

    for name, body in (("agg", COUNTS), ("join", JOIN)):
        script = tmp_path / f"{name}.py"
        script.write_text(RUNTIME_HEADER + _start(body))
        for src in ("src", "src2"):
            generate_events(tmp_path / name / src, count=20, files=1, run=f"{name}{src}", devices=3)
        ckpt = tmp_path / name / "ckpt"
        proc = rt.run([str(script), *(str(tmp_path / name / d) for d in ("src", "src2", "out")), str(ckpt)],
                      log=tmp_path / f"{name}.log")
        assert proc.returncode == 0, (tmp_path / f"{name}.log").read_text()[-3000:]

    agg = read_checkpoint(str(tmp_path / "agg" / "ckpt"))
    assert agg.last_committed_batch == 0 and agg.clean
    [op] = agg.operators
    assert op.name is None and op.metadata_version is None
    assert [f["name"] for f in op.key_schema["fields"]] == ["device_id"]
    assert [f["type"] for f in op.value_schema["fields"]] == ["long"]  # count's aggregation buffer
    assert agg.conf["spark.sql.shuffle.partitions"] == "2"
    assert any("before Spark 4.0" in h for h in agg.spark_version_hints), agg.spark_version_hints

    join = read_checkpoint(str(tmp_path / "join" / "ckpt"))
    [op] = join.operators
    assert sorted(s.name for s in op.stores) == ["left-keyToNumValues", "left-keyWithIndexToValue",
                                                 "right-keyToNumValues", "right-keyWithIndexToValue"], op.stores
    assert all(s.key_schema and s.value_schema for s in op.stores), op.stores
