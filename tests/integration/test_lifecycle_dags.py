"""The upgrade-window and manual-operations DAGs under `airflow dags test`, with the task killed mid-action.

Covers every action of the operations form: deploy (through the window), upgrade, rollback, restart,
status and stop. The upgrade's task is killed by a named fault point between the new driver's
submission and its record; the rollback's by a SIGKILL when the record reaches PROBATION.

Real Airflow (metadata DB, DAG parsing, Params), real Spark drivers, real SIGKILLs of the Airflow
process group. Throughout, a monitor samples every local driver process of the stream: there is never
more than one run alive, and each run was submitted once (one driver log per run).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from airflow_streaming import faults
from spark_jobs.outputs import read_window_counts
from signals import Feeder, expected_windows
from soak import DriverMonitor
from streams import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.airflow]


def desired_state(streams, wanted: str) -> str:
    args = ["--input", streams.path("input", "signals"), "--output", streams.path("output", "signals"),
            "--window", "1 minute", "--watermark", "30 seconds"]
    doc = {
        "defaults": {"control_location": streams.path("control"), "master": "local[2]", "trigger_interval": 1,
                     "heartbeat_interval": 1, "stop_timeout": 60, "startup_timeout": 180,
                     "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "false"}},
        "streams": {"signals": {
            "version": wanted, "probation": {"min_batches": 2, "window": "2 minutes"},
            "spec": {"checkpoint_location": streams.path("checkpoints", "signals")},
            "versions": {"v1": {"application": "device_signals", "application_args": args},
                         "v2": {"application": "device_signals_v2", "application_args": args}}}},
    }
    path = Path(streams.path("desired_state.yaml"))
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def airflow(*args: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def operation(conf: dict) -> list[str]:
    return [sys.executable, "-m", "airflow", "dags", "test", "stream_operations", "-c", json.dumps(conf)]


def record_of(streams) -> dict:
    return json.loads(Path(streams.path("control", "signals", "lifecycle.json")).read_text())


def kill_when(streams, cmd: list[str], env: dict, steps: set[str]) -> dict:
    """Run ``cmd`` and SIGKILL its whole process group as soon as the lifecycle record reaches ``steps``."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        def reached() -> bool:
            try:
                return record_of(streams)["step"] in steps and record_of(streams)["id"] not in seen
            except (OSError, ValueError):
                return False
        seen = set()
        try:
            seen.add(record_of(streams)["id"])
        except (OSError, ValueError):
            pass
        wait_for(reached, 300, f"the Airflow task to reach {steps}", interval=0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    return record_of(streams)


@pytest.mark.long(covered_by="tests/integration/test_soak.py::"
                           "test_upgrade_task_killed_at_named_steps_resumes_with_one_driver_exactly_once")
def test_killed_upgrade_and_rollback_tasks_resume_with_one_driver_at_all_times(streams, airflow_db):
    env = {**os.environ, "AIRFLOW_STREAMING_DESIRED_STATE": desired_state(streams, "v1")}
    hook = streams.hook(streams.spec("signals", "device_signals", []))  # for cleanup and inspection
    feeder = Feeder(streams.path("input", "signals"))
    feeder.feed(40)
    logs = Path(streams.path("control", "signals", "logs"))
    with DriverMonitor("signals") as monitor:
        # The upgrade window deploys the never-deployed stream (its wanted version v1).
        run = airflow("dags", "test", "stream_upgrade_window", env=env)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert "signals: - -> v1: DEPLOYED" in run.stdout + run.stderr
        feeder.start()
        wait_for(lambda: read_window_counts(streams.path("output", "signals")), 120, "v1 writes windows")

        # Upgrade to v2 from the manual-operations form; the task is killed at the narrowest point: the
        # new driver submitted, its record not yet written (stop 30's CI met it by chance). The resumed
        # task must adopt that driver: not submit a second one, and not lose sight of it (which left the
        # stream down: probation judged the old run's record, and the rollback could not kill the new one).
        fault_file = Path(streams.path("faults.json"))
        fault_file.write_text(json.dumps([{"point": "hook.submitted", "action": "kill",
                                           "once": str(fault_file) + ".fired"}]))
        faulty = {**env, faults.ENV: str(fault_file)}
        killed_run = subprocess.run(operation({"stream": "signals", "action": "upgrade", "version": "v2"}),
                                    env=faulty, capture_output=True, text=True, timeout=600)
        fault_file.write_text("[]")
        killed = record_of(streams)
        assert killed_run.returncode == -signal.SIGKILL, killed_run.stdout[-3000:] + killed_run.stderr[-3000:]
        assert killed["action"] == "upgrade" and killed["step"] == "STARTING", killed
        assert hook.driver_record().run_id != killed["new_run_id"]  # the kill came before the record
        assert hook.processes_of_run(killed["new_run_id"])  # and after the submission
        resumed = subprocess.run(operation({"stream": "signals", "action": "upgrade", "version": "v2"}), env=env,
                                 capture_output=True, text=True, timeout=600)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        assert "adopted" in resumed.stdout + resumed.stderr
        upgrade = record_of(streams)
        assert upgrade["id"] == killed["id"] and upgrade["step"] == "SUCCEEDED"
        assert upgrade["new_run_id"] == killed["new_run_id"] == hook.driver_record().run_id  # adopted, not resubmitted
        resumed_note = next(s["detail"] for s in upgrade["steps"] if s["step"] == "RESUMED")
        assert "took over the stale lock" in resumed_note
        assert hook.deployed()["spec"]["version"] == "v2"

        # Roll back to v1 from the form; the task is killed after the new driver started.
        killed = kill_when(streams, operation({"stream": "signals", "action": "rollback"}), env, {"PROBATION"})
        resumed = subprocess.run(operation({"stream": "signals", "action": "rollback"}), env=env,
                                 capture_output=True, text=True, timeout=600)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        rollback = record_of(streams)
        assert rollback["id"] == killed["id"] and rollback["action"] == "rollback" and rollback["step"] == "SUCCEEDED"
        assert hook.deployed()["spec"]["version"] == "v1"
        assert rollback["new_run_id"] == killed["new_run_id"]  # the resumed task did not submit again

        # A restart of the deployed spec goes through the same machinery (no gate for an identical spec).
        restart = subprocess.run(operation({"stream": "signals", "action": "restart"}), env=env,
                                 capture_output=True, text=True, timeout=600)
        assert restart.returncode == 0, restart.stdout[-3000:] + restart.stderr[-3000:]
        assert record_of(streams)["action"] == "restart" and record_of(streams)["step"] == "SUCCEEDED"

        status = airflow("dags", "test", "stream_operations", "-c", json.dumps({"stream": "signals"}), env=env)
        assert status.returncode == 0, status.stdout[-3000:] + status.stderr[-3000:]
        assert "'deployed_version': 'v1'" in status.stdout + status.stderr
        last = feeder.stop()
        expected = expected_windows(last)
        wait_for(lambda: read_window_counts(streams.path("output", "signals")) == expected, 150,
                 f"every closed window of events 0..{last} written exactly once")
        stop = airflow("dags", "test", "stream_operations", "-c", json.dumps({"stream": "signals", "action": "stop"}),
                       env=env)
        assert stop.returncode == 0, stop.stdout[-3000:] + stop.stderr[-3000:]
        assert hook.running_driver() is None and hook.batch_position().clean

    assert monitor.max_alive == 1, f"{monitor.max_alive} drivers of one checkpoint were alive at once"
    # Four runs (v1, v2, v1 again, v1 restarted), each submitted exactly once.
    assert len(monitor.seen) == 4 and len(list(logs.glob("*.log"))) == 4
    assert read_window_counts(streams.path("output", "signals")) == expected  # nothing more after the stop
    history = json.loads(Path(streams.path("control", "signals", "history.json")).read_text())
    assert [(h["action"], h["to_version"], h["outcome"]) for h in history] == [
        ("deploy", "v1", "SUCCEEDED"), ("upgrade", "v2", "SUCCEEDED"), ("rollback", "v1", "SUCCEEDED"),
        ("restart", "v1", "SUCCEEDED"), ("stop", "v1", "SUCCEEDED")]


def test_operations_form_rejects_invalid_choices(streams, airflow_db):
    env = {**os.environ, "AIRFLOW_STREAMING_DESIRED_STATE": desired_state(streams, "v1")}
    bad_action = airflow("dags", "test", "stream_operations", "-c", json.dumps({"stream": "signals", "action": "explode"}),
                         env=env)
    assert bad_action.returncode != 0 and "explode" in bad_action.stdout + bad_action.stderr
    bad_stream = airflow("dags", "test", "stream_operations", "-c", json.dumps({"stream": "nope"}), env=env)
    assert bad_stream.returncode != 0 and "nope" in bad_stream.stdout + bad_stream.stderr
    # A version the stream does not list passes the form (versions of all streams) but fails clearly.
    from airflow_streaming.lifecycle.desired_state import load_desired_state
    from airflow_streaming.lifecycle.operations import operate
    from airflow_streaming.spec import SpecError

    with pytest.raises(SpecError, match="has no version 'v9'.*listed: v1, v2"):
        operate(load_desired_state(env["AIRFLOW_STREAMING_DESIRED_STATE"]), "signals", "upgrade", "v9")
