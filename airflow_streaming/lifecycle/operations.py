"""Lifecycle operations on the streams of a desired-state file (what the DAGs call; no Airflow import).

``operate`` runs one action (deploy / stop / restart / upgrade / rollback / status) for one stream;
``apply_pending`` applies every pending version change of the file, one stream at a time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from airflow_streaming.control.contract import ControlFileError
from airflow_streaming.exceptions import SealError, StreamingError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle.desired_state import DesiredState, StreamTarget, pending_changes
from airflow_streaming.lifecycle.record import Action, LifecycleRecord, Probation
from airflow_streaming.lifecycle.runner import (
    LifecycleOptions,
    LifecycleRunner,
    describe,
    restart_spec,
    resume_target,
)
from airflow_streaming.lifecycle.trust import trusted_spec
from airflow_streaming.reconcile.change import Change, choose_change
from airflow_streaming.redaction import redact, restore_secrets
from airflow_streaming.spec import SpecError, StreamSpec

log = logging.getLogger(__name__)

ACTIONS = ("deploy", "stop", "restart", "upgrade", "rollback", "status")


def _hooks(target: StreamTarget) -> list[SparkStreamHook]:
    """One hook per distinct stream name the target's versions use (a parallel version has its own)."""
    hooks: dict[str, SparkStreamHook] = {}
    for version in target.versions:
        spec = target.spec_for(version)
        hooks.setdefault(spec.name, SparkStreamHook(spec))
    return list(hooks.values())


def deployment(target: StreamTarget) -> tuple[str | None, SparkStreamHook]:
    """The version of ``target`` deployed most recently and the hook of its stream.

    A parallel transition moves a stream to another name (control directory); the most recent
    submission among the names its versions use wins. ``(None, hook of the wanted version)`` if none.
    """
    best: tuple[float, str | None, SparkStreamHook] | None = None
    for hook in _hooks(target):
        deployed = hook.deployed()
        if deployed is None:
            continue
        at = float(deployed.get("at") or 0)
        if best is None or at > best[0]:
            version = (deployed.get("spec") or {}).get("version")
            wanted = target.spec_for(version) if version in target.versions else target.spec
            try:
                stored = trusted_spec(deployed["spec"], hook.deployed_path,
                                      *(target.spec_for(v) for v in target.versions), home=hook.spec)
            except (ControlFileError, SealError) as exc:  # not ours: act with the desired-state file's spec instead
                log.warning("%s", exc)
                best = (at, version, SparkStreamHook(wanted))
            else:
                best = (at, version, SparkStreamHook(StreamSpec.from_dict(restore_secrets(stored, wanted))))
    if best is None:
        return None, SparkStreamHook(target.spec)
    return best[1], best[2]


def deployed_versions(state: DesiredState) -> dict[str, str | None]:
    return {name: deployment(target)[0] for name, target in state.streams.items()}


