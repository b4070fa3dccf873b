"""Rolling back (a part of :class:`~.runner.LifecycleRunner`): ROLLING_BACK -> RESTORED ->
RESTARTING_OLD -> ROLLED_BACK, or ROLLBACK_FAILED when a person must look (the snapshot is kept)."""

from __future__ import annotations

import logging
import time

from airflow_streaming.control import contract
from airflow_streaming.exceptions import LifecycleError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle import snapshot as snapshots
from airflow_streaming.control.lifecycle_lock import LifecycleLockLost
from airflow_streaming.lifecycle.record import Action, LifecycleRecord, Step
from airflow_streaming.lifecycle.trust import trusted_spec
from airflow_streaming.lifecycle.waits import HEALTHY, Wait
from airflow_streaming.redaction import restore_secrets
from airflow_streaming.spec import StreamSpec

log = logging.getLogger("airflow_streaming.lifecycle.runner")


class RollbackSteps:
    """The rollback side of an action (mixed into the runner)."""

    def _rolling_back(self, record: LifecycleRecord) -> None:
        if record.new_run_id:
            self._stop_run(self.new_hook, record.new_run_id)
        if record.action == Action.PARALLEL:
            self._advance(record, Step.ROLLED_BACK, f"stopped {self.target.name}; the old stream was never touched")
            return
        running = self.home.running_driver()
        if running and record.new_run_id and record.new_run_id in running:
            raise LifecycleError(f"the new run {record.new_run_id} of {record.stream!r} still runs ({running}); "
                                 "not restoring the checkpoint under it")
        if running:
            # The old version was never stopped (the stop itself failed): it still runs on its checkpoint.
            self._advance(record, Step.ROLLED_BACK, f"{record.from_version} never stopped: {running}")
            return
        if record.from_spec is None:
            self._advance(record, Step.FAILED, record.error)
            return
        detail = "the checkpoint is untouched (no snapshot was restored: the new version never ran on it)"
        if record.snapshot is not None:
            report = snapshots.restore_snapshot(snapshots.SnapshotManifest.from_dict(record.snapshot),
                                                f".rolled-back-{record.id}", resolve=self.home.storage_of,
                                                snapshot_storage=self.storage.unguarded)
            detail = f"checkpoint restored to batch {report['batch_id']}" + (
                ", file sink log restored" if report.get("sink_metadata_restored") else "")
        self._advance(record, Step.RESTORED, detail)

    def _restored(self, record: LifecycleRecord) -> None:
        record.rollback_run_id = contract.new_run_id()
        self._advance(record, Step.RESTARTING_OLD, f"run {record.rollback_run_id} of {record.from_version}")

    def _restarting_old(self, record: LifecycleRecord) -> None:
        stored = trusted_spec(record.from_spec or {}, f"{self.home.paths.root}/lifecycle.json", self.current,
                              self.home.spec, self.target, home=self.home.spec, legacy_rollback=True)
        old = SparkStreamHook(StreamSpec.from_dict(restore_secrets(stored, self.current, self.home.spec, self.target)))
        try:
            self._submit_once(old, record.rollback_run_id)
        except LifecycleLockLost:
            raise
        except Exception as exc:  # noqa: BLE001
            record.error = f"{record.error}; and {record.from_version} did not restart: {exc}"
            self._advance(record, Step.ROLLBACK_FAILED, str(exc).splitlines()[0])
            return
        # From the step's start (recorded), so that a deferred or resumed action keeps the same deadline.
        deadline = (record.step_started_at or time.time()) + max(record.probation.window_s, old.spec.startup_timeout)
        while True:
            self._renew()
            state, _, verdict = self._run_view(old, record.rollback_run_id)
            if verdict.state.value in ("HEALTHY", "IDLE") and state == "RUNNING":
                self._advance(record, Step.ROLLED_BACK, f"{record.from_version} {verdict.state.value} again "
                              f"(run {record.rollback_run_id})")
                return
            if state in ("FAILED", "STOPPED") or time.time() > deadline:
                record.error = f"{record.error}; and {record.from_version} did not become healthy: {verdict.summary()}"
                self._advance(record, Step.ROLLBACK_FAILED, verdict.summary())
                return
            # Blocking: polls; deferrable: the task defers to the trigger (no worker slot is held).
            self._await(record, Wait(HEALTHY, old.spec.to_dict(), record.rollback_run_id, deadline))
