"""A stateful stream moved from Spark 3.5 to the installed 4.x, on real Spark drivers of both lines.

One stream, one sequence (each Spark start costs seconds): v1 runs on Spark 3.5.7 (a runtime the
provider builds once on this host and caches, ``airflow_streaming.spark_runtime``); a 4.x version that
passes the gate but fails at run time under 4.x's ANSI mode is rolled back and v1 restarts **on its old
runtime**; the upgrade-window DAG (real ``airflow dags test``)
moves the same code to the installed Spark 4.x with the gate answered by 4.x, the window's state kept;
a downgrade back to 3.5 is refused by Spark 3.5's own gate. Throughout, the sink's committed output is
compared with what was fed: nothing lost, nothing duplicated.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from airflow_streaming.control.process import has_token
from airflow_streaming.lifecycle.record import Action, Probation, Step
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner, read_history
from airflow_streaming.spark_runtime import installed_version, resolve_runtime
from spark_jobs.outputs import committed_sink_files, read_window_counts
from signals import Feeder, expected_windows, window_of
from streams import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.airflow]

OLD = "3.5.7"
JOBS = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
OPTIONS = LifecycleOptions(probation=Probation(min_batches=2, window_s=120), poll_s=0.5)


def runtime_of_run(run_id: str) -> set[str]:
    """The Spark releases whose jars the JVMs of ``run_id`` load (from their command lines)."""
    found = set()
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if has_token(cmd, run_id) and any("java" in part for part in cmd[:1]):
            line = " ".join(cmd)
            found.add(OLD if f"pyspark-{OLD}" in line else "installed")
    return found


#: The rules must read 3.5's progress whatever the machine's speed: a batch may take 3 triggers (~1.2 s batches
#: against the 1 s trigger read FALLING_BEHIND under the suite's load, a correct reading but not this test's point).
HEALTH = {"batch_duration_factor": 3.0}


def versions(streams) -> dict:
    inp, out = streams.path("input", "signals"), streams.path("output", "signals")
    args = ["--input", inp, "--output", out, "--window", "1 minute", "--watermark", "30 seconds"]
    return {"v1": {"application": "device_signals", "application_args": args, "spark_runtime": OLD},
            "v2": {"application": "device_signals", "application_args": args},  # the same code, Spark alone
            "v2-ansi": {"application": str(JOBS / "device_signals_ansi.py"),
                          "application_args": [inp, out, streams.path("checkpoints", "signals")]}}


def spec_of(streams, version: str):
    fields = versions(streams)[version]
    return streams.spec("signals", fields["application"], fields["application_args"], version=version,
                        spark_runtime=fields.get("spark_runtime"), health=HEALTH)


def desired_state(streams, wanted: str) -> str:
    doc = {"defaults": {"control_location": streams.path("control"), "master": "local[2]", "trigger_interval": 1,
                        "heartbeat_interval": 1, "stop_timeout": 60, "startup_timeout": 180,
                        "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "false"},
                        "health": HEALTH},
           "streams": {"signals": {"version": wanted, "probation": {"min_batches": 2, "window": "2 minutes"},
                                   "spec": {"checkpoint_location": streams.path("checkpoints", "signals")},
                                   "versions": versions(streams)}}}
    path = Path(streams.path("desired_state.yaml"))
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_stateful_stream_moves_from_spark_35_to_4x_keeps_state_rolls_back_to_its_old_runtime_and_refuses_a_downgrade(
        streams, airflow_db):
    runtime = resolve_runtime({"version": OLD})  # built once on a fresh host (pip), then cached
    assert runtime is not None and runtime.version == OLD and installed_version() != OLD
    feeder = Feeder(streams.path("input", "signals"))
    feeder.feed(40)
    out = streams.path("output", "signals")
    v1 = spec_of(streams, "v1")
    hook = streams.hook(v1)

    # v1 on Spark 3.5.7.
    deployed = LifecycleRunner(v1, Action.DEPLOY, OPTIONS).run()
    assert deployed.step == Step.SUCCEEDED, deployed.error
    assert runtime_of_run(deployed.new_run_id) == {OLD}
    feeder.start()
    wait_for(lambda: read_window_counts(out), 150, "v1 (Spark 3.5) writes closed windows")
    wait_for(lambda: hook.health().state.value == "HEALTHY", 60, "the health rules judge the 3.5 driver HEALTHY")

    # A version that passes 4.x's gate but fails on 4.x at run time (ANSI mode, on by default in 4.x: a cast
    # 3.5 turns into null raises): probation catches it, and v1 restarts on Spark 3.5.7 again.
    broken = LifecycleRunner(spec_of(streams, "v2-ansi"), Action.UPGRADE, OPTIONS).run()
    assert broken.step == Step.ROLLED_BACK, broken.error
    assert "CAST_INVALID_INPUT" in broken.error and "PROBATION" in [s["step"] for s in broken.steps]
    assert hook.deployed()["spec"]["version"] == "v1" and hook.deployed()["spec"]["spark_runtime"] == {"version": OLD}
    assert runtime_of_run(broken.rollback_run_id) == {OLD}

    # The upgrade window (a real Airflow DAG run) moves v1 to v2: the same code on the installed Spark 4.x.
    env = {**os.environ, "AIRFLOW_STREAMING_DESIRED_STATE": desired_state(streams, "v2")}
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "stream_upgrade_window"], env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "signals: v1 -> v2: SUCCEEDED" in run.stdout + run.stderr, run.stdout[-3000:]
    upgrade = read_history(hook)[-1]
    assert (upgrade["action"], upgrade["outcome"]) == ("upgrade", "SUCCEEDED")
    assert upgrade["from_runtime"] == f"Spark {OLD}" and upgrade["to_runtime"] == f"Spark {installed_version()} (installed)"
    record = hook.deployed()
    assert record["spec"]["version"] == "v2" and "spark_runtime" not in record["spec"]
    assert runtime_of_run(hook.driver_record().run_id) == {"installed"}
    checked = next(s["detail"] for s in hook.lifecycle_record()["steps"] if s["step"] == "CHECKED")
    assert f"answered by Spark {installed_version()}" in checked  # the gate ran in the new line's Spark

    # State kept: a window opened under Spark 3.5 before the stop is emitted by 4.x with its full count.
    stopping_at = next(s["at"] for s in hook.lifecycle_record()["steps"] if s["step"] == "STOPPING")
    straddling = window_of(feeder.seq_at(stopping_at - 5))
    wait_for(lambda: straddling in _windows(committed_sink_files(out)), 150,
             f"Spark 4.x emits window {straddling}, opened under Spark 3.5")

    # A downgrade to Spark 3.5 is refused by 3.5's own gate (a gate driver on the 3.5 runtime): 3.5 would
    # resume this checkpoint, but cannot check the state 4.x wrote (docs/spark-runtimes.md); v2 runs on.
    running = hook.driver_record().run_id
    refused = LifecycleRunner(spec_of(streams, "v1").with_version("v1-again"), Action.UPGRADE, OPTIONS).run()
    assert refused.step == Step.REFUSED, (refused.step, refused.error)
    assert [s["step"] for s in refused.steps] == ["PLANNED", "REFUSED"]
    assert refused.verdict == "COMPATIBLE_WITH_WARNINGS" and "SPARK_DOWNGRADE" in refused.error, refused.error
    assert hook.driver_record().run_id == running and hook.alive(hook.driver_record())

    last = feeder.stop()
    expected = expected_windows(last)
    wait_for(lambda: read_window_counts(out) == expected, 150,
             f"every closed window of events 0..{last} written exactly once across both Spark lines")
    assert straddling in {w for w, _ in expected}


def _windows(files: list[str]) -> set[str]:
    import pyarrow.parquet as pq

    return {v.isoformat() for f in files for v in pq.read_table(f).column("window_start").to_pylist()}