def operate(state: DesiredState, stream: str, action: str, version: str | None = None,
            allow_warnings: bool | None = None, owner: str | None = None,
            notify: Callable[[dict[str, Any]], None] | None = None, defer: bool = False,
            resume: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``action`` on ``stream``; returns a JSON-safe result. Invalid choices raise :class:`SpecError`
    naming the parameter. A lifecycle action that ends REFUSED / ROLLED_BACK / FAILED raises
    :class:`StreamingError` after it is recorded."""
    if action not in ACTIONS:
        raise SpecError("action", f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}")
    target = state.target(stream)
    if version and version not in target.versions:
        raise SpecError("version", f"stream {stream!r} has no version {version!r} in {state.path or 'the desired state'}"
                        f"; listed: {', '.join(target.versions)}")
    current_version, hook = deployment(target)
    options = LifecycleOptions(allow_warnings=target.allow_warnings if allow_warnings is None else allow_warnings,
                               probation=Probation(target.probation.min_batches, target.probation.window_s),
                               owner=owner, warm_start=target.warm_start, defer=defer)
    if action == "status":
        return describe(hook)
    if action == "stop":
        return stop_stream(hook.spec, options, resume)
    if action == "deploy":
        return deploy_stream(target.spec_for(version or current_version or target.version), options, resume)
    known = tuple(target.spec_for(v) for v in target.versions)  # the desired-state file's: trusted
    if action in ("restart", "rollback", "upgrade"):
        accepted = (Action.UPGRADE, Action.PARALLEL) if action == "upgrade" else (Action(action),)
        for candidate in _hooks(target):
            resumed = resume_target(candidate, *accepted, known=known)
            if resumed is not None:  # the task running this action died: finish that action, as recorded
                kind, target_spec, current_spec = resumed
                return _run(LifecycleRunner(target_spec, kind, options, current=current_spec, notify=notify,
                                            resume=resume))
    if action in ("restart", "rollback"):
        kind = Action(action)
        return _run(LifecycleRunner(restart_spec(hook, kind, *known), kind, options, notify=notify, resume=resume))
    # upgrade
    wanted = version or target.version
    spec = target.spec_for(wanted)
    change = choose_change(wanted, spec.name, current_version, hook.spec.name, target.transition_for(wanted))
    if change == Change.DEPLOY:
        raise SpecError("action", f"stream {stream!r} was never deployed: deploy it first")
    if change == Change.UNCHANGED:
        return {"stream": stream, "outcome": "UNCHANGED", "version": wanted}
    kind = Action.PARALLEL if change == Change.PARALLEL else Action.UPGRADE
    return _run(LifecycleRunner(spec, kind, options, current=hook.spec, notify=notify, resume=resume))


def deploy_stream(spec: StreamSpec, options: LifecycleOptions | None = None,
                  resume: dict[str, str] | None = None,
                  started: Callable[[LifecycleRunner], None] | None = None) -> dict[str, Any]:
    """Deploy ``spec`` through the lifecycle (lock, record, history) and wait for its first progress (or, with
    ``options.await_progress`` off, until it is submitted).

    Returns the run's identity; raises the deploy's own error (already running, application or Java
    missing, the driver's startup error) when it fails. A deploy whose task died is resumed. ``started``
    receives the runner before it runs (an operator's ``on_kill`` asks it to abandon the start)."""
    runner = LifecycleRunner(spec, Action.DEPLOY, options, resume=resume)
    if started is not None:
        started(runner)
    if resume is None:
        runner.new_hook.preflight()
    record = runner.run()
    if record.step.value != "SUCCEEDED":
        raise runner.failure or LifecycleOutcomeError(result_of(record))
    hook = runner.new_hook
    driver = hook.driver_record()
    doc = hook.status()
    doc = doc if doc is not None and driver is not None and doc.run_id == driver.run_id else None
    return {"stream": spec.name, "version": spec.version, "run_id": record.new_run_id, "action_id": record.id,
            "state": doc.state if doc else None, "submit_pid": driver.submit_pid if driver else None,
            "target": driver.target if driver else None, "driver_pid": doc.pid if doc else None,
            "app_id": doc.app_id if doc else None, "spark_ui": doc.spark_ui if doc else None,
            "control_dir": spec.control_dir, "log_path": driver.log_path if driver else None}


def stop_stream(spec: StreamSpec, options: LifecycleOptions | None = None,
                resume: dict[str, str] | None = None) -> dict[str, Any]:
    """Stop the stream through the lifecycle at a micro-batch boundary; returns the stop report.

    Refused (``StreamingError``) while another action holds the stream or is unfinished - except an
    unfinished deploy or recovery, which the stop supersedes."""
    runner = LifecycleRunner(spec, Action.STOP, options, resume=resume)
    record = runner.run()
    if record.step.value != "SUCCEEDED":
        raise runner.failure or LifecycleOutcomeError(result_of(record))
    report = runner.stop_report or {"stream": spec.name, "was_running": False, "graceful": False, "killed": False,
                                    "exit_code": None, "seconds": 0.0}
    return {**report, "action_id": record.id}


def result_of(record: LifecycleRecord) -> dict[str, Any]:
    """A JSON-safe summary of a finished action (its history entry plus the steps, one line each)."""
    result = record.history_entry()
    result.pop("from_spec", None)
    result["steps"] = [f"{s['step']}{': ' + s['detail'] if s.get('detail') else ''}" for s in record.steps]
    return result


def _run(runner: LifecycleRunner) -> dict[str, Any]:
    record = runner.run()
    result = result_of(record)
    if record.step.value != "SUCCEEDED":
        raise LifecycleOutcomeError(result)
    return result


class LifecycleOutcomeError(StreamingError):
    """The action ended without doing what was asked (refused, rolled back, failed); ``result`` says how."""

    def __init__(self, result: Mapping[str, Any]):
        self.result = dict(result)
        super().__init__(f"{result['action']} of {result['stream']} to {result['to_version']} ended "
                         f"{result['outcome']}: {result.get('error')}")


def apply_pending(state: DesiredState, owner: str | None = None,
                  notify: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Apply every pending change, one stream at a time; a failing stream does not stop the others."""
    summary = []
    for change in pending_changes(state, deployed_versions(state)):
        started = time.time()
        entry: dict[str, Any] = {"stream": change.stream, "from": change.from_version, "to": change.to_version,
                                 "transition": change.transition}
        action = "deploy" if choose_change(change.to_version, "", change.from_version, "",
                                           change.transition) == Change.DEPLOY else "upgrade"
        try:
            result = operate(state, change.stream, action, change.to_version, owner=owner, notify=notify)
            entry["outcome"] = result.get("outcome", "DEPLOYED")
        except LifecycleOutcomeError as exc:
            entry["outcome"], entry["error"] = exc.result["outcome"], exc.result.get("error")
        except Exception as exc:  # noqa: BLE001 - report and go on with the next stream
            log.exception("change of %s failed", change.stream)
            entry["outcome"], entry["error"] = "ERROR", redact(f"{type(exc).__name__}: {exc}")
        entry["seconds"] = round(time.time() - started, 1)
        summary.append(entry)
    return summary
