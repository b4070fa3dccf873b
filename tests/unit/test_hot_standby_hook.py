"""The hot standby seen from Airflow (hooks/hot_standby.py, lifecycle/observe.py): real processes on the
local target and real control files, no JVM.

The spec's ``cluster.spark_binary`` is a stand-in spark-submit (a shell script that execs a sleeping
Python carrying the runtime's arguments, ``--run-id`` among them): what is under test is the records, the
processes and the observation, not Spark (``tests/integration/test_hot_standby.py`` is the real one)."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
import time

import pytest

from airflow_streaming.control import contract, takeover
from airflow_streaming.control.contract import Lease
from airflow_streaming.control.lifecycle_lock import LifecycleLock
from airflow_streaming.control.process import process_start_time
from airflow_streaming.exceptions import StreamAlreadyRunningError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.reconcile.decision import Act
from airflow_streaming.reconcile.observation import Liveness, Standby
from airflow_streaming.lifecycle.observe import STANDBY_RETRY_S, TAKEOVER_WINDOW_S, next_step, observe
from airflow_streaming.spec import StreamSpec
from airflow_streaming.supervision.policy import RestartPolicy
import stream_actions

POLICY = RestartPolicy(backoff_initial_s=0)


@pytest.fixture
def hook(tmp_path):
    fake = tmp_path / "spark-submit"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import time; time.sleep(120)' \"$@\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    spec = StreamSpec(name="s1", application="device_signals", checkpoint_location=str(tmp_path / "ckpt"),
                      control_location=str(tmp_path / "control"), master="local[1]",
                      cluster={"spark_binary": str(fake)}, hot_standby=True)
    hook = SparkStreamHook(spec)
    runs: list[str] = []
    yield hook, runs
    for run in runs:
        for record in (hook.driver_record(), hook.standby_record()):
            if record is not None and record.run_id == run:
                stream_actions.kill(hook, record, 5, keep_marker=True)


def lock_of(hook: SparkStreamHook) -> LifecycleLock:
    return LifecycleLock.acquire(hook.storage, hook.paths.root, "supervise", "test")


def active_and_standby(hook: SparkStreamHook, runs: list[str]):
    active = stream_actions.submit(hook)
    runs.append(active.run_id)
    with lock_of(hook) as lock:
        standby = stream_actions.prepare_hot_standby(hook, lock)
    runs.append(standby.run_id)
    return active, standby


def test_a_hot_standby_is_recorded_alive_and_never_doubled(hook):
    hook, runs = hook
    active, standby = active_and_standby(hook, runs)
    assert "--failover" in standby.command and "--standby" in standby.command
    state = hook.hot_standby_state()
    assert (state["run_id"], state["state"], state["failover"], state["alive"]) == (standby.run_id, "SUBMITTED",
                                                                                    True, True)
    with lock_of(hook) as lock, pytest.raises(StreamAlreadyRunningError, match="already has a standby"):
        stream_actions.prepare_hot_standby(hook, lock)
    # It took nothing of the active run's: record, marker, deployment.
    assert hook.driver_record() == active
    assert contract.read_marker(hook.storage, hook.paths)["run_id"] == active.run_id


def test_an_upgrades_standby_retires_the_hot_standby_and_leaves_the_active_run(hook):
    hook, runs = hook
    active, standby = active_and_standby(hook, runs)
    with lock_of(hook) as lock:  # a warm upgrade's PREPARING step: retire the hot standby, prepare its own
        assert stream_actions.retire_hot_standby(hook, "an upgrade", lock=lock) is not None
        upgrade = stream_actions.submit(hook, standby=True, lock=lock)
    runs.append(upgrade.run_id)
    assert not hook.processes_of_run(standby.run_id)
    assert hook.standby_record() == upgrade and hook.hot_standby_state() is None  # not a hot standby
    assert hook.processes_of_run(active.run_id) and hook.driver_record() == active
    assert contract.read_marker(hook.storage, hook.paths)["run_id"] == active.run_id


def test_a_standby_that_became_the_driver_never_blocks_the_next_one(hook):
    """A warm upgrade's promoted standby (or a hot standby that took over) stays in standby-driver.json while
    it runs as the stream's driver: before, a second warm upgrade in a row was refused ("already has a
    standby driver"), and no hot standby could be prepared beside it."""
    hook, runs = hook
    active = stream_actions.submit(hook)
    runs.append(active.run_id)
    hook.storage.unguarded.write_atomic(hook.paths.standby_driver, active.to_json())  # as promote() leaves it
    with lock_of(hook) as lock:
        standby = stream_actions.prepare_hot_standby(hook, lock)
    runs.append(standby.run_id)
    assert hook.processes_of_run(active.run_id) and hook.processes_of_run(standby.run_id)
    assert stream_actions.retire_hot_standby(hook, "test") is not None
    hook.storage.unguarded.write_atomic(hook.paths.standby_driver, active.to_json())
    assert stream_actions.retire_hot_standby(hook, "test") is None  # the recorded driver is never killed from here
    assert hook.processes_of_run(active.run_id)
    with lock_of(hook) as lock:  # the next warm upgrade's standby
        upgrade = stream_actions.submit(hook, standby=True, lock=lock)
    runs.append(upgrade.run_id)
    assert hook.standby_record() == upgrade and hook.processes_of_run(active.run_id)


