"""One supervision pass over a stream: notice a failed or vanished driver and act on the restart policy.

Design: a scheduled DAG (``dags/stream_supervisor.py``, every minute, one run at a time) calls
:func:`supervise` for each stream. Chosen over a long-lived deferrable watcher because each pass is
short, stateless in the worker and resumable: all state (the restart ledger) lives in the stream's
control directory, so a retried or duplicated task continues where the last pass left off.

Safety:
- the stream's lifecycle lock (:mod:`airflow_streaming.lifecycle.lock`, shared with upgrades,
  restarts and rollbacks) makes concurrent passes - and a pass during an upgrade - take turns: a pass
  that finds it held skips the stream;
- decisions are keyed on the *current* run id: a failed run is restarted once (the ledger records it
  as handled) and a new submission replaces the driver record, so a repeated pass sees the new run;
- the deploy refuses while any driver of the stream is alive (lease / process group): never two drivers.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.control import contract
from airflow_streaming.control.storage import StorageError
from airflow_streaming.hooks.streaming_job import StreamingJobHook
from airflow_streaming.lifecycle.record import TERMINAL
from airflow_streaming.lifecycle.lock import LifecycleLock, LifecycleLockHeld
from airflow_streaming.redaction import restore_secrets
from airflow_streaming.spec import StreamSpec
from airflow_streaming.supervision.classification import classify
from airflow_streaming.supervision.policy import (
    Action,
    RestartLedger,
    RestartPolicy,
    decide,
    note_healthy,
    record_give_up,
    record_restart,
)

log = logging.getLogger(__name__)


@dataclass
class PassResult:
    """What one supervision pass saw and did."""

    stream: str
    health: str
    action: str
    reason: str
    events: list[dict[str, Any]] = field(default_factory=list)
    new_run_id: str | None = None


def _paths(hook: StreamingJobHook) -> tuple[str]:
    return (f"{hook.paths.root}/supervisor.json",)


def load_ledger(hook: StreamingJobHook) -> RestartLedger:
    """The stream's restart ledger; :class:`ControlFileError` if unreadable (never silently reset: it
    holds the attempts in the window and the gave-up state)."""
    path = _paths(hook)[0]
    raw = hook.storage.read_bytes(path)
    if raw is None:
        return RestartLedger()
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            raise TypeError(f"expected a JSON object, got {type(doc).__name__}")
        return RestartLedger.from_dict(doc)
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as exc:
        raise contract.ControlFileError(
            f"{path} is unreadable ({exc}); it is the supervisor's restart ledger (attempts, gave-up state): "
            f"repair it, or move it aside (mv {path} {path}.bad) to start a new ledger") from exc


def save_ledger(hook: StreamingJobHook, ledger: RestartLedger) -> None:
    hook.storage.write_atomic(_paths(hook)[0], json.dumps(ledger.to_dict(), indent=1).encode())


def _event(kind: str, hook: StreamingJobHook, doc: Any, now: float, **extra: Any) -> dict[str, Any]:
    err = (doc.last_exception or {}) if doc is not None else {}
    message = str(err.get("message") or "")
    return {
        "kind": kind, "stream": hook.spec.name, "version": hook.spec.version,
        "run_id": doc.run_id if doc is not None else None, "app_id": doc.app_id if doc is not None else None,
        "driver_id": str(doc.pid) if doc is not None else None,
        "last_committed_batch": doc.last_batch_id() if doc is not None else None,
        "error_first_line": message.splitlines()[0][:300] if message else None,
        "error_class": err.get("error_class"), "links": {"spark_ui": doc.spark_ui} if doc is not None and doc.spark_ui else {},
        "at": now, **extra,
    }


def supervise(hook: StreamingJobHook, policy: RestartPolicy, notify: Callable[[dict[str, Any]], None],
              now: float | None = None, max_wait_s: float = 0.0, owner: str | None = None) -> PassResult:
    """One pass for one stream. ``notify`` receives event dicts (see ``airflow_streaming.notifications``)."""
    try:
        lock = LifecycleLock.acquire(hook.storage, hook.paths.root, "supervise",
                                     owner=owner or f"supervisor pid {os.getpid()}")
    except LifecycleLockHeld as exc:
        return PassResult(hook.spec.name, "-", "SKIPPED", f"another lifecycle action is under way: {exc}")
    with lock:
        return _supervise_locked(hook, policy, notify, now, max_wait_s, lock)


def _supervise_locked(hook: StreamingJobHook, policy: RestartPolicy, notify: Callable[[dict[str, Any]], None],
                      now: float | None, max_wait_s: float, lock: LifecycleLock) -> PassResult:
    now = time.time() if now is None else now
    name = hook.spec.name
    try:
        record = hook.driver_record()
    except (contract.ControlFileError, StorageError) as exc:
        # Unknown is not failed: never act on it alone.
        return PassResult(name, "UNKNOWN", "NOTHING", f"the driver record cannot be read: {exc}")
    if record is None:
        return PassResult(name, "-", "NOTHING", "never deployed")
    ledger = load_ledger(hook)
    unfinished = hook.lifecycle_record()
    if unfinished is not None and unfinished.get("step") not in {s.value for s in TERMINAL}:
        why = (f"an unfinished {unfinished.get('action')} {unfinished.get('id')} is at step {unfinished.get('step')}: "
               f"its task died; run that {unfinished.get('action')} again to finish it")
        result = PassResult(name, "-", "SKIPPED", why)
        _notify(result, notify, _event("UNHEALTHY", hook, None, now, health_reasons=[why]))
        return result
    verdict = hook.health(now=now)
    state = verdict.state.value
    try:
        doc = hook.status()
        doc = doc if doc is not None and doc.run_id == record.run_id else None
    except (contract.ControlFileError, StorageError):
        doc = None
    result = PassResult(name, state, "NOTHING", verdict.summary())

    def emit(kind: str, **extra: Any) -> None:
        _notify(result, notify, _event(kind, hook, doc, now, **extra))

    if state in ("HEALTHY", "IDLE"):
        was_recovering = bool(ledger.failures) and ledger.healthy_since is None
        note_healthy(ledger, policy, now)
        if was_recovering:
            emit("RECOVERED")
            result.action = "RECOVERED"
        save_ledger(hook, ledger)
        return result
    if state in ("FALLING_BEHIND",) or (state == "STALLED" and not policy.restart_on_stalled):
        emit("UNHEALTHY", health_reasons=[r.message for r in verdict.reasons])
        result.action = "NOTIFIED"
        return result
    if state not in ("FAILED", "STALLED"):
        return result  # STOPPED on purpose, UNKNOWN, starting

    ledger.healthy_since = None
    if record.run_id in ledger.handled_run_ids or ledger.gave_up:
        result.reason = "failure already handled" if not ledger.gave_up else "gave up earlier"
        return result
    error = (doc.last_exception or {}) if doc is not None else {}
    exit_code = (doc.exit or {}).get("code") if doc is not None else None
    classification = classify(error.get("error_class"), error.get("message"), exit_code, ledger.error_classes)
    failed_at = min(now, doc.heartbeat_at) if doc is not None else now
    decision = decide(policy, ledger, classification, record.run_id, failed_at, now)
    if decision.action == Action.WAIT and decision.wait_s is not None and decision.wait_s <= max_wait_s:
        time.sleep(decision.wait_s)
        now = time.time()
        decision = decide(policy, ledger, classification, record.run_id, failed_at, now)
    result.reason = decision.reason
    if decision.action == Action.GIVE_UP:
        record_give_up(ledger, record.run_id, error.get("error_class"))
        save_ledger(hook, ledger)
        emit("GAVE_UP", health_reasons=[decision.reason, classification.reason])
        result.action = "GAVE_UP"
        return result
    if decision.action == Action.WAIT:
        # Repeated on every pass while backing off; the notification gate sends it once.
        emit("FAILED", attempt=decision.attempt, max_attempts=decision.max_attempts,
             next_attempt_in_s=decision.wait_s)
        result.action = "WAITING"
        return result
    if decision.action != Action.RESTART:
        return result
    # Make sure nothing of the failed driver is left (a STALLED restart kills it), then recover it
    # through the lifecycle (same lock, a record and a history entry like every other change).
    if hook.running_driver():
        hook.kill(record)
    emit("RESTARTING", attempt=decision.attempt, max_attempts=decision.max_attempts, next_attempt_in_s=0)
    # Restart what is deployed (an upgrade may have moved the stream past the spec this pass was given).
    deployed = (hook.deployed() or {}).get("spec")
    spec = StreamSpec.from_dict(restore_secrets(deployed, hook.spec)) if deployed else hook.spec
    from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner
    from airflow_streaming.lifecycle.record import Action as LifecycleAction

    runner = LifecycleRunner(spec, LifecycleAction.RECOVER, LifecycleOptions(owner=lock.holder.get("owner")),
                             lock=lock)
    recovery = runner.run()
    record_restart(ledger, record.run_id, failed_at, error.get("error_class"))
    save_ledger(hook, ledger)
    if recovery.step.value != "SUCCEEDED":
        result.action = "RESTART_FAILED"
        result.reason = recovery.error or "the recovery did not submit a driver"
        return result
    result.action = "RESTARTED"
    result.new_run_id = recovery.new_run_id
    return result


def _notify(result: PassResult, notify: Callable[[dict[str, Any]], None], event: dict[str, Any]) -> None:
    result.events.append(event)
    try:
        notify(event)
    except Exception:  # noqa: BLE001 - a notifier never stops supervision
        log.exception("notification %s for %s failed", event.get("kind"), result.stream)
