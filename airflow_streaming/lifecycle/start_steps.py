"""Starting (a part of :class:`~.runner.LifecycleRunner`): what an action does at PLANNED (choose its run, run
the compatibility gate, or - the supervisor's actions - kill a failed driver first, record a takeover) and at
STARTING (submit once, adopt a driver whose submitter died, promote a prepared standby, submit the hot
standby). Every side effect takes the step's permit (:meth:`~.runner.LifecycleRunner.permit_of`)."""

from __future__ import annotations

import logging
import time

from airflow_streaming.compat.run import run_check
from airflow_streaming.control import contract
from airflow_streaming.control.lifecycle_lock import LifecycleLockLost
from airflow_streaming.exceptions import LifecycleError, StreamAlreadyRunningError, StreamingError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle.record import Action, LifecycleRecord, Step
from airflow_streaming.lifecycle.stored import _same_spec

log = logging.getLogger("airflow_streaming.lifecycle.runner")

#: Targets whose drivers run off the Airflow worker: a cold gate runs as a short driver on the target.
REMOTE_TARGETS = frozenset({"standalone-cluster", "yarn", "kubernetes"})


class StartSteps:
    """PLANNED and STARTING (mixed into the runner)."""

    def _planned(self, record: LifecycleRecord) -> None:
        if record.action == Action.FAILOVER:
            self._record_takeover(record)
            return
        if record.action == Action.STANDBY:
            record.new_run_id = record.new_run_id or contract.new_run_id()
            self._advance(record, Step.STARTING, f"hot standby run {record.new_run_id}")
            return
        if record.action == Action.RECOVER and self.options.kill_run_id:
            self._kill_before_recovery(record, self.options.kill_run_id)
        if record.action in (Action.PARALLEL, Action.DEPLOY, Action.RECOVER):
            running = self.new_hook.running_driver()
            if running:
                raise StreamAlreadyRunningError(f"stream {self.target.name!r} is already running: {running}. "
                                                "Stop it before deploying again.")
            record.new_run_id = contract.new_run_id()
            self._advance(record, Step.STARTING, f"stream {self.target.name} run {record.new_run_id}")
            return
        if record.action == Action.STOP:
            self._advance(record, Step.STOPPING)
            return
        position, refusal = self._checkpoint_position(record, "the compatibility gate")
        if refusal:
            record.error = refusal
            self._advance(record, Step.REFUSED, refusal)
            return
        if position is None or position.last_committed is None:
            self._advance(record, Step.CHECKED, "the stream never ran (no committed batch recorded, none in the "
                          "checkpoint): no compatibility gate needed")
            return
        if _same_spec(record.from_spec, self.target):
            self._advance(record, Step.CHECKED, "same spec: no compatibility change to check")
            return
        if record.warm_start and self.options.check is run_check:
            # The gate runs inside the prepared driver: its session and the candidate's code are up there.
            record.gate_in_standby = True
            record.new_run_id = record.new_run_id or contract.new_run_id()
            self._advance(record, Step.PREPARING, f"standby run {record.new_run_id}; the compatibility gate runs "
                                                  "inside it before anything is stopped")
            return
        try:
            if self.options.check is run_check and (self.new_hook.target.kind in REMOTE_TARGETS
                                                    or self.new_hook.spark_runtime() is not None):
                # A gate driver on the stream's target, in the candidate's own Spark runtime when it names one:
                # the Spark that will resume the checkpoint is the one that answers.
                report = self._target_gate(record)
            elif self.options.defer and self.options.check is run_check:
                report = self._detached_gate(record)
            else:
                report = self.options.check(self._gate_spec(), record.allow_warnings, self.options.dry_run)
        except StreamingError as exc:  # the check could not run: nothing was touched, nothing may go ahead
            record.error = str(exc)
            self._advance(record, Step.REFUSED, record.error.splitlines()[0])
            return
        self._gate_verdict(record, report, Step.CHECKED)

    def _starting(self, record: LifecycleRecord) -> None:
        if record.action == Action.STANDBY:
            self._submit_standby_once(self.new_hook, record.new_run_id, failover=True)
            self._advance(record, Step.SUCCEEDED, f"hot standby run {record.new_run_id} submitted")
            return
        try:
            if record.warm_start:
                if not self.new_hook.processes_of_run(record.new_run_id or ""):
                    raise RuntimeError(f"the standby driver of run {record.new_run_id} is gone")
                self.new_hook.promote(self.permit_of(self.new_hook), record.new_run_id or "")
            else:
                self._submit_once(self.new_hook, record.new_run_id)
        except LifecycleLockLost:
            raise
        except Exception as exc:  # noqa: BLE001 - any start failure rolls back
            if record.action in (Action.DEPLOY, Action.RECOVER):
                raise
            record.error = f"{self.target.version} did not start: {exc}"
            self._advance(record, Step.ROLLING_BACK, record.error.splitlines()[0])
            return
        if record.action == Action.RECOVER or (record.action == Action.DEPLOY and not self.options.await_progress):
            self._advance(record, Step.SUCCEEDED, f"run {record.new_run_id} submitted")
            return
        next_step = Step.CATCHING_UP if record.action == Action.PARALLEL else Step.PROBATION
        self._advance(record, next_step, f"run {record.new_run_id} submitted")

    def _submit_once(self, hook: SparkStreamHook, run_id: str | None) -> None:
        """Submit ``run_id`` unless a driver or record of that run already exists (a resumed step)."""
        assert run_id is not None
        record = hook.driver_record()
        permit = self.permit_of(hook)
        if record is not None and record.run_id == run_id:
            log.info("run %s of %s was already submitted: not submitting again", run_id, hook.spec.name)
            return
        if hook.processes_of_run(run_id):  # submitted by a try killed before it wrote the record
            hook.adopt(permit, run_id)
            return
        hook.submit(permit, run_id=run_id)

    def _submit_standby_once(self, hook: SparkStreamHook, run_id: str | None, failover: bool = False) -> None:
        """Submit the standby ``run_id`` unless its record or its driver already exists (a resumed step)."""
        assert run_id is not None
        standby = hook.standby_record()
        if standby is not None and standby.run_id == run_id:
            log.info("standby run %s of %s was already submitted: not submitting again", run_id, hook.spec.name)
            return
        if hook.processes_of_run(run_id):  # submitted by a try killed before it wrote the record
            hook.adopt(self.permit_of(hook), run_id, standby=True)
            return
        hook.submit(self.permit_of(hook), run_id=run_id, standby=True, failover=failover)

    # ------------------------------------------------------------------ the supervisor's steps
    def _kill_before_recovery(self, record: LifecycleRecord, run_id: str) -> None:
        """RECOVER of a driver that is alive but failed or stalled (the reconcile core's ``kill_first``): the
        kill is noted in the record before it happens; repeated, it signals nothing that is gone."""
        hook = self.home
        driver = hook.driver_record()
        if driver is None or driver.run_id != run_id or hook.target_of(driver).state(driver).gone:
            return
        note = f"killing run {run_id} before its restart (it failed or stalled and is still alive)"
        record.steps.append({"step": "KILLING", "at": time.time(), "detail": note})
        self.save(record)
        outcome = hook.kill(self.permit_of(hook), driver)
        log.warning("killed run %s of %s before its restart: %s", run_id, record.stream, outcome)

    def _record_takeover(self, record: LifecycleRecord) -> None:
        """FAILOVER: the hot standby took the stream over (the drivers' own compare-and-swaps, decided in the
        driver): its history entry comes from this record, and its place is freed for a new standby."""
        hook = self.home
        driver = hook.driver_record()
        if driver is None:
            raise LifecycleError(f"no driver record in {hook.paths.driver}: no takeover to record")
        state = hook.hot_standby_state() or {}
        record.old_run_id = state.get("took_over_from") or record.old_run_id
        record.new_run_id = driver.run_id
        hook.acknowledge_takeover(self.permit_of(hook), driver.run_id)
        log.warning("stream %s failed over to its hot standby: run %s took over from run %s", hook.spec.name,
                    driver.run_id, record.old_run_id)
        self._advance(record, Step.SUCCEEDED, f"the hot standby run {driver.run_id} took over from run "
                                              f"{record.old_run_id}")
