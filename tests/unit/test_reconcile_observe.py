"""The I/O half of the reconcile core: observe() reads real control files (and real processes) into the
observation that decide() judges. No JVM: the files are as a real run leaves them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from airflow_streaming.control import contract
from airflow_streaming.control.process import process_start_time
from airflow_streaming.reconcile.decision import Act
from airflow_streaming.reconcile.observation import ActionState, Desired, Lease, Liveness, RecordState, RunStatus
from airflow_streaming.lifecycle.observe import next_step, observe
from airflow_streaming.supervision.policy import RestartPolicy
from control_fixtures import deployed_stream

POLICY = RestartPolicy(backoff_initial_s=0)
NEW_RUN = "20260102T000000Z-0000bbbb"


@pytest.fixture
def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start_time(proc.pid)
    proc.wait()
    return proc.pid, start


@pytest.fixture
def live_pid(tmp_path):
    """A live driver of NEW_RUN of stream s1 (its command line names the stream and its control directory)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "--stream", "s1",
                             "--control-dir", str(tmp_path / "control" / "s1"), "--run-id", NEW_RUN])
    time.sleep(0.1)
    yield proc.pid, process_start_time(proc.pid)
    proc.kill()
    proc.wait()


def submitted(hook, run_id: str, pid: int, start: float | None, submitted_at: float | None = None) -> None:
    """driver.json of a local run submitted from this host (as LocalTarget writes it)."""
    record = contract.DriverRecord(
        run_id=run_id, stream="s1", version="v1", application="device_signals", host=socket.gethostname(),
        command=f"spark-submit ... --run-id {run_id}", log_path="l", submitted_at=submitted_at or time.time(),
        checkpoint_location=hook.spec.checkpoint_location, handle={"pid": pid, "start_time": start})
    hook.storage.unguarded.write_atomic(hook.paths.driver, record.to_json())


def test_a_driver_killed_before_its_first_status_is_observed_gone_and_restarted(tmp_path, dead_pid):
    _, hook = deployed_stream(tmp_path)  # status.json is the previous run's (STOPPED)
    submitted(hook, NEW_RUN, *dead_pid)
    seen = observe(hook, POLICY)
    o = seen.observation
    assert (o.desired, o.action, o.record, o.liveness, o.status) == (
        Desired.RUNNING, ActionState.NONE, RecordState.PRESENT, Liveness.GONE, RunStatus.NONE), o
    assert seen.doc is None  # the previous run's status says nothing about this one
    assert seen.verdict.state.value == "FAILED"
    decision = seen.decide(POLICY)
    assert decision.act == Act.RESTART and "before it reported any status" in decision.reason
    assert next_step(hook, POLICY)["act"] == "RESTART"
    assert "standby" not in next_step(hook, POLICY)  # no hot standby wanted: none shown


def test_a_live_driver_that_has_not_reported_yet_is_starting(tmp_path, live_pid):
    _, hook = deployed_stream(tmp_path)
    submitted(hook, NEW_RUN, *live_pid)
    o = observe(hook, POLICY).observation
    assert (o.liveness, o.status, o.start_overdue) == (Liveness.ALIVE, RunStatus.NONE, False), o
    assert observe(hook, POLICY).decide(POLICY).act == Act.OBSERVE
    submitted(hook, NEW_RUN, *live_pid, submitted_at=time.time() - hook.spec.startup_timeout - 5)
    assert observe(hook, POLICY).observation.start_overdue


def test_an_unfinished_recovery_is_abandoned_when_its_lock_is_free_and_under_way_when_held(tmp_path, dead_pid, live_pid):
    from airflow_streaming.control.lifecycle_lock import LOCK_NAME

    _, hook = deployed_stream(tmp_path)
    submitted(hook, NEW_RUN, *dead_pid)
    record = {"id": "a1", "stream": "s1", "action": "recover", "step": "STARTING", "steps": []}
    hook.storage.unguarded.write_atomic(f"{hook.paths.root}/lifecycle.json", json.dumps(record).encode())
    o = observe(hook, POLICY).observation
    assert o.action == ActionState.ABANDONED_RECOVER and "recover a1 at STARTING" in o.step
    assert observe(hook, POLICY).decide(POLICY).act == Act.RESUME
    now = time.time()
    holder = {"action": "recover", "owner": "bob", "pid": live_pid[0], "pid_start_time": live_pid[1],
              "host": socket.gethostname(), "acquired_at": now, "renewed_at": now, "ttl": 600.0}
    hook.storage.unguarded.write_atomic(f"{hook.paths.root}/{LOCK_NAME}", json.dumps(holder).encode())
    o = observe(hook, POLICY).observation
    assert o.action == ActionState.UNDER_WAY
    assert observe(hook, POLICY, holding_lock=True).observation.action == ActionState.ABANDONED_RECOVER
    assert observe(hook, POLICY).decide(POLICY).act == Act.OBSERVE


def test_a_stop_action_makes_the_stream_stopped_by_the_user(tmp_path, dead_pid):
    _, hook = deployed_stream(tmp_path)
    submitted(hook, NEW_RUN, *dead_pid)
    record = {"id": "s1", "stream": "s1", "action": "stop", "step": "SUCCEEDED", "steps": []}
    hook.storage.unguarded.write_atomic(f"{hook.paths.root}/lifecycle.json", json.dumps(record).encode())
    seen = observe(hook, POLICY)
    assert seen.observation.desired == Desired.STOPPED
    assert seen.decide(POLICY).act == Act.NOTHING


def test_another_runs_fresh_lease_is_seen_and_blocks_a_restart(tmp_path, dead_pid, live_pid):
    _, hook = deployed_stream(tmp_path)
    submitted(hook, NEW_RUN, *dead_pid)
    lease = contract.Lease(run_id="20260103T000000Z-0000cccc", pid=live_pid[0], pid_start_time=live_pid[1],
                           host=socket.gethostname(), acquired_at=time.time(), renewed_at=time.time(), ttl=120.0)
    hook.storage.unguarded.write_atomic(hook.paths.lease, lease.to_json())
    o = observe(hook, POLICY).observation
    assert o.lease == Lease.OTHER_RUN, o
    assert observe(hook, POLICY).decide(POLICY).act != Act.RESTART


def test_garbage_and_unreadable_files_are_values_of_the_observation(tmp_path, dead_pid, inject):
    _, hook = deployed_stream(tmp_path)
    submitted(hook, NEW_RUN, *dead_pid)
    hook.storage.unguarded.write_atomic(hook.paths.status, b'{"stream": "s1", "run_')
    assert observe(hook, POLICY).observation.status == RunStatus.GARBAGE
    inject([{"point": "storage.read", "match": "driver.json", "action": "error", "errno": "EIO"}])
    o = observe(hook, POLICY).observation
    assert o.record == RecordState.UNREADABLE and o.liveness == Liveness.UNKNOWN
    assert observe(hook, POLICY).decide(POLICY).act not in (Act.RESTART, Act.RESUME, Act.GIVE_UP)
    assert os.path.exists(hook.paths.driver)