def crashed(hook: SparkStreamHook, runs: list[str], renewed_ago: float = 1.0):
    """An active run that crashed (its processes killed, its lease left) beside a live hot standby."""
    active, standby = active_and_standby(hook, runs)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start_time(proc.pid)
    proc.wait()
    renewed = time.time() - renewed_ago
    hook.storage.unguarded.write_atomic(hook.paths.lease, Lease(active.run_id, proc.pid, start, socket.gethostname(), renewed,
                                                      renewed, 120).to_json())
    stream_actions.kill(hook, active, 5, keep_marker=True)
    return active, standby


def standby_ready(hook: SparkStreamHook, run_id: str) -> None:
    hook.storage.unguarded.write_atomic(hook.paths.standby, json.dumps(
        {"run_id": run_id, "state": "READY", "failover": True, "at": time.time()}).encode())


def test_a_crash_beside_a_ready_hot_standby_is_left_to_it_within_its_window_only(hook):
    hook, runs = hook
    active, standby = crashed(hook, runs)
    standby_ready(hook, standby.run_id)
    seen = observe(hook, POLICY, holding_lock=True)
    assert (seen.observation.liveness, seen.observation.standby) == (Liveness.GONE, Standby.TAKING_OVER)
    assert seen.decide(POLICY).act == Act.OBSERVE and "hot standby is taking over" in seen.decide(POLICY).reason
    shown = next_step(hook, POLICY)  # what the Streams page shows
    assert (shown["act"], shown["standby"]) == ("OBSERVE", "TAKING_OVER")
    # Past its window, the standby has not taken over: restarted like any crash (the standby stays: it
    # stands by for the new run).
    late = observe(hook, POLICY, now=time.time() + TAKEOVER_WINDOW_S + 5, holding_lock=True)
    assert late.observation.standby == Standby.READY and late.decide(POLICY).act == Act.RESTART


def test_a_takeover_is_observed_recorded_once_and_a_new_standby_wanted(hook):
    hook, runs = hook
    active, standby = crashed(hook, runs)
    standby_ready(hook, standby.run_id)
    judged = takeover.judge_takeover(hook.storage.unguarded, hook.paths, standby.run_id, "v1")
    assert judged.act == "take_over"
    own = hook.storage.read_bytes(hook.paths.standby_driver)
    pid = hook.standby_record().submit_pid  # the standby's process stands in for its Python driver
    assert takeover.take_over(hook.storage.unguarded, hook.paths, judged, standby.run_id, "v1", own, 120.0, pid,
                              process_start_time(pid), socket.gethostname()) is not None
    hook.storage.unguarded.write_atomic(hook.paths.standby, json.dumps(
        {"run_id": standby.run_id, "state": takeover.TOOK_OVER, "failover": True, "took_over_from": active.run_id,
         "at": time.time()}).encode())
    seen = observe(hook, POLICY, holding_lock=True)
    assert seen.observation.standby == Standby.TOOK_OVER and seen.observation.liveness == Liveness.ALIVE
    decision = seen.decide(POLICY)
    assert (decision.act, decision.event) == (Act.RECORD_FAILOVER, "FAILED_OVER")
    stream_actions.acknowledge_takeover(hook, standby.run_id)
    assert hook.standby_record() is None and hook.hot_standby_state() is None
    assert hook.driver_record().run_id == standby.run_id  # the record stays: it is the driver now
    assert observe(hook, POLICY, holding_lock=True).observation.standby == Standby.MISSING


def test_a_standby_that_failed_while_preparing_is_prepared_again_only_after_a_while(hook):
    """A standby that cannot start (no memory for a second driver) is not started again on every pass."""
    hook, runs = hook
    active, standby = active_and_standby(hook, runs)
    stream_actions.kill(hook, standby, 5, keep_marker=True)
    failed_at = time.time()
    hook.storage.unguarded.write_atomic(hook.paths.standby, json.dumps(
        {"run_id": standby.run_id, "state": "FAILED", "failover": True, "at": failed_at,
         "error": {"error_class": "OutOfMemoryError", "message": "Java heap space"}}).encode())
    status = contract.StatusDocument(stream="s1", version="v1", run_id=active.run_id, state=contract.RUNNING, pid=1,
                                     host=socket.gethostname(), started_at=failed_at, heartbeat_at=time.time(),
                                     ready=True)
    contract.write_status(hook.storage.unguarded, hook.paths, status)
    soon = observe(hook, POLICY, now=failed_at + 60, holding_lock=True)
    assert soon.observation.standby == Standby.READY and "failed while preparing" in soon.observation.detail
    later = observe(hook, POLICY, now=failed_at + STANDBY_RETRY_S + 1, holding_lock=True)
    assert later.observation.standby == Standby.MISSING


