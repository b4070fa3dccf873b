"""Run a lifecycle action on a stream, one recorded step at a time (the I/O half of :mod:`.record`).

Upgrade / restart / rollback-to-previous (in place, on the stream's checkpoint):

    PLANNED -> CHECKED -> STOPPING -> STOPPED -> SNAPSHOTTED -> STARTING -> PROBATION -> SUCCEEDED
       |                     |  (checkpoint not clean)                 \\-> ROLLING_BACK -> RESTORED
       \\-> REFUSED           \\-> ROLLING_BACK                               -> RESTARTING_OLD -> ROLLED_BACK

Parallel transition (an intentionally incompatible change; new name, checkpoint and output):

    PLANNED -> STARTING -> CATCHING_UP -> RETIRING -> SUCCEEDED      (failure: stop the new one, ROLLED_BACK)

The record is saved in ``<control dir>/lifecycle.json`` *before* each step's side effect, and every
step is safe to repeat, so running the same action again after the task died continues (or rolls
back) from the recorded step. Run ids are chosen and saved before a submission; a resumed STARTING
step first looks for processes of that run id, so a submission is never repeated. Terminal records
are appended to ``history.json``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.checkpoint.batches import BatchPosition
from airflow_streaming.compat.run import blocking_problems, run_check
from airflow_streaming.control import contract
from airflow_streaming.exceptions import StreamingError
from airflow_streaming.hooks.streaming_job import StreamingJobHook, wait_exit
from airflow_streaming.lifecycle import snapshot as snapshots
from airflow_streaming.lifecycle.lock import LifecycleLock
from airflow_streaming.lifecycle.record import (
    Action,
    LifecycleRecord,
    Probation,
    Step,
    append_history,
    caught_up,
    error_summary,
    previous_spec,
    probation_outcome,
)
from airflow_streaming.spec import SpecError, StreamSpec

log = logging.getLogger(__name__)

RECORD_NAME = "lifecycle.json"
HISTORY_NAME = "history.json"


class LifecycleError(StreamingError):
    """A lifecycle action cannot go on (the message says why and what to do)."""


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


def _spec(d: dict[str, Any] | None) -> StreamSpec | None:
    return None if d is None else StreamSpec.from_dict(d)


class LifecycleRunner:
    """Runs (or resumes) one action for the stream named by ``target``.

    :param target: the spec the stream should run afterwards (for a parallel transition: the new stream).
    :param action: upgrade, restart, rollback or parallel.
    :param current: the spec running now; default: the one recorded at the last submission
        (``deployed.json``). Required for a parallel transition (the old stream).
    :param notify: receives event dicts (UPGRADE_SUCCEEDED / UPGRADE_ROLLED_BACK / FAILED).
    """

    def __init__(self, target: StreamSpec, action: Action | str, options: LifecycleOptions | None = None,
                 current: StreamSpec | None = None, notify: Callable[[dict[str, Any]], None] | None = None):
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

    # ------------------------------------------------------------------ persistence
    def load_record(self) -> LifecycleRecord | None:
        raw = self.storage.read_bytes(self.record_path)
        if raw is None:
            return None
        try:
            return LifecycleRecord.from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise LifecycleError(f"{self.record_path} is unreadable ({exc}); inspect it before any further action "
                                 "(move it aside to start over)") from exc

    def save(self, record: LifecycleRecord) -> None:
        self.storage.write_atomic(self.record_path, json.dumps(record.to_dict(), indent=1).encode())

    def history(self) -> list[dict[str, Any]]:
        return read_history(self.home)

    def _advance(self, record: LifecycleRecord, step: Step, detail: str | None = None) -> None:
        record.advance(step, detail)
        self.save(record)
        log.info("%s %s of %s: %s%s", record.action.value, record.id, record.stream, step.value,
                 f" ({detail})" if detail else "")

    # ------------------------------------------------------------------ driving
    def run(self) -> LifecycleRecord:
        """Run the action to a terminal step (or raise, leaving the record to resume from)."""
        locks = [LifecycleLock.acquire(self.storage, self.home.paths.root, self.action.value, self.options.owner)]
        try:
            if self.action == Action.PARALLEL:
                locks.append(LifecycleLock.acquire(self.new_hook.storage, self.new_hook.paths.root,
                                                   self.action.value, self.options.owner))
            self._locks = locks
            record = self._resume_or_create(locks[0])
            while not record.done:
                for lock in locks:
                    lock.renew()
                handler = getattr(self, f"_{record.step.value.lower()}")
                handler(record)
            self._finish(record)
            return record
        finally:
            for lock in reversed(locks):
                lock.release()

    def _renew(self) -> None:
        for lock in getattr(self, "_locks", []):
            lock.renew()

    def _resume_or_create(self, lock: LifecycleLock) -> LifecycleRecord:
        record = self.load_record()
        if record is not None and not record.done:
            if record.action != self.action or record.to_spec != self.target.to_dict():
                raise LifecycleError(
                    f"stream {record.stream!r} has an unfinished {record.action.value} {record.id} to version "
                    f"{record.to_version} at step {record.step.value}: run that action again to finish it (it "
                    "continues or rolls back from that step) before starting another one")
            note = f"resumed by {self.options.owner or 'pid ' + str(os.getpid())} at step {record.step.value}"
            if lock.took_over:
                note += f"; took over the stale lock of {lock.took_over.get('owner')} (pid {lock.took_over.get('pid')})"
            log.warning("%s", note)
            record.steps.append({"step": "RESUMED", "at": time.time(), "detail": note})
            self.save(record)
            return record
        deployed = self.home.deployed()
        from_spec = self.current.to_dict() if self.current is not None else (deployed or {}).get("spec")
        record = LifecycleRecord(
            stream=self.home.spec.name, action=self.action, from_spec=from_spec, to_spec=self.target.to_dict(),
            allow_warnings=self.options.allow_warnings, probation=self.options.probation, owner=self.options.owner,
            warm_start=self.options.warm_start and self.action != Action.PARALLEL)
        record.old_run_id = (deployed or {}).get("run_id")
        record.sink_path = self._sink_path()
        if lock.took_over:
            record.steps.append({"step": "LOCK_TAKEN_OVER", "at": time.time(), "detail": str(lock.took_over)})
        self.save(record)
        return record

    def _sink_path(self) -> str | None:
        """The file sink's directory, from the running query's last progress (``FileSink[path]``)."""
        try:
            doc = self.home.status()
        except contract.ControlFileError:
            return None
        for query in doc.queries if doc is not None else []:
            for progress in reversed(query.recent_progress):
                path = snapshots.sink_path_from_description((progress.get("sink") or {}).get("description"))
                if path:
                    return path
        return None

    # ------------------------------------------------------------------ steps
    def _planned(self, record: LifecycleRecord) -> None:
        if record.action == Action.PARALLEL:
            running = self.new_hook.running_driver()
            if running:
                self._advance(record, Step.FAILED, f"the new stream {self.target.name} already runs: {running}")
                record.error = record.steps[-1]["detail"]
                return
            record.new_run_id = contract.new_run_id()
            self._advance(record, Step.STARTING, f"new stream {self.target.name} run {record.new_run_id}")
            return
        position = self.new_hook.batch_position()
        if record.from_spec == record.to_spec:
            self._advance(record, Step.CHECKED, "same spec: no compatibility change to check")
            return
        if position.last_committed is None:
            self._advance(record, Step.CHECKED, "the checkpoint has no committed batch: nothing to check")
            return
        try:
            report = self.options.check(self.target, record.allow_warnings, self.options.dry_run)
        except StreamingError as exc:  # the check could not run: nothing was touched, nothing may go ahead
            record.error = str(exc)
            self._advance(record, Step.REFUSED, record.error.splitlines()[0])
            return
        record.verdict = report["verdict"]
        problems = blocking_problems(report, record.allow_warnings)
        if problems is not None:
            record.error = (f"{self.target.application} {self.target.version} is {record.verdict} with the checkpoint "
                            f"{self.target.checkpoint_location}: " + "; ".join(problems))
            self._advance(record, Step.REFUSED, record.error)
            return
        self._advance(record, Step.CHECKED, f"compatibility {record.verdict}")

    def _checked(self, record: LifecycleRecord) -> None:
        if record.warm_start:
            record.new_run_id = record.new_run_id or contract.new_run_id()
            self._advance(record, Step.PREPARING, f"standby run {record.new_run_id}")
            return
        self._advance(record, Step.STOPPING)

    def _preparing(self, record: LifecycleRecord) -> None:
        """Start the new version as a standby beside the running one and wait until it is prepared."""
        hook, run_id = self.new_hook, record.new_run_id
        assert run_id is not None
        failure = None
        try:
            standby = hook.standby_record()
            if not (standby is not None and standby.run_id == run_id) and not hook.processes_of_run(run_id):
                hook.submit(run_id=run_id, standby=True)
        except Exception as exc:  # noqa: BLE001 - the running version was not touched
            failure = str(exc)
        deadline = time.time() + hook.spec.startup_timeout
        while failure is None:
            self._renew()
            state = hook.standby_state(run_id) or {}
            if state.get("state") == "READY":
                self._advance(record, Step.STOPPING, f"standby run {run_id} prepared")
                return
            if state.get("state") in ("FAILED", "EXPIRED") or not hook.processes_of_run(run_id):
                failure = error_summary(state.get("error")) or f"the standby driver exited ({state.get('state')})"
            elif time.time() > deadline:
                failure = f"the standby driver was not prepared within {hook.spec.startup_timeout:.0f}s"
            else:
                time.sleep(self.options.poll_s)
        self._stop_run(hook, run_id)
        record.error = f"{self.target.version} failed while preparing: {failure}"
        self._advance(record, Step.ROLLED_BACK, f"{record.error}; {record.from_version} was never stopped")

    def _stopping(self, record: LifecycleRecord) -> None:
        hook = self.home
        report = hook.stop()
        if hook.running_driver():
            raise LifecycleError(f"stream {record.stream!r} still runs after the stop: {hook.running_driver()}; "
                                 "run the action again to retry the stop")
        position = report.position or hook.batch_position()
        if not position.clean:
            record.error = (f"the checkpoint is not clean after the stop (batch {position.last_planned} planned, "
                            f"{position.last_committed} committed); restarting {record.from_version}, which "
                            f"replays batch {position.last_planned}")
            self._advance(record, Step.ROLLING_BACK, record.error)
            return
        record.stop_batch = position.last_committed
        self._advance(record, Step.STOPPED, f"stopped at batch {position.last_committed} "
                      f"({'graceful' if report.graceful else 'not running' if not report.was_running else 'killed'})")

    def _stopped(self, record: LifecycleRecord) -> None:
        if record.stop_batch is None:
            record.new_run_id = record.new_run_id or contract.new_run_id()
            self._advance(record, Step.STARTING, "empty checkpoint: nothing to snapshot")
            return
        manifest = snapshots.take_snapshot(self.target.checkpoint_location, self._snapshot_dir(record),
                                           record.sink_path)
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
                self.new_hook.promote(record.new_run_id or "")
            else:
                self._submit_once(self.new_hook, record.new_run_id)
        except Exception as exc:  # noqa: BLE001 - any start failure rolls back
            record.error = f"{self.target.version} did not start: {exc}"
            self._advance(record, Step.ROLLING_BACK, record.error.splitlines()[0])
            return
        next_step = Step.CATCHING_UP if record.action == Action.PARALLEL else Step.PROBATION
        self._advance(record, next_step, f"run {record.new_run_id} submitted")

    def _submit_once(self, hook: StreamingJobHook, run_id: str | None) -> None:
        """Submit ``run_id`` unless a process or record of that run already exists (a resumed step)."""
        assert run_id is not None
        record = hook.driver_record()
        if (record is not None and record.run_id == run_id) or hook.processes_of_run(run_id):
            log.info("run %s of %s was already submitted: not submitting again", run_id, hook.spec.name)
            return
        hook.submit(run_id=run_id)

    def _run_view(self, hook: StreamingJobHook, run_id: str | None) -> tuple[str | None, dict[str, Any] | None, Any]:
        """(state, status dict, health verdict) of ``run_id``; state FAILED when it is gone without status."""
        verdict = hook.health()
        try:
            raw = hook.storage.read_bytes(hook.paths.status)
            doc = json.loads(raw) if raw is not None else None
        except ValueError:
            doc = None
        if doc is not None and doc.get("run_id") != run_id:
            doc = None
        state = doc.get("state") if doc is not None else None
        if not hook.processes_of_run(run_id or "") and not hook.running_driver():
            state = state if state in ("FAILED", "STOPPED") else "FAILED"
        return state, doc, verdict

    def _probation(self, record: LifecycleRecord) -> None:
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
            time.sleep(self.options.poll_s)

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
            time.sleep(self.options.poll_s)

    def _retiring(self, record: LifecycleRecord) -> None:
        report = self.home.stop()
        if self.home.running_driver():
            raise LifecycleError(f"the old stream {record.stream!r} still runs after the stop; run the action again")
        record.stop_batch = report.position.last_committed if report.position else None
        self._advance(record, Step.SUCCEEDED, f"old stream stopped at batch {record.stop_batch}; "
                      f"{self.target.name} carries on")

    def _stop_run(self, hook: StreamingJobHook, run_id: str | None) -> None:
        """Stop the driver of ``run_id`` (gracefully, then by force) and make sure none of its processes live."""
        record = hook.driver_record()
        if record is not None and record.run_id == run_id:
            hook.stop(timeout=min(hook.spec.stop_timeout, 60.0))
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 30.0)):  # e.g. a standby never promoted
            for pid in hook.processes_of_run(run_id or ""):
                try:
                    os.killpg(os.getpgid(pid), sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + grace
            while hook.processes_of_run(run_id or "") and time.monotonic() < deadline:
                time.sleep(0.2)
        if record is not None and record.run_id == run_id:
            wait_exit(record, 5.0)
        if hook.processes_of_run(run_id or ""):
            raise LifecycleError(f"processes of run {run_id} of {hook.spec.name} survive SIGKILL; run the action again")

    def _rolling_back(self, record: LifecycleRecord) -> None:
        if record.new_run_id:
            self._stop_run(self.new_hook, record.new_run_id)
        if record.action == Action.PARALLEL:
            self._advance(record, Step.ROLLED_BACK, f"stopped {self.target.name}; the old stream was never touched")
            return
        if self.home.running_driver():
            raise LifecycleError(f"a driver of {record.stream!r} still runs ({self.home.running_driver()}); "
                                 "not restoring the checkpoint under it. Run the action again.")
        if record.from_spec is None:
            self._advance(record, Step.FAILED, record.error)
            return
        detail = "nothing to restore (the new version never ran)"
        if record.snapshot is not None:
            report = snapshots.restore_snapshot(snapshots.SnapshotManifest.from_dict(record.snapshot),
                                                f".rolled-back-{record.id}")
            detail = f"checkpoint restored to batch {report['batch_id']}" + (
                ", file sink log restored" if report.get("sink_metadata_restored") else "")
        self._advance(record, Step.RESTORED, detail)

    def _restored(self, record: LifecycleRecord) -> None:
        record.rollback_run_id = contract.new_run_id()
        self._advance(record, Step.RESTARTING_OLD, f"run {record.rollback_run_id} of {record.from_version}")

    def _restarting_old(self, record: LifecycleRecord) -> None:
        old = StreamingJobHook(_spec(record.from_spec))  # type: ignore[arg-type]
        try:
            self._submit_once(old, record.rollback_run_id)
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
    def _finish(self, record: LifecycleRecord) -> None:
        entry = record.history_entry()
        self.storage.write_atomic(self.history_path, json.dumps(append_history(self.history(), entry),
                                                                indent=1).encode())
        if record.action == Action.PARALLEL and record.step == Step.SUCCEEDED:
            other = append_history(read_history(self.new_hook), {**entry, "stream": self.target.name})
            self.new_hook.storage.write_atomic(f"{self.new_hook.paths.root}/{HISTORY_NAME}",
                                               json.dumps(other, indent=1).encode())
        if record.step == Step.SUCCEEDED:
            self._prune_snapshots(record)
        kind = {Step.SUCCEEDED: "UPGRADE_SUCCEEDED", Step.ROLLED_BACK: "UPGRADE_ROLLED_BACK",
                Step.ROLLBACK_FAILED: "FAILED", Step.FAILED: "FAILED"}.get(record.step)
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
        names = sorted(self.storage.list_dir(root))
        for name in names[: max(0, len(names) - self.options.snapshots_kept)]:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _first_batch(doc: dict[str, Any] | None) -> int | None:
    for query in (doc or {}).get("queries") or []:
        for progress in query.get("recent_progress") or []:
            if progress.get("batchId") is not None:
                return int(progress["batchId"])
    return None


def unfinished(hook: StreamingJobHook) -> LifecycleRecord | None:
    """The stream's lifecycle action that has not reached a terminal step (its task died), if any."""
    raw = hook.storage.read_bytes(f"{hook.paths.root}/{RECORD_NAME}")
    if raw is None:
        return None
    try:
        record = LifecycleRecord.from_dict(json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise LifecycleError(f"{hook.paths.root}/{RECORD_NAME} is unreadable ({exc}); inspect it before any further "
                             "action (move it aside to start over)") from exc
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
        raise LifecycleError(
            f"stream {record.stream!r} has an unfinished {record.action.value} {record.id} to version "
            f"{record.to_version} at step {record.step.value}: run that action again to finish it (it continues or "
            "rolls back from that step) before starting another one")
    current = _spec(record.from_spec) if record.action == Action.PARALLEL else None
    return record.action, StreamSpec.from_dict(record.to_spec), current


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
        return StreamSpec.from_dict(previous)
    return StreamSpec.from_dict(deployed)


def read_history(hook: StreamingJobHook) -> list[dict[str, Any]]:
    """The stream's deployment history, oldest first (``[]`` if none)."""
    raw = hook.storage.read_bytes(f"{hook.paths.root}/{HISTORY_NAME}")
    try:
        return json.loads(raw) if raw is not None else []
    except ValueError:
        log.error("unreadable %s/%s", hook.paths.root, HISTORY_NAME)
        return []


def describe(hook: StreamingJobHook) -> dict[str, Any]:
    """A stream's status for people: deployed version, driver, health, checkpoint, last action."""
    deployed = hook.deployed() or {}
    raw = hook.storage.read_bytes(f"{hook.paths.root}/{RECORD_NAME}")
    last = json.loads(raw) if raw is not None else None
    position: BatchPosition | None
    try:
        position = hook.batch_position()
    except OSError:
        position = None
    return {
        "stream": hook.spec.name,
        "deployed_version": (deployed.get("spec") or {}).get("version"),
        "run_id": deployed.get("run_id"),
        "running": hook.running_driver(),
        "health": hook.health().summary(),
        "checkpoint": position.to_dict() if position else None,
        "last_action": None if last is None else {k: last.get(k) for k in ("id", "action", "step", "error")},
        "history": read_history(hook)[-5:],
    }
