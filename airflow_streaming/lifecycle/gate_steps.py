"""The compatibility gate's steps of a lifecycle action (a part of :class:`~.runner.LifecycleRunner`).

The gate runs before the running version is touched: in a child process (blocking), a detached child
(deferrable), a short gate driver on the stream's own cluster target, or inside the warm standby
(``PREPARING``). Whatever answers, :meth:`GateSteps._gate_verdict` turns the report into CHECKED or
REFUSED; the running stream is never touched by a refusal.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any

from airflow_streaming.compat.last_report import write_last_report
from airflow_streaming.compat.run import blocking_problems, read_detached_report, start_check_detached
from airflow_streaming.control import contract
from airflow_streaming.control.permit import StepPermit
from airflow_streaming.exceptions import StreamingError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.control.lifecycle_lock import LifecycleLockLost
from airflow_streaming.lifecycle.record import LifecycleRecord, Step, error_summary
from airflow_streaming.lifecycle.waits import FILE, STANDBY, Wait, recorded_gate_gone
from airflow_streaming.spec import StreamSpec

log = logging.getLogger("airflow_streaming.lifecycle.runner")


class GateSteps:
    """CHECKED and PREPARING, and the ways the gate is asked (mixed into the runner)."""

    def _detached_gate(self, record: LifecycleRecord, timeout: float = 600.0) -> dict[str, Any]:
        """Deferrable: the gate runs in a detached child that writes its report to the control directory;
        the task defers until it is there (no worker slot waits for the check's Spark session)."""
        report_path = f"{self.home.paths.root}/gate-report.json"
        token = f"gate-{record.id}"
        raw = self.storage.read_bytes(report_path)
        answer = json.loads(raw) if raw else None
        mine = isinstance(answer, dict) and answer.get("id") == token
        if not mine and (record.gate_token is None or not self.home.processes_of_run(token)):
            record.gate_token = token
            self.save(record)
            self._ensure_lock()
            start_check_detached(self._gate_spec(), record.allow_warnings, self.options.dry_run,
                                 f"{self.home.spec.control_dir}/gate-report.json", token,
                                 f"{self.home.paths.root}/logs/{token}.log")
        deadline = (record.step_started_at or record.created_at) + timeout
        self._await(record, Wait(FILE, self.home.spec.to_dict(), None, deadline, {"path": report_path, "id": token}))
        raw = self.storage.read_bytes(report_path)
        answer = json.loads(raw) if raw else None
        return read_detached_report(self.target, answer if isinstance(answer, dict) and answer.get("id") == token
                                    else {"error": f"no report within {timeout:.0f}s"})

    def _target_gate(self, record: LifecycleRecord, timeout: float = 600.0) -> dict[str, Any]:
        """A stream whose drivers run on a cluster: the gate runs as a short driver on the same target
        (:meth:`SparkStreamHook.submit_gate`), where the checkpoint and the job's dependencies are - not on
        this Airflow worker. Blocking and deferrable alike, the action waits for its answer in
        ``gate-report.json``; the gate driver is submitted once (its token is saved before the submission)
        and is gone when this returns."""
        spec = self._gate_spec()
        hook = self.new_hook if spec is self.target else SparkStreamHook(spec)
        token = f"gate-{record.id}"
        answer = self._gate_answer(hook, token)
        gate = hook.gate_driver_record()
        submitted = record.gate_token == token and (
            (gate is not None and gate.run_id == token) or bool(hook.processes_of_run(token)))
        if answer is None and not submitted:
            record.gate_token = token  # saved before the side effect: a resumed action never submits twice
            self.save(record)
            self._ensure_lock()
            try:
                hook.submit_gate(self.permit_of(hook) if hook is self.new_hook else self._gate_permit(hook), token,
                                 self.options.dry_run)
            except (StreamingError, LifecycleLockLost):
                raise
            except Exception as exc:  # noqa: BLE001 - the running version was not touched
                raise StreamingError(f"the compatibility gate of {spec.version} could not be submitted to "
                                     f"{hook.target.kind}: {exc}") from exc
        elif answer is None and self._gate_driver_gone(hook, token):
            answer = self._gate_answer(hook, token) or {  # it may have answered just before it ended
                "error": f"the gate driver ended without an answer (see its log: {hook.driver_log_path(token)})"}
        if answer is None:
            deadline = (record.step_started_at or record.created_at) + hook.spec.startup_timeout + timeout
            self._await(record, Wait(FILE, hook.spec.to_dict(), None, deadline,
                                     {"path": hook.paths.gate_report, "id": token, "gate_driver": token}))
            answer = self._gate_answer(hook, token) or {
                "error": f"the gate driver ended without an answer (see its log: {hook.driver_log_path(token)})"
                if self._gate_driver_gone(hook, token) else f"no answer within {timeout:.0f}s of its start"}
        self._end_gate_driver(hook, token, self._gate_permit(hook))
        return read_detached_report(self.target, answer)

    @staticmethod
    def _gate_answer(hook: SparkStreamHook, token: str) -> dict[str, Any] | None:
        answer = contract.json_object_or_none(hook.storage.read_bytes(hook.paths.gate_report))
        return answer if answer is not None and answer.get("id") == token else None

    @staticmethod
    def _gate_driver_gone(hook: SparkStreamHook, token: str) -> bool:
        """Whether the gate driver ``token`` (known to be submitted) is confirmed gone; with no record of it
        (its submitter was killed before writing it), when no driver of the run is found."""
        gate = hook.gate_driver_record()
        if gate is not None and gate.run_id == token:
            return recorded_gate_gone(hook, token)
        try:
            return not hook.processes_of_run(token)
        except Exception:  # noqa: BLE001 - cannot tell: keep waiting for the answer
            return False

    def _gate_permit(self, hook: SparkStreamHook) -> StepPermit:
        """The step's permit for a gate hook of the same stream (the candidate seen at another checkpoint path)."""
        for permit in self._permits:
            if permit.root == hook.paths.root:
                return permit
        return self.permit_of(self.home)

    @staticmethod
    def _end_gate_driver(hook: SparkStreamHook, token: str, permit: StepPermit) -> None:
        """The gate driver exits once it answered; make sure (kill it if it has not within a grace)."""
        try:
            gate = hook.gate_driver_record()
            if gate is None or gate.run_id != token:  # submitted, never recorded: the target names it
                gate = hook.unrecorded_record(token) if hook.processes_of_run(token) else None
            if gate is None:
                return
            if not hook.wait_gone(gate, 30.0):  # the stream's run marker is the running version's: kept
                log.warning("the gate driver %s did not exit after answering: %s", token,
                            hook.kill(permit, gate, 10.0, keep_marker=True))
        except Exception as exc:  # noqa: BLE001 - the verdict stands; the driver is a short one
            log.warning("could not confirm that the gate driver %s ended: %s", token, exc)

    def _gate_verdict(self, record: LifecycleRecord, report: dict[str, Any], passed: Step, where: str = "") -> bool:
        """Record the gate's verdict and move to ``passed`` or REFUSED; return whether it passed."""
        record.verdict = report["verdict"]
        write_last_report(self.storage, self.home.paths.root, report, candidate_version=self.target.version,
                          candidate_application=self.target.application, action_id=record.id, owner=record.owner)
        problems = blocking_problems(report, record.allow_warnings)
        if problems is not None:
            record.error = (f"{self.target.application} {self.target.version} is {record.verdict} with the checkpoint "
                            f"{self.target.checkpoint_location}: " + "; ".join(problems))
            self._advance(record, Step.REFUSED, record.error)
            return False
        spark = (report.get("candidate") or {}).get("spark_version") if isinstance(report.get("candidate"), dict) else None
        answered = f", answered by Spark {spark}" if spark else ""
        self._advance(record, passed, f"compatibility {record.verdict}{where}{answered}")
        return True

    def _gate_spec(self) -> StreamSpec:
        """The candidate as the gate must see it: against the checkpoint the query really uses."""
        location = self.home.checkpoint_locations()[0]
        if location == self.target.checkpoint_location:
            return self.target
        return dataclasses.replace(self.target, checkpoint_location=location)

    def _checked(self, record: LifecycleRecord) -> None:
        if record.warm_start and not record.gate_in_standby:
            record.new_run_id = record.new_run_id or contract.new_run_id()
            self._advance(record, Step.PREPARING, f"standby run {record.new_run_id}")
            return
        self._advance(record, Step.STOPPING, "the prepared driver passed the gate" if record.gate_in_standby else None)

    def _preparing(self, record: LifecycleRecord) -> None:
        """Start the new version as a standby beside the running one and wait until it is prepared; with
        ``gate_in_standby``, then run the compatibility gate inside it."""
        hook, run_id = self.new_hook, record.new_run_id
        assert run_id is not None
        failure = None
        try:
            standby = hook.standby_record()
            if standby is not None and standby.run_id == run_id:
                pass
            elif hook.processes_of_run(run_id):  # submitted by a try killed before it wrote the record
                hook.adopt(self.permit_of(hook), run_id, standby=True)
            else:
                if record.gate_in_standby:  # asked before it starts: it warms the check up while preparing
                    self._ask_standby_gate(record)
                self._retire_hot_standby(record, hook, run_id)
                hook.submit(self.permit_of(hook), run_id=run_id, standby=True)
        except LifecycleLockLost:
            raise
        except Exception as exc:  # noqa: BLE001 - the running version was not touched
            failure = str(exc)
        if failure is None:
            deadline = (record.step_started_at or time.time()) + hook.spec.startup_timeout
            self._await(record, Wait(STANDBY, hook.spec.to_dict(), run_id, deadline))
            state = hook.standby_state(run_id) or {}
            if state.get("state") == "READY":
                if not record.gate_in_standby:
                    self._advance(record, Step.STOPPING, f"standby run {run_id} prepared")
                    return
                try:
                    report, seconds = self._gate_in_standby(record)
                except StreamingError as exc:  # the check could not run: stop the standby, touch nothing
                    self._stop_run(hook, run_id)
                    record.error = str(exc)
                    self._advance(record, Step.REFUSED, record.error.splitlines()[0])
                    return
                if not self._gate_verdict(record, report, Step.CHECKED,
                                          f" (checked inside the prepared driver in {seconds:.2f}s)"):
                    self._stop_run(hook, run_id)
                return
            if state.get("state") in ("FAILED", "EXPIRED") or not hook.processes_of_run(run_id):
                failure = error_summary(state.get("error")) or f"the standby driver exited ({state.get('state')})"
            else:
                failure = f"the standby driver was not prepared within {hook.spec.startup_timeout:.0f}s"
        self._stop_run(hook, run_id)
        record.error = f"{self.target.version} failed while preparing: {failure}"
        self._advance(record, Step.ROLLED_BACK, f"{record.error}; {record.from_version} was never stopped")

    def _retire_hot_standby(self, record: LifecycleRecord, hook: SparkStreamHook, run_id: str) -> None:
        """An upgrade prepares its own standby: the stream's hot standby (if one runs) is retired first, a
        recorded note before the kill."""
        standby = hook.live_hot_standby()
        if standby is None or standby.run_id == run_id:
            return
        record.steps.append({"step": "RETIRING_STANDBY", "at": time.time(),
                             "detail": f"the hot standby run {standby.run_id} makes room for standby run {run_id}"})
        self.save(record)
        hook.retire_hot_standby(self.permit_of(hook), f"an upgrade prepares its own standby, run {run_id}")

    def _ask_standby_gate(self, record: LifecycleRecord) -> dict[str, Any]:
        """The gate request addressed to the standby run of ``record`` (written unless it already is).

        It is written before the standby is submitted: the standby runs the check once while it prepares
        (a warm-up whose result it discards: classes loaded, code compiled) and answers the request with a
        fresh check once it is READY. Nothing in it touches the checkpoint."""
        hook = self.new_hook
        raw = hook.storage.read_bytes(hook.paths.standby_gate)
        asked = json.loads(raw) if raw else None
        if isinstance(asked, dict) and asked.get("id") == record.id:  # asked already (a resumed action)
            return asked
        request = {"id": record.id, "run_id": record.new_run_id, "dry_run": self.options.dry_run,
                   "checkpoint": self.home.checkpoint_locations()[0], "at": time.time()}
        hook.storage.write_atomic(hook.paths.standby_gate, json.dumps(request).encode())
        return request

    def _gate_in_standby(self, record: LifecycleRecord, timeout: float = 300.0) -> tuple[dict[str, Any], float]:
        """Ask the prepared driver to run the compatibility check in its session; wait for its report
        (within ``timeout`` seconds of the standby's preparation time, counted from the request)."""
        hook = self.new_hook
        asked = self._ask_standby_gate(record)
        deadline = float(asked.get("at") or time.time()) + hook.spec.startup_timeout + timeout
        self._await(record, Wait(FILE, hook.spec.to_dict(), record.new_run_id, deadline,
                                 {"path": hook.paths.standby_gate_report, "id": record.id}))
        raw = hook.storage.read_bytes(hook.paths.standby_gate_report)
        answer = json.loads(raw) if raw else None
        if isinstance(answer, dict) and answer.get("id") == record.id:
            if answer.get("error") or not isinstance(answer.get("report"), dict):
                raise StreamingError(f"the compatibility check inside the prepared driver of "
                                     f"{self.target.version} could not run: {answer.get('error')}")
            return answer["report"], float(answer.get("seconds") or 0.0)
        if not hook.processes_of_run(record.new_run_id or ""):
            raise StreamingError(f"the prepared driver of {self.target.version} exited before it ran the "
                                 "compatibility check")
        raise StreamingError(f"the prepared driver of {self.target.version} did not answer the compatibility "
                             f"check within {timeout:.0f}s")