# ---------------------------------------------------------------- a kill only of one's own run (issue 35)
@pytest.fixture
def two_streams(tmp_path, hook):
    """Stream A (the fixture's ``s1``) and stream B beside it in the same control location, same spark-submit."""
    a, runs = hook
    b = SparkStreamHook(StreamSpec(name="s2", application="device_signals", checkpoint_location=str(tmp_path / "ckpt2"),
                                   control_location=a.spec.control_location, master="local[1]",
                                   cluster=dict(a.spec.cluster), hot_standby=True))
    return a, b, runs


def forged(record, stream: str):
    """``record`` of stream A as a forger writes it into stream B's control directory (the stream field too)."""
    import dataclasses

    return dataclasses.replace(record, stream=stream)


def assert_untouched(hook: SparkStreamHook, record) -> None:
    time.sleep(0.5)  # a SIGTERM to the stand-in ends it at once
    assert hook.processes_of_run(record.run_id), "stream A's driver was signalled"
    assert hook.target_of(record).state(record).alive


def test_retiring_a_forged_hot_standby_never_signals_another_streams_driver(two_streams, caplog):
    """The second review's proof: stream B's standby-driver.json naming stream A's running driver (pid, start
    time, run id copied) made B's retire SIGTERM A's driver. Now B's target asks the processes themselves:
    A's command line names stream s1 and its control directory, so B refuses, says so, and signals nothing."""
    a, b, runs = two_streams
    victim = stream_actions.submit(a)
    runs.append(victim.run_id)
    b.storage.unguarded.write_atomic(b.paths.standby_driver, forged(victim, "s2").to_json())
    b.storage.unguarded.write_atomic(b.paths.standby, json.dumps(
        {"run_id": victim.run_id, "state": "READY", "failover": True, "at": time.time()}).encode())
    state = b.target_of(victim).state(forged(victim, "s2"))
    assert state.liveness == Liveness.UNKNOWN and "s1" in state.detail, state
    outcome = stream_actions.retire_hot_standby(b, "an upgrade of s2")
    assert outcome is not None and outcome.startswith("refusing to kill") and "nothing was signalled" in outcome
    assert "'s1'" in outcome and victim.run_id in outcome, outcome
    assert "did not retire the hot standby" in caplog.text
    assert_untouched(a, victim)


def test_a_forged_driver_record_gets_a_refused_kill_and_a_record_of_another_stream_too(two_streams):
    a, b, runs = two_streams
    victim = stream_actions.submit(a)
    runs.append(victim.run_id)
    # driver.json of B naming A's run (stream field rewritten): B's stop ends in B's kill of that record.
    b.storage.unguarded.write_atomic(b.paths.driver, forged(victim, "s2").to_json())
    outcome = stream_actions.kill(b, b.driver_record(), 2)
    assert outcome.startswith("refusing to kill") and "control directory" in outcome, outcome
    # The record copied as it is (it says stream s1): refused before any process is looked at.
    outcome = stream_actions.kill(b, victim, 2)
    assert outcome.startswith("refusing to kill") and "names stream 's1'" in outcome, outcome
    # Nor does B adopt A's processes as an unrecorded driver of that run id.
    assert b.target.adopt(victim.run_id) is None and not b.processes_of_run(victim.run_id)
    assert_untouched(a, victim)
    # A's own kill still works.
    assert "SIGTERM" in stream_actions.kill(a, victim, 5, keep_marker=True)
    assert not a.processes_of_run(victim.run_id)


def test_a_driver_of_the_same_stream_name_in_another_control_location_is_not_ours(tmp_path, hook):
    a, runs = hook
    victim = stream_actions.submit(a)
    runs.append(victim.run_id)
    b = SparkStreamHook(StreamSpec(name="s1", application="device_signals", checkpoint_location=str(tmp_path / "c3"),
                                   control_location=str(tmp_path / "elsewhere"), master="local[1]",
                                   cluster=dict(a.spec.cluster)))
    outcome = stream_actions.kill(b, victim, 2)
    assert outcome.startswith("refusing to kill") and str(tmp_path / "control") in outcome, outcome
    assert_untouched(a, victim)
