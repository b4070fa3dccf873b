"""A rollback's restart of the old version (RESTARTING_OLD) waits like every other lifecycle wait: in
deferrable mode the task defers to the trigger instead of holding a worker slot for up to the probation
window (it used to poll with sleep in the worker)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

from airflow_streaming.sealing import sealed
from airflow_streaming.control import contract
from airflow_streaming.control.process import process_start_time
from airflow_streaming.control.lifecycle_lock import LifecycleLock
from airflow_streaming.lifecycle.record import Action, LifecycleRecord, Step
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner
from airflow_streaming.lifecycle.waits import HEALTHY, Wait, WaitNeeded, wait_over
from control_fixtures import deployed_stream

OLD_RUN = "20260105T000000Z-0000dddd"


def test_restarting_old_defers_instead_of_holding_the_worker(tmp_path):
    spec, hook = deployed_stream(tmp_path)
    # The old version's rollback run is already submitted and alive (so nothing is submitted here).
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "--stream", "s1",
                             "--control-dir", spec.control_dir, "--run-id", OLD_RUN])
    try:
        time.sleep(0.1)
        record = contract.DriverRecord(
            run_id=OLD_RUN, stream="s1", version="v1", application="device_signals", host=socket.gethostname(),
            command=f"spark-submit --run-id {OLD_RUN}", log_path="l", submitted_at=time.time(),
            checkpoint_location=spec.checkpoint_location,
            handle={"pid": proc.pid, "start_time": process_start_time(proc.pid)})
        hook.storage.unguarded.write_atomic(hook.paths.driver, record.to_json())
        runner = LifecycleRunner(spec.with_version("v2", application="device_signals_v2"), Action.UPGRADE,
                                 LifecycleOptions(defer=True, poll_s=0.2))
        runner._locks = [LifecycleLock.acquire(hook.storage, hook.paths.root, "upgrade")]
        action = LifecycleRecord(stream="s1", action=Action.UPGRADE, from_spec=sealed(spec.to_dict()),
                                 to_spec=sealed(spec.with_version("v2").to_dict()))
        for step in (Step.CHECKED, Step.STOPPING, Step.ROLLING_BACK, Step.RESTORED, Step.RESTARTING_OLD):
            action.advance(step)
        action.rollback_run_id = OLD_RUN
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                with runner._acting(action):  # the runner opens the step's permit around each step
                    runner._restarting_old(action)
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - the outcome is the test's
                outcome.append(exc)

        worker = threading.Thread(target=run, daemon=True)
        started = time.monotonic()
        worker.start()
        worker.join(20)
        assert outcome, "RESTARTING_OLD blocked the worker instead of deferring"
        assert isinstance(outcome[0], WaitNeeded), outcome
        wait = outcome[0].wait
        assert wait.kind == HEALTHY and wait.run_id == OLD_RUN and time.monotonic() - started < 20
        assert runner.load_record().waiting["kind"] == HEALTHY  # saved for the resumed task
        assert not wait_over(Wait.from_dict(wait.to_dict()))  # alive, no healthy status yet
        proc.kill()
        proc.wait()
        assert wait_over(Wait.from_dict(wait.to_dict()))  # ended: the runner decides (ROLLBACK_FAILED)
        runner.lock.release()
    finally:
        proc.kill()
        proc.wait()
