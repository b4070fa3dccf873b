"""Waiting for a new run (a part of :class:`~.runner.LifecycleRunner`): a deploy's first progress, an
upgrade's PROBATION and a parallel stream's CATCHING_UP. A wait ends early only when the reconcile core
says the run is down (:func:`~airflow_streaming.reconcile.decision.is_down`); in deferrable mode it is
handed to the trigger (:meth:`~.runner.LifecycleRunner._await`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from airflow_streaming.control import contract
from airflow_streaming.control.contract import json_object_or_none
from airflow_streaming.control.storage import StorageError
from airflow_streaming.exceptions import LifecycleError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle.record import (
    Action,
    LifecycleRecord,
    Step,
    caught_up,
    error_summary,
    probation_outcome,
)
from airflow_streaming.lifecycle.stored import _first_batch
from airflow_streaming.lifecycle.waits import CAUGHT_UP, PROBATION, READY, Wait
from airflow_streaming.reconcile.decision import is_down
from airflow_streaming.lifecycle.observe import observe


class RunSteps:
    """The waits for a new run (mixed into the runner)."""

    def _run_view(self, hook: SparkStreamHook, run_id: str | None) -> tuple[str | None, dict[str, Any] | None, Any]:
        """(state, status dict, health verdict) of ``run_id``; state FAILED when it is down: the reconcile
        core's :func:`~airflow_streaming.reconcile.decision.is_down` over one observation (proven gone, not
        stopped on purpose). Unknown liveness is never "down": the wait goes on until its deadline."""
        seen = observe(hook)
        verdict = seen.verdict
        try:
            doc = json_object_or_none(hook.storage.read_bytes(hook.paths.status))
        except (ValueError, StorageError):
            doc = None
        if doc is not None and doc.get("run_id") != run_id:
            doc = None
        state = doc.get("state") if doc is not None else None
        if seen.observation.run_id == run_id:
            down = is_down(seen.observation)
        else:  # the driver record names another run (it was replaced): ask for this one's processes
            down = not hook.processes_of_run(run_id or "") and not hook.running_driver()
        if down:
            state = state if state in ("FAILED", "STOPPED") else "FAILED"
        return state, doc, verdict

    def _probation(self, record: LifecycleRecord) -> None:
        if record.action == Action.DEPLOY:
            self._wait_ready(record)
            return
        started = record.step_started_at or time.time()
        while True:
            self._renew()
            state, doc, verdict = self._run_view(self.new_hook, record.new_run_id)
            batches = int(((doc or {}).get("totals") or {}).get("batches", 0))
            passed, why = probation_outcome(state=state, health=verdict.state.value, batches=batches,
                                            started_at=started, now=time.time(), probation=record.probation)
            if passed:
                record.first_new_batch = _first_batch(doc)
                self._advance(record, Step.SUCCEEDED, why)
                return
            if passed is False:
                err = error_summary((doc or {}).get("last_exception"))
                record.error = why + (f": {err}" if err else "")
                if record.from_spec is None:
                    self._stop_run(self.new_hook, record.new_run_id)
                    self._advance(record, Step.FAILED, record.error)
                else:
                    self._advance(record, Step.ROLLING_BACK, record.error)
                return
            self._await(record, Wait(PROBATION, self.new_hook.spec.to_dict(), record.new_run_id,
                                     started + record.probation.window_s + 1.0,
                                     {"started_at": started, "probation": dataclasses.asdict(record.probation)}))

    def _wait_ready(self, record: LifecycleRecord) -> None:
        """Deploy: the new run reports its first progress (or idles); a driver that dies first fails the
        deploy with its own error, and nothing of it is left running or marked."""
        hook = self.new_hook
        driver = hook.driver_record()
        if driver is None or driver.run_id != record.new_run_id:
            raise LifecycleError(f"no driver record of run {record.new_run_id} in {hook.paths.driver}")
        deadline = (record.step_started_at or time.time()) + (self.options.startup_timeout or hook.spec.startup_timeout)
        self._await(record, Wait(READY, hook.spec.to_dict(), driver.run_id, deadline))
        # Over (ready, ended or timed out): this returns at once, or fails with the driver's own error.
        doc = hook.wait_until_ready(driver, max(1.0, deadline - time.time()), lock=self.lock)  # DriverStartError
        record.first_new_batch = doc.last_batch_id()
        if doc.state == contract.STOPPED:  # readiness "finished": the job did its work and ended by itself
            self._advance(record, Step.SUCCEEDED, f"run {driver.run_id} ran and finished by itself (its job's "
                                                  f"trigger ends: availableNow/once), last batch "
                                                  f"{doc.last_batch_id()}: a finished run, not a failure")
            return
        self._advance(record, Step.SUCCEEDED, f"run {driver.run_id} is running: app {doc.app_id}, Spark UI "
                                              f"{doc.spark_ui}")

    def _catching_up(self, record: LifecycleRecord) -> None:
        started = record.step_started_at or time.time()
        while True:
            self._renew()
            state, doc, verdict = self._run_view(self.new_hook, record.new_run_id)
            if state in ("FAILED", "STOPPED"):
                record.error = (f"the new stream ended ({state}) before catching up: "
                                f"{error_summary((doc or {}).get('last_exception'))}")
                self._advance(record, Step.ROLLING_BACK, record.error.splitlines()[0])
                return
            ok, why = caught_up(doc, record.probation.min_batches)
            if ok and verdict.state.value in ("HEALTHY", "IDLE"):
                record.first_new_batch = _first_batch(doc)
                self._advance(record, Step.RETIRING, why)
                return
            if time.time() - started > record.probation.window_s:
                record.error = f"the new stream did not catch up within {record.probation.window_s:.0f}s: {why}"
                self._advance(record, Step.ROLLING_BACK, record.error)
                return
            self._await(record, Wait(CAUGHT_UP, self.new_hook.spec.to_dict(), record.new_run_id,
                                     started + record.probation.window_s + 1.0,
                                     {"min_batches": record.probation.min_batches}))
