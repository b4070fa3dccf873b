"""Stopping the running version and saving its checkpoint (a part of :class:`~.runner.LifecycleRunner`):
STOPPING -> STOPPED -> SNAPSHOTTED, a parallel transition's RETIRING, and stopping one run for good."""

from __future__ import annotations

import json
import logging
import time

from airflow_streaming.control import contract
from airflow_streaming.control.storage import StorageError, describe_os_error
from airflow_streaming.exceptions import LifecycleError
from airflow_streaming.hooks.stopping import StopReport
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle import snapshot as snapshots
from airflow_streaming.lifecycle.record import Action, LifecycleRecord, Step
from airflow_streaming.lifecycle.waits import GONE, Wait

log = logging.getLogger("airflow_streaming.lifecycle.runner")

GRACEFUL, KILLED, NOT_RUNNING = "graceful", "killed", "not running"
"""How a stop ended, as the STOPPED step's detail says it (``stopped at batch N (<how>...``)."""


def how_stopped(record: LifecycleRecord) -> str:
    """How this action's stop ended - :data:`GRACEFUL`, :data:`KILLED` or :data:`NOT_RUNNING` - from the
    record alone (a task that resumes the action at STOPPED did not see the stop): no run was running when
    the stop was asked for, a KILLING step was recorded, else what the STOPPED step's detail says."""
    if record.stopping_run_id is None:
        return NOT_RUNNING
    if any(s.get("step") == "KILLING" for s in record.steps):
        return KILLED
    stopped = [s.get("detail") or "" for s in record.steps if s.get("step") == Step.STOPPED.value]
    for how in (GRACEFUL, KILLED, NOT_RUNNING):
        if stopped and f"({how}" in stopped[-1]:
            return how
    return GRACEFUL


def stop_outcome(record: LifecycleRecord) -> str:
    """The detail of a stop action's SUCCEEDED step: that it stopped the stream and how, or that none ran."""
    how = how_stopped(record)
    if how == GRACEFUL:
        return f"stopped gracefully at batch {record.stop_batch}"
    if how == KILLED:
        return f"stopped by a kill after the stop timeout; last committed batch {record.stop_batch}"
    return f"not running; last committed batch {record.stop_batch}"


