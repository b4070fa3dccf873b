"""The hot standby's takeover as the driver runtime carries it out (spark_jobs/runtime/standby.py,
``Standby.failover_check``), in a real separate process, without a JVM: it takes the stream's lifecycle
lock, judges again under it, and swaps lease, record and marker; killed at the named fault point
``standby.takeover`` (holding the lock, before the first swap) it changes nothing, and the supervisor's
next look restarts the crashed run like any other crash."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from airflow_streaming import faults
from airflow_streaming.control import contract
from airflow_streaming.control.contract import DriverRecord, Lease
from airflow_streaming.control.lifecycle_lock import LOCK_NAME, LifecycleLock
from airflow_streaming.control.process import process_start_time
from airflow_streaming.reconcile.decision import Act
from airflow_streaming.reconcile.observation import Standby
from airflow_streaming.lifecycle.observe import observe
from airflow_streaming.sealing import sealed
from airflow_streaming.supervision.policy import RestartPolicy
from control_fixtures import RUN_ID, deployed_stream

REPO = Path(__file__).resolve().parents[2]
STANDBY = "20260101T000001Z-0000bbbb"
POLICY = RestartPolicy(backoff_initial_s=0)

CHECK = """
import json, logging, sys
logging.basicConfig(level=logging.INFO)
sys.path.insert(0, {repo!r})
from spark_jobs.runtime.launcher import Driver, parse_args
ns = parse_args(["--stream", "s1", "--version", "v1", "--run-id", {run!r}, "--control-dir", {ctl!r},
                 "--checkpoint", {ckpt!r}, "--job", "device_signals", "--standby", "--failover"])
print(json.dumps({{"outcome": Driver(ns).standby.failover_check()}}), flush=True)
"""


@pytest.fixture
def crashed(tmp_path):
    """A deployed stream (with a hot standby wanted) whose run RUN_ID crashed: its lease left by a process
    that is gone, marker and record still naming it; the standby's record written by its submitter."""
    spec, hook = deployed_stream(tmp_path, with_checkpoint=False)
    doc = json.loads(hook.storage.read_bytes(hook.deployed_path))
    doc["spec"] = sealed({**spec.to_dict(), "hot_standby": True})
    hook.storage.unguarded.write_atomic(hook.deployed_path, json.dumps(doc).encode())
    contract.write_marker(hook.storage.unguarded, hook.paths, RUN_ID, "v1")
    contract.write_status(hook.storage.unguarded, hook.paths, contract.StatusDocument(  # it was running when it crashed
        stream="s1", version="v1", run_id=RUN_ID, state=contract.RUNNING, pid=1, host=socket.gethostname(),
        started_at=1.0, heartbeat_at=time.time(), ready=True))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start_time(dead.pid)
    dead.wait()
    for run_id, path in ((RUN_ID, hook.paths.driver), (STANDBY, hook.paths.standby_driver)):
        record = DriverRecord(run_id=run_id, stream="s1", version="v1", application="device_signals",
                              host=socket.gethostname(), command=f"spark-submit ... --run-id {run_id}", log_path="l",
                              submitted_at=time.time(), checkpoint_location=spec.checkpoint_location, target="local",
                              handle={"pid": dead.pid, "start_time": start})
        hook.storage.unguarded.write_atomic(path, record.to_json())
    now = time.time()
    hook.storage.unguarded.write_atomic(hook.paths.lease, Lease(RUN_ID, dead.pid, start, socket.gethostname(), now, now,
                                                      120).to_json())
    hook.storage.unguarded.write_atomic(hook.paths.standby, json.dumps(
        {"run_id": STANDBY, "state": "READY", "failover": True, "at": now}).encode())
    return spec, hook


def failover_check(spec, hook, tmp_path, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ}
    if fault:
        path = tmp_path / "faults.json"
        path.write_text(json.dumps([{"point": "standby.takeover", "match": STANDBY, "action": fault}]))
        env[faults.ENV] = str(path)
    script = CHECK.format(repo=str(REPO), run=STANDBY, ctl=hook.paths.root,
                          ckpt=spec.checkpoint_location)
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)


def files(hook) -> dict[str, bytes | None]:
    return {p: hook.storage.read_bytes(p) for p in (hook.paths.marker, hook.paths.driver, hook.paths.lease)}


