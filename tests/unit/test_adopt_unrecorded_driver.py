"""A driver submitted but never recorded (its submitter killed between the two, as stop 30's CI met it)
is adopted: its record written after all, or a clear refusal when that could put it beside another
driver or when the target cannot tell which driver it is.

Real processes on the local target: the spec's ``cluster.spark_binary`` is a stand-in spark-submit (a
shell script that execs a sleeping Python carrying the runtime's arguments, ``--run-id`` among them),
because what is under test is the record and the processes, not Spark; the named fault point
``hook.submitted`` fails the submission right after the target started the driver (the real
SIGKILL there is ``tests/integration/test_lifecycle_dags.py``)."""

from __future__ import annotations

import json
import stat
import sys
import time

import pytest

from airflow_streaming import faults
from airflow_streaming.control import contract
from airflow_streaming.exceptions import DriverStartError, StreamAlreadyRunningError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.control.lifecycle_lock import LifecycleLock
from airflow_streaming.spec import StreamSpec
from airflow_streaming.targets.base import Liveness
from airflow_streaming.targets.local import run_processes
import stream_actions

RUN = "20261126T000000Z-ad0b7ed0"


@pytest.fixture
def hook(tmp_path, monkeypatch):
    fake = tmp_path / "spark-submit"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import time; time.sleep(120)' \"$@\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    fault_file = tmp_path / "faults.json"
    fault_file.write_text(json.dumps([{"point": "hook.submitted", "match": "-ad0b7ed", "action": "error",
                                       "errno": "EIO"}]))
    monkeypatch.setenv(faults.ENV, str(fault_file))
    spec = StreamSpec(name="s1", application="device_signals", checkpoint_location=str(tmp_path / "ckpt"),
                      control_location=str(tmp_path / "control"), master="local[1]",
                      cluster={"spark_binary": str(fake)})
    hook = SparkStreamHook(spec)
    yield hook
    for proc in run_processes(RUN) + run_processes(RUN.replace("ad0b7ed0", "0ther0ne")):
        proc.kill()


def submitted_unrecorded(hook: SparkStreamHook, lock: LifecycleLock, standby: bool = False) -> None:
    before = hook.standby_record() if standby else hook.driver_record()
    with pytest.raises(OSError):
        stream_actions.submit(hook, run_id=RUN, standby=standby, lock=lock)
    deadline = time.monotonic() + 10
    while not run_processes(RUN) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hook.processes_of_run(RUN), "the stand-in driver did not start"
    assert (hook.standby_record() if standby else hook.driver_record()) == before  # nothing recorded of RUN


def lock_of(hook: SparkStreamHook) -> LifecycleLock:
    return LifecycleLock.acquire(hook.storage, hook.paths.root, "upgrade", "test")


def test_a_submitted_unrecorded_driver_is_adopted_and_can_then_be_killed(hook):
    lock = lock_of(hook)
    submitted_unrecorded(hook, lock)
    record = stream_actions.adopt(hook, RUN, lock)
    (root,) = [p for p in run_processes(RUN)]
    assert record.handle == {"pid": root.pid, "start_time": contract.process_start_time(root.pid)}
    assert hook.driver_record() == record and hook.deployed()["run_id"] == RUN
    assert hook.target_of(record).state(record).liveness == Liveness.ALIVE
    assert "adopted driver" in record.command and record.log_path == hook.driver_log_path(RUN)
    stream_actions.kill(hook, record, 5.0, lock=lock, keep_marker=True)
    assert hook.processes_of_run(RUN) == []


def test_a_standby_submitted_unrecorded_is_adopted_as_the_standby_and_promoted(hook):
    lock = lock_of(hook)
    submitted_unrecorded(hook, lock, standby=True)
    record = stream_actions.adopt(hook, RUN, lock, standby=True)
    assert hook.standby_record() == record and hook.driver_record() is None  # not the stream's driver yet
    assert stream_actions.promote(hook, RUN, lock).run_id == RUN and hook.driver_record().run_id == RUN


def test_a_standby_is_never_adopted_beside_another_live_standby(hook):
    lock = lock_of(hook)
    other = RUN.replace("ad0b7ed0", "0ther0ne")
    submitted_unrecorded(hook, lock, standby=True)
    stream_actions.submit(hook, run_id=other, standby=True, lock=lock)  # no fault for this run id: recorded
    with pytest.raises(StreamAlreadyRunningError, match="already has a standby driver"):
        stream_actions.adopt(hook, RUN, lock, standby=True)
    assert hook.standby_record().run_id == other


def test_never_adopted_beside_a_driver_that_holds_the_lease(hook):
    lock = lock_of(hook)
    submitted_unrecorded(hook, lock)
    contract.acquire_lease(hook.storage.unguarded, hook.paths, RUN.replace("ad0b7ed0", "0ther0ne"), 60.0)  # a live holder
    with pytest.raises(StreamAlreadyRunningError, match="not adopting the unrecorded driver"):
        stream_actions.adopt(hook, RUN, lock)
    assert hook.driver_record() is None
    # A standby runs beside the active driver by design: that one is adopted.
    assert stream_actions.adopt(hook, RUN, lock, standby=True).run_id == RUN


def test_a_driver_the_target_cannot_single_out_is_refused_and_nothing_recorded(hook):
    lock = lock_of(hook)
    submitted_unrecorded(hook, lock)
    with stream_actions.step_permit(hook, lock=lock):
        twin = hook.target.submit(hook.launch_plan(RUN))  # a second, unrelated process of the same run
    deadline = time.monotonic() + 10
    while twin["pid"] not in {p.pid for p in run_processes(RUN)} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(run_processes(RUN)) == 2
    with pytest.raises(DriverStartError, match="cannot tell which driver it is"):
        stream_actions.adopt(hook, RUN, lock)
    assert hook.driver_record() is None and hook.unrecorded_record(RUN) is None
