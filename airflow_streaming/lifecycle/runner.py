"""Run a lifecycle action on a stream, one recorded step at a time (the I/O half of :mod:`.record`).

This is the one path by which a running stream changes: deploy, stop, restart, upgrade, rollback,
parallel transition and the supervisor's recovery all run here, under the stream's lifecycle lock
(renewed in the background for the whole action), with a record and a history entry.

Deploy:    PLANNED -> STARTING -> PROBATION (first progress) -> SUCCEEDED        (failure: FAILED)
Stop:      PLANNED -> STOPPING -> STOPPED -> SUCCEEDED
Recover:   PLANNED -> STARTING -> SUCCEEDED (submitted; the supervisor's next pass judges its health)

Upgrade / restart / rollback-to-previous (in place, on the stream's checkpoint):

    PLANNED -> CHECKED -> STOPPING -> STOPPED -> SNAPSHOTTED -> STARTING -> PROBATION -> SUCCEEDED
       |                     |  (a step failed)                        \\-> ROLLING_BACK -> RESTORED
       \\-> REFUSED           \\-> ROLLING_BACK                               -> RESTARTING_OLD -> ROLLED_BACK

Parallel transition (an intentionally incompatible change; new name, checkpoint and output):

    PLANNED -> STARTING -> CATCHING_UP -> RETIRING -> SUCCEEDED      (failure: stop the new one, ROLLED_BACK)

The record is saved in ``<control dir>/lifecycle.json`` *before* each step's side effect, and every
step is safe to repeat, so running the same action again after the task died continues (or rolls
back) from the recorded step. Run ids are chosen and saved before a submission; a resumed STARTING
step first looks for drivers of that run id, so a submission is never repeated.

Failures: an error before the old driver is touched ends the action (REFUSED / FAILED) with the
stream untouched; an error once the old driver stopped (a snapshot on a full disk, a start that
fails) rolls back - the old version restarts from its untouched checkpoint - and the error says
what happened and what is left to do. A lost lock stops the action before its next side effect.
Terminal records are appended to ``history.json``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming import faults
from airflow_streaming.checkpoint.batches import BatchPosition
from airflow_streaming.compat.last_report import write_last_report
from airflow_streaming.compat.run import blocking_problems, read_detached_report, run_check, start_check_detached
from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlFileError
from airflow_streaming.control.storage import StorageError, describe_os_error
from airflow_streaming.exceptions import StreamAlreadyRunningError, StreamingError
from airflow_streaming.hooks.streaming_job import StreamingJobHook, storage_path
from airflow_streaming.lifecycle import snapshot as snapshots
from airflow_streaming.lifecycle.lock import LifecycleLock, LifecycleLockLost
from airflow_streaming.lifecycle.waits import CAUGHT_UP, FILE, GONE, PROBATION, READY, STANDBY, Wait, WaitNeeded, wait_over
from airflow_streaming.lifecycle.record import (
    IN_PLACE_CHANGES,
    Action,
    LifecycleRecord,
    Probation,
    Step,
    append_history,
    caught_up,
    error_summary,
    previous_spec,
    probation_outcome,
    unfinished_message,
)
from airflow_streaming.redaction import mask_spec, restore_secrets
from airflow_streaming.spec import SpecError, StreamSpec

log = logging.getLogger(__name__)

RECORD_NAME = "lifecycle.json"
HISTORY_NAME = "history.json"
#: Steps at which the stream is still untouched: an error ends the action, nothing to roll back.
_UNTOUCHED = frozenset({Step.PLANNED, Step.CHECKED, Step.PREPARING})
#: Steps of a rollback: an error is retried, then ROLLBACK_FAILED (a person must look).
_ROLLBACK_STEPS = frozenset({Step.ROLLING_BACK, Step.RESTORED, Step.RESTARTING_OLD})
ROLLBACK_ATTEMPTS = 3


class LifecycleError(StreamingError):
    """A lifecycle action cannot go on (the message says why and what to do)."""


#: Targets whose drivers run off the Airflow worker: a cold gate runs as a short driver on the target.
REMOTE_TARGETS = frozenset({"standalone-cluster", "yarn", "kubernetes"})


@dataclass(frozen=True)
class LifecycleOptions:
    """How an action runs. ``check`` is the compatibility check (default: the CLI in a child process)."""

    allow_warnings: bool = False
    dry_run: bool = True
    probation: Probation = field(default_factory=Probation)
    owner: str | None = None
    poll_s: float = 1.0
    snapshots_kept: int = 3
    warm_start: bool = False
    """Prepare the new driver (JVM, session, planned query) before stopping the old one; see docs/upgrades.md."""
    check: Callable[[StreamSpec, bool, bool], dict[str, Any]] = run_check
    startup_timeout: float | None = None
    """Deploy: seconds to wait for the first progress (default: the spec's ``startup_timeout``)."""
    stop_timeout: float | None = None
    """Stop: seconds to wait for the graceful stop (default: the spec's ``stop_timeout``)."""
    kill_on_timeout: bool = True
    defer: bool = False
    """Deferrable: instead of waiting, save the record, hand the lock over and raise
    :class:`~airflow_streaming.lifecycle.waits.WaitNeeded` (the operator defers to a trigger)."""


class LifecycleRunner:
    """Runs (or resumes) one action for the stream named by ``target``.

    :param target: the spec the stream should run afterwards (for a parallel transition: the new stream;
        for a stop: the stream).
    :param action: deploy, stop, upgrade, restart, rollback, parallel or recover.
    :param current: the spec running now; default: the one recorded at the last submission
        (``deployed.json``). Required for a parallel transition (the old stream).
    :param notify: receives event dicts (UPGRADE_SUCCEEDED / UPGRADE_ROLLED_BACK / FAILED).
    :param lock: a lifecycle lock the caller already holds (the supervisor's pass); default: taken here.
    """

    def __init__(self, target: StreamSpec, action: Action | str, options: LifecycleOptions | None = None,
                 current: StreamSpec | None = None, notify: Callable[[dict[str, Any]], None] | None = None,
                 lock: LifecycleLock | None = None, resume: dict[str, str] | None = None):
        self.target = target
        self.action = Action(action)
        self.options = options or LifecycleOptions()
        self.notify = notify
        self.new_hook = StreamingJobHook(target)
        if self.action == Action.PARALLEL:
            if current is None:
                raise SpecError("current", "a parallel transition needs the spec of the running (old) stream")
            if current.name == target.name:
                raise SpecError("name", f"a parallel transition needs a new stream name, both are {target.name!r}")
            if current.checkpoint_location == target.checkpoint_location:
                raise SpecError("checkpoint_location", "a parallel transition needs a fresh checkpoint, both use "
                                f"{target.checkpoint_location}")
        elif current is not None and (current.name, current.checkpoint_location) != (
                target.name, target.checkpoint_location):
            raise SpecError("checkpoint_location", f"an in-place {self.action.value} keeps the stream's name and "
                            f"checkpoint ({current.name}, {current.checkpoint_location}); use a parallel transition "
                            "to move to a new checkpoint")
        self.current = current
        # The record lives with the stream that exists before the action (the old one).
        self.home = StreamingJobHook(current) if current is not None else self.new_hook
        self.storage = self.home.storage
        self.record_path = f"{self.home.paths.root}/{RECORD_NAME}"
        self.history_path = f"{self.home.paths.root}/{HISTORY_NAME}"
        self._given_lock = lock
        self._resume = dict(resume or {})
        """Control dir -> holder id of locks handed to a trigger (a deferred action coming back)."""
        self._locks: list[LifecycleLock] = []
        self.stop_report: dict[str, Any] | None = None
        self.failure: Exception | None = None
        """The error that ended the action, if one did (a deploy re-raises it: e.g. the driver's own error)."""

    # ------------------------------------------------------------------ persistence
    def load_record(self) -> LifecycleRecord | None:
        raw = self.storage.read_bytes(self.record_path)
        return None if raw is None else parse_record(self.record_path, raw)

    def save(self, record: LifecycleRecord) -> None:
        self._ensure_lock()
        self.storage.write_atomic(self.record_path, json.dumps(record.to_dict(), indent=1).encode())

    def history(self) -> list[dict[str, Any]]:
        return read_history(self.home)

    def _advance(self, record: LifecycleRecord, step: Step, detail: str | None = None) -> None:
        record.advance(step, detail)
        self.save(record)
        faults.hit("runner.step", f"{record.action.value}:{step.value};")  # e.g. the task killed right here
        log.info("%s %s of %s: %s%s", record.action.value, record.id, record.stream, step.value,
                 f" ({detail})" if detail else "")

    def _ensure_lock(self) -> None:
        """Stop before any side effect once the lock was lost (it was taken over)."""
        for lock in self._locks:
            lock.ensure()

    @property
    def lock(self) -> LifecycleLock:
        return self._locks[0]

    # ------------------------------------------------------------------ driving
    def run(self) -> LifecycleRecord:
        """Run the action to a terminal step (or raise, leaving the record to resume from)."""
        own = self._given_lock is None
        handed_over = False
        try:
            if own:
                self._locks = [self._take(self.home)]
            else:
                self._given_lock.ensure()  # type: ignore[union-attr]
                self._locks = [self._given_lock]  # type: ignore[list-item]
            if self.action == Action.PARALLEL:
                self._locks.append(self._take(self.new_hook))
            record = self._resume_or_create(self._locks[0])
            rollback_errors = 0
            while not record.done:
                self._ensure_lock()
                handler = getattr(self, f"_{record.step.value.lower()}")
                try:
                    handler(record)
                except (LifecycleLockLost, WaitNeeded):
                    raise
                except Exception as exc:  # noqa: BLE001 - every failure ends in a safe, recorded step
                    rollback_errors += record.step in _ROLLBACK_STEPS
                    self._on_step_error(record, exc, rollback_errors)
            self._finish(record)
            return record
        except WaitNeeded as wait:
            # Deferrable: the locks go to the trigger (by holder id); the record says what is awaited.
            wait.holders = {lock.path.rsplit("/", 1)[0]: lock.defer() for lock in self._locks}
            handed_over = True
            raise
        except LifecycleLockLost as exc:
            raise LifecycleError(f"{self.action.value} of {self.target.name} stopped before its next side effect: "
                                 f"its lifecycle lock was taken over ({exc}). Check what the other holder did "
                                 "(lifecycle.json, history.json) before acting again.") from exc
        finally:
            if not handed_over:
                for lock in reversed(self._locks if own else self._locks[1:]):
                    lock.release()

    def _take(self, hook: StreamingJobHook) -> LifecycleLock:
        """This action's lock on ``hook``'s stream: taken back from a trigger, or acquired."""
        holder = self._resume.get(hook.paths.root)
        if holder is not None:
            return LifecycleLock.resume(hook.storage, hook.paths.root, holder)
        return LifecycleLock.acquire(hook.storage, hook.paths.root, self.action.value, self.options.owner)

    def _await(self, record: LifecycleRecord, wait: Wait) -> None:
        """Return once ``wait`` is over. Blocking mode polls; deferrable mode raises :class:`WaitNeeded`
        (after saving the record) unless it is already over."""
        if self.options.defer:
            if wait_over(wait):
                return
            record.waiting = wait.to_dict()
            self.save(record)
            raise WaitNeeded(wait)
        while not wait_over(wait):
            self._renew()
            time.sleep(self.options.poll_s)

    def _on_step_error(self, record: LifecycleRecord, exc: Exception, rollback_errors: int) -> None:
        """Move to the safe step for an error at ``record.step`` (see the module docstring)."""
        step = record.step
        self.failure = exc
        what = f"{type(exc).__name__}: {exc}" if not isinstance(exc, (StreamingError, OSError)) else str(exc)
        log.error("%s %s of %s failed at %s: %s", record.action.value, record.id, record.stream, step.value, what,
                  exc_info=not isinstance(exc, (StreamingError, OSError, SpecError)))
        if isinstance(exc, (StorageError, ControlFileError)) and not self._can_write_record():
            raise exc  # the record cannot be saved: leave it where it is, to resume from
        if step in _ROLLBACK_STEPS:
            if rollback_errors < ROLLBACK_ATTEMPTS:
                log.warning("retrying %s (%d/%d)", step.value, rollback_errors, ROLLBACK_ATTEMPTS)
                time.sleep(min(10.0, 2.0 * rollback_errors))
                return
            record.error = (f"{record.error or 'the action failed'}; and the rollback failed at {step.value}: {what}. "
                            f"The stream is NOT running. The snapshot ({(record.snapshot or {}).get('snapshot_dir')}) "
                            "is kept; fix the cause, then restart the old version")
            self._advance(record, Step.ROLLBACK_FAILED, what)
            return
        record.error = f"{record.action.value} failed at {step.value}: {what}"
        if step in _UNTOUCHED or record.action in (Action.DEPLOY, Action.STOP, Action.RECOVER):
            if record.action in (Action.DEPLOY, Action.RECOVER) and record.new_run_id:
                self._stop_run(self.new_hook, record.new_run_id)
            self._advance(record, Step.FAILED, what)
            return
        if step == Step.RETIRING:
            self._advance(record, Step.FAILED, f"{what}; the new stream {self.target.name} runs, the old one may too")
            return
        record.error += (f". Rolling back: {record.from_version} restarts from its checkpoint"
                         f"{' at batch ' + str(record.stop_batch) if record.stop_batch is not None else ''}"
                         f"{' (restored from the snapshot)' if record.snapshot else ' (untouched)'}. What is left to "
                         f"do: fix the cause, then run the {record.action.value} again")
        self._advance(record, Step.ROLLING_BACK, what)

    def _can_write_record(self) -> bool:
        try:
            self.storage.read_bytes(self.record_path)
            return True
        except StorageError:
            return False

    def _renew(self) -> None:
        """Kept for the waits: the locks renew themselves; this checks they are still held."""
        self._ensure_lock()

    def _resume_or_create(self, lock: LifecycleLock) -> LifecycleRecord:
        # Everything this action must update has to be readable before anything is touched.
        self.history()
        record = self.load_record()
        if record is not None and not record.done:
            if record.action in (Action.DEPLOY, Action.RECOVER, Action.STOP) and self.action == Action.STOP and \
                    record.action != Action.STOP:
                record.error = f"abandoned: superseded by a stop ({self.options.owner or 'pid ' + str(os.getpid())})"
                self._advance(record, Step.FAILED, record.error)
                self._append_history(record)
                record = None
            elif record.action != self.action or not _same_spec(record.to_spec, self.target):
                raise LifecycleError(unfinished_message(record.stream, record.action.value, record.id,
                                                        record.to_version, record.step.value, self.action.value))
        if record is not None and not record.done:
            note = f"resumed by {self.options.owner or 'pid ' + str(os.getpid())} at step {record.step.value}"
            if lock.took_over:
                note += f"; took over the stale lock of {lock.took_over.get('owner')} (pid {lock.took_over.get('pid')})"
            log.warning("%s", note)
            record.steps.append({"step": "RESUMED", "at": time.time(), "detail": note})
            self.save(record)
            return record
        deployed = self.home.deployed()
        from_spec = self.current.to_dict() if self.current is not None else (deployed or {}).get("spec")
        record = LifecycleRecord(  # specs at rest carry no secret (see redaction.mask_spec)
            stream=self.home.spec.name, action=self.action, from_spec=mask_spec(from_spec),
            to_spec=mask_spec(self.target.to_dict()),
            allow_warnings=self.options.allow_warnings, probation=self.options.probation, owner=self.options.owner,
            warm_start=self.options.warm_start and self.action in IN_PLACE_CHANGES)
        record.old_run_id = (deployed or {}).get("run_id")
        record.sink_path = self._sink_path()
        if lock.took_over:
            record.steps.append({"step": "LOCK_TAKEN_OVER", "at": time.time(), "detail": str(lock.took_over)})
        self.save(record)
        faults.hit("runner.step", f"{record.action.value}:{record.step.value};")
        return record

    def _sink_path(self) -> str | None:
        """The file sink's directory, from the running query's last progress (``FileSink[path]``)."""
        try:
            doc = self.home.status()
        except (ControlFileError, StorageError):
            return None
        for query in doc.queries if doc is not None else []:
            for progress in reversed(query.recent_progress):
                path = snapshots.sink_path_from_description((progress.get("sink") or {}).get("description"))
                if path:
                    return path
        return None

    # ------------------------------------------------------------------ checkpoint evidence
    def _ran_evidence(self) -> str | None:
        """Why we know the stream has run on its checkpoint (committed batches recorded somewhere), or
        ``None`` for a stream that has never run."""
        try:
            doc = self.home.status()
        except (ControlFileError, StorageError) as exc:
            return f"its status document cannot be read ({exc})"
        if doc is not None and doc.last_batch_id() is not None:
            return f"status.json of run {doc.run_id} records committed batch {doc.last_batch_id()}"
        for entry in reversed(self.history()):
            for key in ("last_batch_before", "first_batch_after"):
                if isinstance(entry.get(key), int):
                    return f"history.json records batch {entry[key]} ({entry.get('action')} {entry.get('id')})"
        if doc is not None and doc.queries:
            return f"the query of run {doc.run_id} started on it (status.json)"
        return None

    def _checkpoint_position(self, record: LifecycleRecord, purpose: str) -> tuple[BatchPosition | None, str | None]:
        """``(position, refusal)``: the checkpoint's position, or why the action must not go on.

        A checkpoint that is missing, empty or unreadable while the stream has run (see
        :meth:`_ran_evidence`) refuses: the gate and the snapshot are never skipped silently."""
        location = self.home.checkpoint_locations()[0]
        try:
            exists = self.home.checkpoint_exists(location)
            position = self.home.batch_position(location) if exists else None
        except StorageError as exc:
            return None, (f"the checkpoint {location} cannot be read ({exc}): {purpose} cannot run. Check that its "
                          "storage is mounted and readable, then run the action again")
        if position is not None and position.last_committed is not None:
            return position, None
        evidence = self._ran_evidence()
        if evidence is None:
            return position, None
        found = "does not exist" if position is None else "has no committed batch"
        return None, (f"the checkpoint {location} {found}, but the stream has run on it ({evidence}): {purpose} "
                      f"cannot run. Is the checkpoint storage mounted, and is checkpoint_location right? Check "
                      f"{storage_path(location)}; restore it from a snapshot under "
                      f"{self.home.paths.root}/snapshots if it was lost. Nothing was changed")

    # ------------------------------------------------------------------ steps
    def _planned(self, record: LifecycleRecord) -> None:
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
            if self.options.check is run_check and self.new_hook.target.kind in REMOTE_TARGETS:
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
        (:meth:`StreamingJobHook.submit_gate`), where the checkpoint and the job's dependencies are - not on
        this Airflow worker. Blocking and deferrable alike, the action waits for its answer in
        ``gate-report.json``; the gate driver is submitted once (its token is saved before the submission)
        and is gone when this returns."""
        spec = self._gate_spec()
        hook = self.new_hook if spec is self.target else StreamingJobHook(spec)
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
                hook.submit_gate(token, self.lock, self.options.dry_run)
            except (StreamingError, LifecycleLockLost):
                raise
            except Exception as exc:  # noqa: BLE001 - the running version was not touched
                raise StreamingError(f"the compatibility gate of {spec.version} could not be submitted to "
                                     f"{hook.target.kind}: {exc}") from exc
        elif answer is None and self._gate_driver_gone(hook, token):
            answer = {"error": "the gate driver ended without an answer (see its log: "
                               f"{hook.driver_log_path(token)})"}
        if answer is None:
            deadline = (record.step_started_at or record.created_at) + hook.spec.startup_timeout + timeout
            self._await(record, Wait(FILE, hook.spec.to_dict(), None, deadline,
                                     {"path": hook.paths.gate_report, "id": token}))
            answer = self._gate_answer(hook, token) or {"error": f"no answer within {timeout:.0f}s of its start"}
        self._end_gate_driver(hook, token)
        return read_detached_report(self.target, answer)

    @staticmethod
    def _gate_answer(hook: StreamingJobHook, token: str) -> dict[str, Any] | None:
        raw = hook.storage.read_bytes(hook.paths.gate_report)
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            return None
        return answer if isinstance(answer, dict) and answer.get("id") == token else None

    @staticmethod
    def _gate_driver_gone(hook: StreamingJobHook, token: str) -> bool:
        """Whether the gate driver ``token`` is confirmed gone (no record of it: cannot tell, not gone)."""
        gate = hook.gate_driver_record()
        if gate is None or gate.run_id != token:
            return False
        try:
            return hook.target_of(gate).state(gate).gone
        except Exception:  # noqa: BLE001 - cannot tell: keep waiting for the answer
            return False

    @staticmethod
    def _end_gate_driver(hook: StreamingJobHook, token: str) -> None:
        """The gate driver exits once it answered; make sure (kill it if it has not within a grace)."""
        gate = hook.gate_driver_record()
        if gate is None or gate.run_id != token:
            return
        try:
            if not hook.wait_gone(gate, 30.0):  # never hook.kill(): it would remove the stream's run marker
                log.warning("the gate driver %s did not exit after answering: %s", token,
                            hook.target_of(gate).kill(gate, 10.0))
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
        self._advance(record, passed, f"compatibility {record.verdict}{where}")
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
            if not (standby is not None and standby.run_id == run_id) and not hook.processes_of_run(run_id):
                if record.gate_in_standby:  # asked before it starts: it warms the check up while preparing
                    self._ask_standby_gate(record)
                hook.submit(run_id=run_id, standby=True, lock=self.lock)
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

    def _stopping(self, record: LifecycleRecord) -> None:
        hook = self.home
        timeout = hook.spec.stop_timeout if self.options.stop_timeout is None else self.options.stop_timeout
        if record.stop_requested_at is None:
            self._ensure_lock()
            record.stopping_run_id = hook.begin_stop()  # the run marker is gone: it stops at a batch boundary
            record.stop_requested_at = time.time()
            self.save(record)
        if record.stopping_run_id is not None:
            self._await(record, Wait(GONE, hook.spec.to_dict(), record.stopping_run_id,
                                     record.stop_requested_at + timeout))
        report = hook.finish_stop(record.stopping_run_id, record.stop_requested_at, timeout,
                                  self.options.kill_on_timeout, self.lock)
        self.stop_report = report.to_dict()
        running = hook.running_driver()
        if running:
            raise LifecycleError(f"stream {record.stream!r} still runs after the stop: {running}; "
                                 "run the action again to retry the stop")
        position = report.position or hook.batch_position()
        how = "graceful" if report.graceful else "not running" if not report.was_running else "killed"
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
            self._advance(record, Step.SUCCEEDED, f"not running; last committed batch {record.stop_batch}")
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
                                               snapshot_storage=self.storage)
        except OSError as exc:
            snapshots.discard_incomplete(snapshot_dir, self.storage)
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

    def _starting(self, record: LifecycleRecord) -> None:
        try:
            if record.warm_start:
                if not self.new_hook.processes_of_run(record.new_run_id or ""):
                    raise RuntimeError(f"the standby driver of run {record.new_run_id} is gone")
                self.new_hook.promote(record.new_run_id or "", self.lock)
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
        if record.action == Action.RECOVER:
            self._advance(record, Step.SUCCEEDED, f"run {record.new_run_id} submitted")
            return
        next_step = Step.CATCHING_UP if record.action == Action.PARALLEL else Step.PROBATION
        self._advance(record, next_step, f"run {record.new_run_id} submitted")

    def _submit_once(self, hook: StreamingJobHook, run_id: str | None) -> None:
        """Submit ``run_id`` unless a driver or record of that run already exists (a resumed step)."""
        assert run_id is not None
        record = hook.driver_record()
        if (record is not None and record.run_id == run_id) or hook.processes_of_run(run_id):
            log.info("run %s of %s was already submitted: not submitting again", run_id, hook.spec.name)
            return
        hook.submit(run_id=run_id, lock=self.lock if hook is self.home else self._lock_of(hook))

    def _lock_of(self, hook: StreamingJobHook) -> LifecycleLock:
        for lock in self._locks:
            if lock.path.startswith(hook.paths.root + "/"):
                return lock
        return self.lock

    def _run_view(self, hook: StreamingJobHook, run_id: str | None) -> tuple[str | None, dict[str, Any] | None, Any]:
        """(state, status dict, health verdict) of ``run_id``; state FAILED when it is gone without status."""
        verdict = hook.health()
        try:
            raw = hook.storage.read_bytes(hook.paths.status)
            doc = json.loads(raw) if raw is not None else None
        except (ValueError, StorageError):
            doc = None
        if not isinstance(doc, dict) or doc.get("run_id") != run_id:
            doc = None
        state = doc.get("state") if doc is not None else None
        if not hook.processes_of_run(run_id or "") and not hook.running_driver():
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

    def _retiring(self, record: LifecycleRecord) -> None:
        hook = self.home
        if record.stop_requested_at is None:
            self._ensure_lock()
            record.stopping_run_id = hook.begin_stop()
            record.stop_requested_at = time.time()
            self.save(record)
        if record.stopping_run_id is not None:
            self._await(record, Wait(GONE, hook.spec.to_dict(), record.stopping_run_id,
                                     record.stop_requested_at + hook.spec.stop_timeout))
        report = hook.finish_stop(record.stopping_run_id, record.stop_requested_at, hook.spec.stop_timeout,
                                  True, self.lock)
        if self.home.running_driver():
            raise LifecycleError(f"the old stream {record.stream!r} still runs after the stop; run the action again")
        record.stop_batch = report.position.last_committed if report.position else None
        self._advance(record, Step.SUCCEEDED, f"old stream stopped at batch {record.stop_batch}; "
                      f"{self.target.name} carries on")

    def _stop_run(self, hook: StreamingJobHook, run_id: str | None) -> None:
        """Stop the driver of ``run_id`` (gracefully, then by force) and make sure none of it is left."""
        if not run_id:
            return
        lock = self._lock_of(hook)
        record = hook.driver_record()
        if record is not None and record.run_id == run_id:
            hook.stop(timeout=min(hook.spec.stop_timeout, 60.0), lock=lock)
        standby = hook.standby_record()
        for candidate in (record, standby):  # e.g. a standby never promoted
            if candidate is not None and candidate.run_id == run_id and hook.processes_of_run(run_id):
                hook.target.kill(candidate, 15.0)
        if hook.processes_of_run(run_id):
            raise LifecycleError(f"drivers of run {run_id} of {hook.spec.name} survive a kill: "
                                 f"{hook.processes_of_run(run_id)}; run the action again")

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
                                                snapshot_storage=self.storage)
            detail = f"checkpoint restored to batch {report['batch_id']}" + (
                ", file sink log restored" if report.get("sink_metadata_restored") else "")
        self._advance(record, Step.RESTORED, detail)

    def _restored(self, record: LifecycleRecord) -> None:
        record.rollback_run_id = contract.new_run_id()
        self._advance(record, Step.RESTARTING_OLD, f"run {record.rollback_run_id} of {record.from_version}")

    def _restarting_old(self, record: LifecycleRecord) -> None:
        old = StreamingJobHook(StreamSpec.from_dict(restore_secrets(
            record.from_spec or {}, self.current, self.home.spec, self.target)))
        try:
            self._submit_once(old, record.rollback_run_id)
        except LifecycleLockLost:
            raise
        except Exception as exc:  # noqa: BLE001
            record.error = f"{record.error}; and {record.from_version} did not restart: {exc}"
            self._advance(record, Step.ROLLBACK_FAILED, str(exc).splitlines()[0])
            return
        deadline = time.time() + max(record.probation.window_s, old.spec.startup_timeout)
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
            time.sleep(self.options.poll_s)

    # ------------------------------------------------------------------ end
    def _append_history(self, record: LifecycleRecord) -> None:
        entry = record.history_entry()
        self.storage.write_atomic(self.history_path, json.dumps(append_history(self.history(), entry),
                                                                indent=1).encode())

    def _finish(self, record: LifecycleRecord) -> None:
        self._append_history(record)
        entry = record.history_entry()
        if record.action == Action.PARALLEL and record.step == Step.SUCCEEDED:
            other = append_history(read_history(self.new_hook), {**entry, "stream": self.target.name})
            self.new_hook.storage.write_atomic(f"{self.new_hook.paths.root}/{HISTORY_NAME}",
                                               json.dumps(other, indent=1).encode())
        if record.step == Step.SUCCEEDED and record.action in IN_PLACE_CHANGES:
            self._prune_snapshots(record)
        kind = {Step.SUCCEEDED: "UPGRADE_SUCCEEDED", Step.ROLLED_BACK: "UPGRADE_ROLLED_BACK",
                Step.ROLLBACK_FAILED: "FAILED", Step.FAILED: "FAILED"}.get(record.step)
        if record.action in (Action.DEPLOY, Action.STOP, Action.RECOVER) and record.step == Step.SUCCEEDED:
            kind = None  # routine; the callers report these
        if kind and self.notify is not None:
            running = record.running_version()
            event = {"kind": kind, "stream": record.stream, "version": running or record.to_version,
                     "run_id": record.new_run_id if record.step == Step.SUCCEEDED else record.rollback_run_id,
                     "last_committed_batch": record.stop_batch, "error_first_line": (record.error or "")[:300] or None,
                     "health_reasons": [s["detail"] for s in record.steps[-3:] if s.get("detail")], "at": time.time()}
            try:
                self.notify(event)  # type: ignore[misc]
            except Exception:  # noqa: BLE001 - a notifier never changes the outcome
                log.exception("notification %s for %s failed", kind, record.stream)

    def _prune_snapshots(self, record: LifecycleRecord) -> None:
        root = f"{self.home.paths.root}/snapshots"
        try:
            names = sorted(self.storage.list_dir(root))
            for name in names[: max(0, len(names) - self.options.snapshots_kept)]:
                self.storage.delete_tree(f"{root}/{name}")
        except StorageError as exc:  # old snapshots only cost space
            log.warning("could not prune old snapshots under %s: %s", root, exc)


def _same_spec(spec_dict: dict[str, Any] | None, spec: StreamSpec) -> bool:
    """Whether a stored (masked) spec is ``spec``."""
    if spec_dict is None:
        return False
    try:
        return StreamSpec.from_dict(mask_spec(spec_dict)) == StreamSpec.from_dict(mask_spec(spec.to_dict()))
    except (SpecError, TypeError):
        return False


def _first_batch(doc: dict[str, Any] | None) -> int | None:
    for query in (doc or {}).get("queries") or []:
        for progress in query.get("recent_progress") or []:
            if progress.get("batchId") is not None:
                return int(progress["batchId"])
    return None


def parse_record(path: str, raw: bytes) -> LifecycleRecord:
    """Parse ``lifecycle.json``; :class:`ControlFileError` naming the file and how to recover."""
    try:
        return LifecycleRecord.from_dict(json.loads(raw))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ControlFileError(
            f"{path} is unreadable ({type(exc).__name__}: {exc}); it records the stream's last lifecycle action, "
            f"so nothing will overwrite it: inspect it, and if that action is over (check the stream and "
            f"history.json), move it aside (mv {path} {path}.bad) to start over") from exc


def unfinished(hook: StreamingJobHook) -> LifecycleRecord | None:
    """The stream's lifecycle action that has not reached a terminal step (its task died), if any."""
    path = f"{hook.paths.root}/{RECORD_NAME}"
    raw = hook.storage.read_bytes(path)
    if raw is None:
        return None
    record = parse_record(path, raw)
    return None if record.done else record


def resume_target(hook: StreamingJobHook, *actions: Action) -> tuple[Action, StreamSpec, StreamSpec | None] | None:
    """``(action, target, current)`` to resume the stream's unfinished action if it is one of ``actions``;
    ``None`` if nothing is unfinished.

    Raises :class:`LifecycleError` when a different action is unfinished: it must be finished first.
    """
    record = unfinished(hook)
    if record is None:
        return None
    if record.action not in actions:
        raise LifecycleError(unfinished_message(record.stream, record.action.value, record.id, record.to_version,
                                                record.step.value, "/".join(a.value for a in actions)))
    current = StreamSpec.from_dict(restore_secrets(record.from_spec, hook.spec)) \
        if record.action == Action.PARALLEL and record.from_spec is not None else None
    return record.action, StreamSpec.from_dict(restore_secrets(record.to_spec, hook.spec)), current


def restart_spec(hook: StreamingJobHook, action: Action) -> StreamSpec:
    """The spec a restart (the deployed one) or a rollback (the one before the last successful upgrade)
    of the stream starts; :class:`SpecError` saying why there is none."""
    deployed = (hook.deployed() or {}).get("spec")
    if deployed is None:
        raise SpecError("action", f"stream {hook.spec.name!r} was never deployed (no {hook.deployed_path}): "
                        f"deploy it before a {action.value}")
    if action == Action.ROLLBACK:
        previous = previous_spec(read_history(hook), deployed.get("version"))
        if previous is None:
            raise SpecError("action", f"stream {hook.spec.name!r} has no earlier version to roll back to: its "
                            f"history has no successful upgrade to {deployed.get('version')}")
        return StreamSpec.from_dict(restore_secrets(previous, hook.spec))
    return StreamSpec.from_dict(restore_secrets(deployed, hook.spec))


def read_history(hook: StreamingJobHook) -> list[dict[str, Any]]:
    """The stream's deployment history, oldest first (``[]`` if none).

    :class:`ControlFileError` naming the file if it is unreadable: it holds the rollback targets, so an
    action that would append to it refuses rather than overwrite it."""
    path = f"{hook.paths.root}/{HISTORY_NAME}"
    raw = hook.storage.read_bytes(path)
    if raw is None:
        return []
    try:
        history = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        history = exc
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        raise ControlFileError(
            f"{path} is unreadable ({history if isinstance(history, Exception) else 'not a list of entries'}); it is "
            f"the stream's deployment history (the rollback targets): repair it, or move it aside (mv {path} "
            f"{path}.bad) to start a new history")
    return history


def describe(hook: StreamingJobHook) -> dict[str, Any]:
    """A stream's status for people: deployed version, driver, health, checkpoint, last action.

    Never raises on an unreadable file: each part says what could not be read."""
    def part(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (ControlFileError, StorageError, StreamingError) as exc:
            return {"error": str(exc)}

    deployed = part(hook.deployed) or {}
    last = part(hook.lifecycle_record)
    position = part(lambda: hook.batch_position().to_dict())
    return {
        "stream": hook.spec.name,
        "deployed_version": ((deployed.get("spec") or {}) if "error" not in deployed else {}).get("version"),
        "run_id": deployed.get("run_id"),
        "running": part(hook.running_driver),
        "health": hook.health().summary(),
        "checkpoint": position,
        "last_action": None if last is None else last if "error" in last else
        {k: last.get(k) for k in ("id", "action", "step", "error")},
        "history": part(lambda: read_history(hook)[-5:]),
    }