def test_the_driver_takes_over_a_crashed_run_under_the_lifecycle_lock(crashed, tmp_path):
    spec, hook = crashed
    done = failover_check(spec, hook, tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[-1]) == {"outcome": "took_over"}, done.stderr
    assert contract.read_marker(hook.storage, hook.paths)["run_id"] == STANDBY
    assert hook.driver_record().run_id == STANDBY and contract.read_lease(hook.storage, hook.paths).run_id == STANDBY
    assert hook.storage.read_bytes(f"{hook.paths.root}/{LOCK_NAME}") is None  # the lock given back


def test_a_takeover_waits_for_a_lifecycle_action_that_holds_the_lock(crashed, tmp_path):
    spec, hook = crashed
    before = files(hook)
    with LifecycleLock.acquire(hook.storage, hook.paths.root, "supervise", "a supervisor pass"):
        done = failover_check(spec, hook, tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[-1]) == {"outcome": None}, done.stderr
    assert "the takeover waits for it" in done.stderr
    assert files(hook) == before


def test_a_standby_killed_holding_the_lock_changes_nothing_and_the_crash_is_restarted(crashed, tmp_path):
    spec, hook = crashed
    before = files(hook)
    done = failover_check(spec, hook, tmp_path, fault="kill")
    assert done.returncode == -9, (done.returncode, done.stderr)
    assert "fault injected at standby.takeover" in done.stderr
    assert files(hook) == before  # lease, record and marker still the crashed run's
    assert hook.storage.read_bytes(f"{hook.paths.root}/{LOCK_NAME}") is not None  # left by the killed standby
    seen = observe(hook, POLICY)  # the lock's holder is gone: no action is under way
    assert seen.observation.standby == Standby.MISSING  # the standby's process is gone too
    assert seen.decide(POLICY).act == Act.RESTART
    with LifecycleLock.acquire(hook.storage, hook.paths.root, "supervise", "the next pass") as lock:
        assert lock.took_over is not None and lock.took_over["action"] == "failover"


def test_a_standby_without_its_own_record_takes_the_lock_again_only_after_a_while(crashed, monkeypatch):
    """A standby whose record is missing (its submitter died before writing it, until a pass adopts it)
    does not take the takeover, nor the stream's lock at every 50 ms look: once a second."""
    from spark_jobs.runtime.launcher import Driver, parse_args

    spec, hook = crashed
    hook.storage.unguarded.delete(hook.paths.standby_driver)
    before = files(hook)
    taken = []
    real_acquire = LifecycleLock.acquire
    monkeypatch.setattr(LifecycleLock, "acquire", lambda *a, **k: (taken.append(1), real_acquire(*a, **k))[1])
    monkeypatch.setattr("spark_jobs.runtime.standby.Standby.OWN_RECORD_RETRY_S", 0.3)
    # The standby's own clock, moved by the test: twenty looks take no time whatever the machine's load.
    clock = [1000.0]
    standby_time = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
    standby_time.monotonic = lambda: clock[0]
    monkeypatch.setattr("spark_jobs.runtime.standby.time", standby_time)
    standby = Driver(parse_args(["--stream", "s1", "--version", "v1", "--run-id", STANDBY, "--control-dir",
                                hook.paths.root, "--checkpoint", spec.checkpoint_location, "--job", "device_signals",
                                "--standby", "--failover"])).standby
    assert [standby.failover_check() for _ in range(20)] == [None] * 20
    assert len(taken) == 1  # twenty looks, one lock
    clock[0] += 0.29
    assert standby.failover_check() is None and len(taken) == 1
    clock[0] += 0.06
    assert standby.failover_check() is None and len(taken) == 2
    assert files(hook) == before and hook.storage.read_bytes(f"{hook.paths.root}/{LOCK_NAME}") is None
    hook.storage.unguarded.write_atomic(hook.paths.standby_driver, DriverRecord(
        run_id=STANDBY, stream="s1", version="v1", application="device_signals", host=socket.gethostname(),
        command=f"spark-submit ... --run-id {STANDBY}", log_path="l", submitted_at=time.time(),
        checkpoint_location=spec.checkpoint_location, target="local", handle={"pid": 1, "start_time": None}).to_json())
    clock[0] += 0.35
    assert standby.failover_check() == "took_over"  # recorded (adopted) again: it takes over
