"""Run a lifecycle action on a stream, one recorded step at a time (the I/O half of :mod:`.record`).

This is the one path by which a running stream changes: deploy, stop, restart, upgrade, rollback,
parallel transition and the supervisor's recovery all run here, under the stream's lifecycle lock
(renewed in the background for the whole action), with a record and a history entry.

Deploy:    PLANNED -> STARTING -> PROBATION (first progress) -> SUCCEEDED        (failure: FAILED)
           (without waiting: PLANNED -> STARTING -> SUCCEEDED once submitted)
Stop:      PLANNED -> STOPPING -> STOPPED -> SUCCEEDED
Recover:   PLANNED [kill the recorded driver first] -> STARTING -> SUCCEEDED (submitted; the supervisor's
           next pass judges its health)
Standby:   PLANNED -> STARTING -> SUCCEEDED (the hot standby submitted beside the running driver)
Failover:  PLANNED -> SUCCEEDED (the hot standby's takeover recorded; its place freed)

Upgrade / restart / rollback-to-previous (in place, on the stream's checkpoint):

    PLANNED -> CHECKED -> STOPPING -> STOPPED -> SNAPSHOTTED -> STARTING -> PROBATION -> SUCCEEDED
       |                     |  (a step failed)                        \\-> ROLLING_BACK -> RESTORED
       \\-> REFUSED           \\-> ROLLING_BACK                               -> RESTARTING_OLD -> ROLLED_BACK

Parallel transition (an intentionally incompatible change; new name, checkpoint and output):

    PLANNED -> STARTING -> CATCHING_UP -> RETIRING -> SUCCEEDED      (failure: stop the new one, ROLLED_BACK)

The record is saved in ``<control dir>/lifecycle.json`` *before* each step's side effect, and every
step is safe to repeat. Side effects need the step's permit (:mod:`airflow_streaming.control.permit`):
the runner issues one per step, under the lock it holds, once the step is recorded - nothing else
issues permits, so nothing else can start, stop, kill or rewrite a stream. Every step is safe to repeat, so running the same action again after the task died continues (or rolls
back) from the recorded step. Run ids are chosen and saved before a submission; a resumed STARTING
step first looks for drivers of that run id, so a submission is never repeated.

Failures: an error before the old driver is touched ends the action (REFUSED / FAILED) with the
stream untouched; an error once the old driver stopped (a snapshot on a full disk, a start that
fails) rolls back - the old version restarts from its untouched checkpoint - and the error says
what happened and what is left to do. A lost lock stops the action before its next side effect.
Terminal records are appended to ``history.json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming import faults
from airflow_streaming.compat.run import run_check
from airflow_streaming.control import permit as permits
from airflow_streaming.control.contract import HISTORY_NAME, RECORD_NAME, ControlFileError  # noqa: F401 - re-exported
from airflow_streaming.control.permit import StepPermit
from airflow_streaming.control.seal import CANDIDATE, DEPLOYABLE, LEGACY, seal_problem, sealed_field
from airflow_streaming.control.storage import StorageError
from airflow_streaming.exceptions import LifecycleError, SealError, StreamingError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle.checkpoint_evidence import CheckpointEvidence
from airflow_streaming.lifecycle.gate_steps import GateSteps
from airflow_streaming.control.lifecycle_lock import LifecycleLock, LifecycleLockLost
from airflow_streaming.lifecycle.record import (
    IN_PLACE_CHANGES,
    SUPERVISOR_ACTIONS,
    TERMINAL,
    Action,
    LifecycleRecord,
    Probation,
    Step,
    append_history,
    unfinished_message,
)
from airflow_streaming.lifecycle.rollback_steps import RollbackSteps
from airflow_streaming.lifecycle.run_steps import RunSteps
from airflow_streaming.lifecycle.start_steps import REMOTE_TARGETS, StartSteps  # noqa: F401 - re-exported
from airflow_streaming.lifecycle.stop_steps import StopSteps
from airflow_streaming.lifecycle.stored import (  # noqa: F401 - re-exported: the public readers of a stream's records
    _first_batch,
    _same_spec,
    describe,
    parse_record,
    read_history,
    restart_spec,
    resume_target,
    unfinished,
)
from airflow_streaming.lifecycle.trust import trusted_spec
from airflow_streaming.lifecycle.waits import Wait, WaitNeeded, wait_over
from airflow_streaming.sealing import seal_key, sealed
from airflow_streaming.spec import SpecError, StreamSpec

log = logging.getLogger(__name__)

#: Steps at which the stream is still untouched: an error ends the action, nothing to roll back.
_UNTOUCHED = frozenset({Step.PLANNED, Step.CHECKED, Step.PREPARING})
#: Steps of a rollback: an error is retried, then ROLLBACK_FAILED (a person must look).
_ROLLBACK_STEPS = frozenset({Step.ROLLING_BACK, Step.RESTORED, Step.RESTARTING_OLD})
#: The steps an in-place change reaches only when its compatibility gate passed: there the target is sealed
#: deployable (before, ``candidate``), and a record that claims one of them for a candidate is refused.
_GATE_PASSED = frozenset({Step.CHECKED, Step.STOPPING})
_PAST_GATE = frozenset({Step.CHECKED, Step.STOPPING, Step.STOPPED, Step.SNAPSHOTTED, Step.STARTING, Step.PROBATION})
ROLLBACK_ATTEMPTS = 3


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
    await_progress: bool = True
    """Deploy: wait for the first progress (``False``: the action succeeds once the driver is submitted)."""
    kill_run_id: str | None = None
    """Recover: kill this run's recorded driver first (the reconcile core's ``kill_first``: it reported a
    failure and is still exiting, or it stalled)."""
    supersede: bool = False
    """Stop: end any unfinished action (recorded FAILED, superseded) instead of refusing (``stop_all``)."""
    defer: bool = False
    """Deferrable: instead of waiting, save the record, hand the lock over and raise
    :class:`~airflow_streaming.lifecycle.waits.WaitNeeded` (the operator defers to a trigger)."""


class LifecycleRunner(CheckpointEvidence, StartSteps, GateSteps, StopSteps, RunSteps, RollbackSteps):
    """Runs (or resumes) one action for the stream named by ``target``.

    :param target: the spec the stream should run afterwards (for a parallel transition: the new stream;
        for a stop: the stream).
    :param action: deploy, stop, upgrade, restart, rollback, parallel, recover, standby or failover.
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
        self.new_hook = SparkStreamHook(target)
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
        self.home = SparkStreamHook(current) if current is not None else self.new_hook
        self.storage = self.home.storage
        self.record_path = self.home.paths.record
        self.history_path = self.home.paths.history
        self._given_lock = lock
        self._resume = dict(resume or {})
        """Control dir -> holder id of locks handed to a trigger (a deferred action coming back)."""
        self._locks: list[LifecycleLock] = []
        self.stop_report: dict[str, Any] | None = None
        self._permits: list[StepPermit] = []
        self._record: LifecycleRecord | None = None
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
        if step in _GATE_PASSED and record.action in IN_PLACE_CHANGES \
                and sealed_field(record.to_spec, "status") != DEPLOYABLE:
            # The gate passed (or had nothing to check): from here on the target may run, also for a restart.
            record.to_spec = sealed(self.target.to_dict(), self.home.spec)
        record.advance(step, detail)
        self.save(record)
        faults.hit("runner.step", f"{record.action.value}:{step.value};")  # e.g. the task killed right here
        # A failed outcome's reason is the action's error, which whoever reports the outcome shows (the
        # operators' exception, the CLI's JSON): logged here too, it would print twice in one task log.
        shown = detail if detail and not (step in TERMINAL and record.error and detail in record.error) else None
        log.info("%s %s of %s: %s%s", record.action.value, record.id, record.stream, step.value,
                 f" ({shown})" if shown else "")

    @contextlib.contextmanager
    def _acting(self, record: LifecycleRecord | None) -> Iterator[None]:
        """Open a permit for the recorded step of ``record`` (``None``: the record being created) on every
        stream this action holds the lock of, for the length of the block: the hook's acting primitives and
        the guarded storage refuse without one (:mod:`airflow_streaming.control.permit`)."""
        step = record.step.value if record is not None else Step.PLANNED.value
        record_id = record.id if record is not None else "new"
        issued = [permits.issue(lock, self.action.value, record_id, step) for lock in self._locks]
        with contextlib.ExitStack() as stack:
            for permit in issued:
                stack.enter_context(permit.open(permit.root, f"{self.action.value} at {step}"))
            previous, self._permits = self._permits, issued
            try:
                yield
            finally:
                self._permits = previous

    def permit_of(self, hook: SparkStreamHook) -> StepPermit:
        """The open permit of the step under way for ``hook``'s stream."""
        for permit in self._permits:
            if permit.root == hook.paths.root:
                return permit
        raise permits.ActingRefused(f"{self.action.value} of {self.target.name}: no open step permit for "
                                    f"{hook.paths.root} (a side effect outside a recorded step)")

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
            with self._acting(None):
                record = self._resume_or_create(self._locks[0])
            self._record = record
            rollback_errors = 0
            while not record.done:
                self._ensure_lock()
                handler = getattr(self, f"_{record.step.value.lower()}")
                with self._acting(record):
                    try:
                        handler(record)
                    except (LifecycleLockLost, WaitNeeded):
                        raise
                    except Exception as exc:  # noqa: BLE001 - every failure ends in a safe, recorded step
                        rollback_errors += record.step in _ROLLBACK_STEPS
                        self._on_step_error(record, exc, rollback_errors)
            with self._acting(record):
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

    def _take(self, hook: SparkStreamHook) -> LifecycleLock:
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
        expected = isinstance(exc, (StreamingError, OSError, SpecError, SealError))
        ends = step not in _ROLLBACK_STEPS and (step in _UNTOUCHED or step == Step.RETIRING or record.action in (
            Action.DEPLOY, Action.STOP, *SUPERVISOR_ACTIONS))
        if ends and expected:  # the action ends FAILED with this error as its outcome: reported once, there
            log.warning("%s %s of %s failed at %s", record.action.value, record.id, record.stream, step.value)
        else:  # the action goes on (rolling back), or a bug: the error and its traceback now
            log.error("%s %s of %s failed at %s: %s", record.action.value, record.id, record.stream, step.value,
                      what, exc_info=not expected)
        if isinstance(exc, (StorageError, ControlFileError)) and not self._can_write_record():
            raise exc  # the record cannot be saved: leave it where it is, to resume from
        if step in _ROLLBACK_STEPS:
            if rollback_errors < ROLLBACK_ATTEMPTS and not isinstance(exc, SealError):  # a seal stays wrong
                log.warning("retrying %s (%d/%d)", step.value, rollback_errors, ROLLBACK_ATTEMPTS)
                time.sleep(min(10.0, 2.0 * rollback_errors))
                return
            record.error = (f"{record.error or 'the action failed'}; and the rollback failed at {step.value}: {what}. "
                            f"The stream is NOT running. The snapshot ({(record.snapshot or {}).get('snapshot_dir')}) "
                            "is kept; fix the cause, then restart the old version")
            self._advance(record, Step.ROLLBACK_FAILED, what)
            return
        record.error = f"{record.action.value} failed at {step.value}: {what}"
        if step in _UNTOUCHED or record.action in (Action.DEPLOY, Action.STOP, *SUPERVISOR_ACTIONS):
            if record.action in (Action.DEPLOY, Action.RECOVER, Action.STANDBY) and record.new_run_id:
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
            supersedable = record.action in (Action.DEPLOY, Action.STOP, *SUPERVISOR_ACTIONS) or self.options.supersede
            if supersedable and self.action == Action.STOP and record.action != Action.STOP:
                left_at = record.step.value
                record.abandon(f"abandoned at {left_at}: superseded by a stop "
                               f"({self.options.owner or 'pid ' + str(os.getpid())})")
                self.save(record)
                log.warning("%s %s of %s: %s", record.action.value, record.id, record.stream, record.error)
                self._append_history(record)
                record = None
            elif record.action != self.action or not _same_spec(record.to_spec, self.target):
                raise LifecycleError(unfinished_message(record.stream, record.action.value, record.id,
                                                        record.to_version, record.step.value, self.action.value))
        if record is not None and not record.done:
            self._check_gate_passed(record)
            note = f"resumed by {self.options.owner or 'pid ' + str(os.getpid())} at step {record.step.value}"
            if lock.took_over:
                note += f"; took over the stale lock of {lock.took_over.get('owner')} (pid {lock.took_over.get('pid')})"
            log.warning("%s", note)
            record.steps.append({"step": "RESUMED", "at": time.time(), "detail": note})
            self.save(record)
            return record
        deployed = self.home.deployed()
        from_spec = self.current.to_dict() if self.current is not None else (deployed or {}).get("spec")
        if self.current is None and from_spec is not None:  # the rollback target: never a forged deployed.json
            from_spec = trusted_spec(from_spec, self.home.deployed_path, self.home.spec, self.target,
                                     home=self.home.spec)
        # Specs at rest: no secret (redaction.mask_spec), sealed for this stream's control directory
        # (lifecycle.trust). An in-place change's target is only a candidate until its gate passes (_advance).
        record = LifecycleRecord(
            stream=self.home.spec.name, action=self.action, from_spec=sealed(from_spec, self.home.spec),
            to_spec=sealed(self.target.to_dict(), self.home.spec,
                           status=CANDIDATE if self.action in IN_PLACE_CHANGES else DEPLOYABLE),
            allow_warnings=self.options.allow_warnings, probation=self.options.probation, owner=self.options.owner,
            warm_start=self.options.warm_start and self.action in IN_PLACE_CHANGES)
        record.old_run_id = (deployed or {}).get("run_id")
        record.sink_path = self._sink_path()
        if lock.took_over:
            record.steps.append({"step": "LOCK_TAKEN_OVER", "at": time.time(), "detail": str(lock.took_over)})
        self.save(record)
        faults.hit("runner.step", f"{record.action.value}:{record.step.value};")
        return record

    def _check_gate_passed(self, record: LifecycleRecord) -> None:
        """An unfinished in-place change recorded past its gate must carry a target sealed deployable for this
        stream: a record a driver rewrote to skip the gate (a candidate at STOPPING, say) is refused. A record
        sealed by an earlier version of the provider (no status in its seal) resumes as recorded."""
        if record.action not in IN_PLACE_CHANGES or record.step not in _PAST_GATE:
            return
        problem = seal_problem(record.to_spec, seal_key(), stream=self.home.spec.name,
                               control=self.home.spec.control_dir)
        if problem not in (None, LEGACY):
            raise SealError(f"{self.record_path}: the {record.action.value} {record.id} of {record.stream} is recorded "
                            f"at step {record.step.value}, past its compatibility gate, but its target "
                            f"{record.to_version} is {problem}: the record was not written by this runner after a "
                            "passed gate, so nothing is resumed. Inspect the file, move it aside (mv "
                            f"{self.record_path} {self.record_path}.bad) and run the {record.action.value} again")

    # ------------------------------------------------------------------ a deploy's task killed
    def abandon_start(self, reason: str) -> bool:
        """The task running this deploy is being killed while its new driver starts: note it in the record and
        ask that driver to stop (a retry resumes the deploy, a stop supersedes it). Only while this runner
        holds its lock; never raises. Returns whether a stop was requested."""
        record = self._record
        if record is None or record.done or record.action not in (Action.DEPLOY, Action.RECOVER) or not self._locks:
            return False
        try:
            with self._acting(record):
                record.steps.append({"step": "ABANDONED", "at": time.time(), "detail": reason})
                self.save(record)
                self.new_hook.request_stop(self.permit_of(self.new_hook))
            return True
        except Exception:  # noqa: BLE001 - a kill path logs and never raises
            log.exception("could not ask the starting driver of %s to stop", record.stream)
            return False

    def _lock_of(self, hook: SparkStreamHook) -> LifecycleLock:
        for lock in self._locks:
            if lock.path.startswith(hook.paths.root + "/"):
                return lock
        return self.lock

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
            self.new_hook.storage.write_atomic(self.new_hook.paths.history, json.dumps(other, indent=1).encode())
        if record.step == Step.SUCCEEDED and record.action in IN_PLACE_CHANGES:
            self._prune_snapshots(record)
        kind = {Step.SUCCEEDED: "UPGRADE_SUCCEEDED", Step.ROLLED_BACK: "UPGRADE_ROLLED_BACK",
                Step.ROLLBACK_FAILED: "FAILED", Step.FAILED: "FAILED"}.get(record.step)
        if record.action in (Action.DEPLOY, Action.STOP, *SUPERVISOR_ACTIONS) and record.step == Step.SUCCEEDED:
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