class StopSteps:
    """The stop side of an action (mixed into the runner)."""

    def _stopping(self, record: LifecycleRecord) -> None:
        hook = self.home
        timeout = hook.spec.stop_timeout if self.options.stop_timeout is None else self.options.stop_timeout
        if record.stop_requested_at is None:
            self._ensure_lock()
            # the run marker is gone: it stops at a batch boundary
            record.stopping_run_id = hook.begin_stop(self.permit_of(hook))
            record.stop_requested_at = time.time()
            self.save(record)
        # A warm upgrade's prepared driver takes over as soon as the old run can commit nothing more (it
        # stopped gracefully and gave its lease back), not once its JVM has exited too.
        quiesced_is_enough = bool(record.warm_start) and record.action != Action.STOP
        if record.stopping_run_id is not None:
            self._await(record, Wait(GONE, hook.spec.to_dict(), record.stopping_run_id,
                                     record.stop_requested_at + timeout,
                                     {"quiesced_is_enough": True} if quiesced_is_enough else {}))
        report = self._finish_stop(hook, record, timeout, self.options.kill_on_timeout, quiesced_is_enough)
        self.stop_report = report.to_dict()
        running = hook.running_driver()
        if running and quiesced_is_enough and record.stopping_run_id and hook.quiesced(record.stopping_run_id):
            log.info("run %s of %s has quiesced (stopped gracefully, lease given back); its process is still "
                     "exiting", record.stopping_run_id, record.stream)
            running = None
        if running:
            raise LifecycleError(f"stream {record.stream!r} still runs after the stop: {running}; "
                                 "run the action again to retry the stop")
        position = report.position or hook.batch_position()
        how = GRACEFUL if report.graceful else NOT_RUNNING if not report.was_running else KILLED
        if record.action == Action.STOP:
            record.stop_batch = position.last_committed
            self._advance(record, Step.STOPPED, f"stopped at batch {position.last_committed} ({how}"
                          f"{', checkpoint clean' if position.clean else ', batch ' + str(position.last_planned) + ' will be replayed'})")
            return
        record.stop_batch = position.last_committed
        replay = "" if position.clean else (f"; batch {position.last_planned} was in flight (planned, not "
                                            f"committed): {record.to_version} replays it with the same offsets")
        self._advance(record, Step.STOPPED, f"stopped at batch {position.last_committed} ({how}){replay}")

    def _stopped(self, record: LifecycleRecord) -> None:
        if record.action == Action.STOP:
            self._advance(record, Step.SUCCEEDED, stop_outcome(record))
            return
        if record.stop_batch is None:
            _, refusal = self._checkpoint_position(record, "the snapshot")
            if refusal:
                raise LifecycleError(refusal)
            record.new_run_id = record.new_run_id or contract.new_run_id()
            self._advance(record, Step.STARTING, "the stream never ran (empty checkpoint): nothing to snapshot")
            return
        location = self.home.checkpoint_locations()[0]
        snapshot_dir = self._snapshot_dir(record)
        try:
            manifest = snapshots.take_snapshot(location, snapshot_dir, record.sink_path, resolve=self.home.storage_of,
                                               snapshot_storage=self.storage.unguarded)
        except OSError as exc:
            snapshots.discard_incomplete(snapshot_dir, self.storage.unguarded)
            cause = exc if isinstance(exc, StorageError) else describe_os_error(snapshot_dir, exc,
                                                                                 "write the snapshot into")
            raise LifecycleError(f"the snapshot failed: {exc.strerror or exc}: {cause}") from exc
        record.snapshot = manifest.to_dict()
        # The snapshot is self-describing: the spec that ran on it restarts it (also in the record).
        self.storage.write_atomic(f"{manifest.snapshot_dir}/spec.json",
                                  json.dumps({"spec": record.from_spec, "run_id": record.old_run_id}, indent=1).encode())
        self._advance(record, Step.SNAPSHOTTED, f"{manifest.files} files at batch {manifest.batch_id}"
                      f"{' + file sink log' if manifest.sink_metadata else ''}")

    def _snapshot_dir(self, record: LifecycleRecord) -> str:
        return f"{self.home.paths.root}/snapshots/{record.id}"

    def _snapshotted(self, record: LifecycleRecord) -> None:
        record.new_run_id = record.new_run_id or contract.new_run_id()
        self._advance(record, Step.STARTING, f"run {record.new_run_id}")

    def _retiring(self, record: LifecycleRecord) -> None:
        hook = self.home
        if record.stop_requested_at is None:
            self._ensure_lock()
            record.stopping_run_id = hook.begin_stop(self.permit_of(hook))
            record.stop_requested_at = time.time()
            self.save(record)
        if record.stopping_run_id is not None:
            self._await(record, Wait(GONE, hook.spec.to_dict(), record.stopping_run_id,
                                     record.stop_requested_at + hook.spec.stop_timeout))
        report = self._finish_stop(hook, record, hook.spec.stop_timeout, True)
        if self.home.running_driver():
            raise LifecycleError(f"the old stream {record.stream!r} still runs after the stop; run the action again")
        record.stop_batch = report.position.last_committed if report.position else None
        self._advance(record, Step.SUCCEEDED, f"old stream stopped at batch {record.stop_batch}; "
                      f"{self.target.name} carries on")

    def _finish_stop(self, hook: SparkStreamHook, record: LifecycleRecord, timeout: float, kill_on_timeout: bool,
                     quiesced_is_enough: bool = False) -> StopReport:
        """The end of this step's stop: wait until the stop's deadline for its run to exit; past it, kill the run
        (or, with ``kill_on_timeout`` off, fail the step: :class:`TimeoutError`). The kill is noted in the
        record before it happens."""
        driver, stopped = hook.await_stop(record.stopping_run_id, record.stop_requested_at or time.time(), timeout,
                                          self.lock, quiesced_is_enough)
        if stopped:
            return hook.stop_report(driver, record.stop_requested_at or time.time())
        if not kill_on_timeout:
            raise TimeoutError(f"stream {hook.spec.name!r} did not stop within {timeout:.0f}s")
        assert driver is not None
        log.warning("stream %s did not stop within %.0fs: killing it", hook.spec.name, timeout)
        record.steps.append({"step": "KILLING", "at": time.time(),
                             "detail": f"run {driver.run_id} did not stop within {timeout:.0f}s"})
        self.save(record)
        note = hook.kill(self.permit_of(hook), driver)
        return hook.stop_report(driver, record.stop_requested_at or time.time(), killed=True, note=note)

    def _stop_run(self, hook: SparkStreamHook, run_id: str | None) -> None:
        """Stop the driver of ``run_id`` (gracefully, then by force) and make sure none of it is left."""
        if not run_id:
            return
        permit = self.permit_of(hook)
        record = hook.driver_record()
        if record is not None and record.run_id == run_id:
            requested_at = time.time()
            running = hook.begin_stop(permit)
            driver, stopped = hook.await_stop(running, requested_at, min(hook.spec.stop_timeout, 60.0), self.lock)
            if not stopped and driver is not None:
                log.warning("run %s of %s did not stop within its stop timeout: killing it", run_id, hook.spec.name)
                hook.kill(permit, driver)
        standby = hook.standby_record()
        named = [c for c in (record, standby) if c is not None and c.run_id == run_id]  # e.g. a standby never promoted
        if not named and hook.processes_of_run(run_id):  # submitted, never recorded (its submitter was killed)
            named = [r for r in (hook.unrecorded_record(run_id),) if r is not None]
        for candidate in named:
            if hook.processes_of_run(run_id):
                hook.kill(permit, candidate, 15.0, keep_marker=True)
        left = hook.processes_of_run(run_id)
        if left and not named:
            raise LifecycleError(f"drivers of run {run_id} of {hook.spec.name} run, but no record names them and "
                                 f"the {hook.target.kind} target cannot tell which is the run's driver: {left}. Stop "
                                 f"these (each carries --run-id {run_id}: on its host, or through the cluster "
                                 f"manager), then run the action again")
        if left:
            raise LifecycleError(f"drivers of run {run_id} of {hook.spec.name} survive a kill: {left}; run the "
                                 f"action again")
