"""One supervision pass over a stream: notice a failed or vanished driver and act on the restart policy.

Design: a scheduled DAG (``dags/stream_supervisor.py``, every minute, one run at a time) calls
:func:`supervise` for each stream. Chosen over a long-lived deferrable watcher because each pass is
short, stateless in the worker and resumable: all state (the restart ledger) lives in the stream's
control directory, so a retried or duplicated task continues where the last pass left off.

Safety:
- the stream's lifecycle lock (:mod:`airflow_streaming.control.lifecycle_lock`, shared with upgrades,
  restarts and rollbacks) makes concurrent passes - and a pass during an upgrade - take turns: a pass
  that finds it held skips the stream;
- what to do is decided by :func:`airflow_streaming.reconcile.decision.decide` over one
  :func:`~airflow_streaming.lifecycle.observe.observe` of the stream; this module only carries it out,
  and every change it makes is a lifecycle action run under the pass's lock (a ``recover`` - killing a
  failed or stalled driver first when the decision says so -, a ``standby``, a ``failover``), with its
  record and history entry: the pass itself starts, stops, kills and writes no stream file;
- a failed run is restarted once (the ledger records it as handled) and a new submission replaces the
  driver record, so a repeated pass sees the new run;
- the deploy refuses while any driver of the stream is alive (lease / process group): never two drivers.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.control.lifecycle_lock import LifecycleLock, LifecycleLockHeld
from airflow_streaming.exceptions import SealError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle.ledger_file import load_ledger, save_ledger
from airflow_streaming.lifecycle.observe import Observed, observe
from airflow_streaming.lifecycle.record import Action, LifecycleRecord, Step
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner
from airflow_streaming.lifecycle.trust import trusted_spec
from airflow_streaming.reconcile.decision import Act, Decision
from airflow_streaming.reconcile.observation import Health, Observation
from airflow_streaming.redaction import restore_secrets
from airflow_streaming.spec import StreamSpec
from airflow_streaming.supervision.policy import RestartPolicy, note_healthy, record_give_up, record_restart

log = logging.getLogger(__name__)

__all__ = ["PassResult", "load_ledger", "save_ledger", "supervise"]


@dataclass
class PassResult:
    """What one supervision pass saw and did.

    ``action``: NOTHING, NOTIFIED, WAITING (backing off), RECOVERED, RESTARTED, RESTART_FAILED, GAVE_UP,
    FAILED_OVER (the hot standby took over: recorded), STANDBY_PREPARED, STANDBY_FAILED, RERUN (a run that
    finished by itself started again: ``restart_finished``), RERUN_FAILED,
    SKIPPED (another lifecycle action holds the stream's lock) or REFUSED (a stored spec or record is not
    sealed for this stream as runnable: nothing was done; a FAILED event names the :class:`SealError`)."""

    stream: str
    health: str
    action: str
    reason: str
    events: list[dict[str, Any]] = field(default_factory=list)
    new_run_id: str | None = None
    decision: Decision | None = None
    observation: Observation | None = None
    """What the pass observed (``None`` when it skipped the stream)."""


def _event(kind: str, hook: SparkStreamHook, seen: Observed | None, now: float, **extra: Any) -> dict[str, Any]:
    doc = seen.doc if seen is not None else None
    err = (doc.last_exception or {}) if doc is not None else {}
    message = str(err.get("message") or "")
    run_id = doc.run_id if doc is not None else (seen.observation.run_id if seen is not None else None)
    return {
        "kind": kind, "stream": hook.spec.name, "version": hook.spec.version,
        "run_id": run_id, "app_id": doc.app_id if doc is not None else None,
        "driver_id": str(doc.pid) if doc is not None else None,
        "last_committed_batch": doc.last_batch_id() if doc is not None else None,
        "error_first_line": message.splitlines()[0][:300] if message else None,
        "error_class": err.get("error_class"), "links": {"spark_ui": doc.spark_ui} if doc is not None and doc.spark_ui else {},
        "at": now, **extra,
    }


def supervise(hook: SparkStreamHook, policy: RestartPolicy, notify: Callable[[dict[str, Any]], None],
              now: float | None = None, max_wait_s: float = 0.0, owner: str | None = None) -> PassResult:
    """One pass for one stream. ``notify`` receives event dicts (see ``airflow_streaming.notifications``)."""
    try:
        lock = LifecycleLock.acquire(hook.storage, hook.paths.root, "supervise",
                                     owner=owner or f"supervisor pid {os.getpid()}")
    except LifecycleLockHeld as exc:
        return PassResult(hook.spec.name, "-", "SKIPPED", f"another lifecycle action is under way: {exc}")
    with lock:
        try:
            return _supervise_locked(hook, policy, notify, now, max_wait_s, lock)
        except SealError as exc:  # the runner refused a stored record (say, a candidate recorded past its gate)
            return _refuse(PassResult(hook.spec.name, "-", "REFUSED", str(exc)), notify, hook, None,
                           time.time() if now is None else now, exc)


def _refuse(result: PassResult, notify: Callable[[dict[str, Any]], None], hook: SparkStreamHook,
            seen: Observed | None, now: float, exc: SealError) -> PassResult:
    """Report a stored spec or record the pass will not act on (:class:`SealError`): nothing was run."""
    message = str(exc)
    log.error("supervise %s: nothing done: %s", hook.spec.name, message)
    _notify(result, notify, _event("FAILED", hook, seen, now, error_class=type(exc).__name__,
                                   error_first_line=message.splitlines()[0][:300], health_reasons=[message]))
    result.action, result.reason = "REFUSED", message
    return result


def _supervise_locked(hook: SparkStreamHook, policy: RestartPolicy, notify: Callable[[dict[str, Any]], None],
                      now: float | None, max_wait_s: float, lock: LifecycleLock) -> PassResult:
    now = time.time() if now is None else now
    ledger = load_ledger(hook)
    seen = observe(hook, policy, ledger, now, holding_lock=True, wait_within_s=max_wait_s)
    decision = seen.decide(policy)
    if decision.act == Act.WAIT:  # a short backoff: waited out in this pass, then one more look
        time.sleep(seen.backoff_s or 0.0)
        now = time.time()
        seen = observe(hook, policy, ledger, now, holding_lock=True)
        decision = seen.decide(policy)
    o = seen.observation
    result = PassResult(hook.spec.name, seen.verdict.state.value, "NOTHING", decision.reason, decision=decision,
                        observation=o)
    log.info("supervise %s: %s (%s)", hook.spec.name, decision.act.value, decision.reason)

    def emit(kind: str, **extra: Any) -> None:
        _notify(result, notify, _event(kind, hook, seen, now, **extra))

    reasons = [decision.reason] + [r.message for r in seen.verdict.reasons if r.message not in decision.reason]
    if decision.event in ("FAILED", "GAVE_UP", "RESTARTING") and seen.budget_reason:
        reasons.insert(1, seen.budget_reason)
        result.reason = f"{decision.reason} ({seen.budget_reason})"
    if o.health == Health.OK and o.liveness.value == "ALIVE":
        before = ledger.to_dict()
        note_healthy(ledger, policy, now)
        if ledger.to_dict() != before:  # a healthy stream's pass writes nothing (1,000 streams: 1,000 fsyncs saved)
            save_ledger(hook, ledger)
    deployed: StreamSpec = hook.spec
    if decision.act in (Act.RECORD_FAILOVER, Act.PREPARE_STANDBY, Act.RESTART, Act.RESUME, Act.RERUN):
        try:  # what runs is the deployed spec, only if sealed for this stream as deployable (or this pass's own)
            deployed = _deployed_spec(hook)
        except SealError as exc:
            return _refuse(result, notify, hook, seen, now, exc)
    if decision.act == Act.RECORD_FAILOVER:
        failover = _act(deployed, lock, Action.FAILOVER)
        if failover.step != Step.SUCCEEDED:
            result.action, result.reason = "NOTHING", failover.error or "the takeover could not be recorded"
            return result
        emit("FAILED_OVER", health_reasons=reasons)
        result.action, result.new_run_id = "FAILED_OVER", failover.new_run_id
        return result
    if decision.act == Act.PREPARE_STANDBY:
        if decision.event == "RECOVERED":
            emit("RECOVERED")
        standby = _act(deployed, lock, Action.STANDBY)
        if standby.step != Step.SUCCEEDED:  # the running stream is untouched; the next pass tries again
            log.error("could not prepare the hot standby of %s: %s", hook.spec.name, standby.error)
            result.action, result.reason = "STANDBY_FAILED", f"the hot standby could not be prepared: {standby.error}"
            return result
        result.action, result.new_run_id = "STANDBY_PREPARED", standby.new_run_id
        return result
    if decision.act == Act.NOTHING:
        if decision.event == "RECOVERED":
            emit("RECOVERED")
            result.action = "RECOVERED"
        return result
    if decision.act in (Act.OBSERVE, Act.REPORT):
        if decision.event == "FAILED":
            # Repeated on every pass while backing off; the notification gate sends it once.
            emit("FAILED", attempt=seen.attempt, max_attempts=seen.max_attempts, next_attempt_in_s=seen.backoff_s,
                 health_reasons=reasons)
            result.action = "WAITING"
        elif decision.event is not None:
            emit(decision.event, health_reasons=reasons)
            result.action = "NOTIFIED"
        return result
    if decision.act == Act.RERUN:  # not a failure: no attempt counted, no failure notified
        rerun = _act(deployed, lock, Action.RECOVER)
        if rerun.step != Step.SUCCEEDED:
            result.action, result.reason = "RERUN_FAILED", rerun.error or "the rerun did not submit a driver"
            return result
        result.action, result.new_run_id = "RERUN", rerun.new_run_id
        return result
    ledger.healthy_since = None
    run_id = o.run_id or ""
    if decision.act == Act.GIVE_UP:
        record_give_up(ledger, run_id, seen.error_class)
        save_ledger(hook, ledger)
        emit("GAVE_UP", health_reasons=reasons)
        result.action = "GAVE_UP"
        return result
    # RESTART or RESUME: through the lifecycle (same lock, a record and a history entry like every
    # other change). A RECOVER action never submits a run twice, so a resumed one is safe; the kill of a
    # failed or stalled driver that is still alive is its first, recorded step.
    emit("RESTARTING", attempt=seen.attempt, max_attempts=seen.max_attempts, next_attempt_in_s=0,
         health_reasons=reasons)
    if decision.act == Act.RESUME:
        recovery = _resume(hook, deployed, lock)
    else:
        recovery = _act(deployed, lock, Action.RECOVER, kill_run_id=run_id if decision.kill_first else None)
    if decision.act == Act.RESTART:
        record_restart(ledger, run_id, seen.failed_at, seen.error_class)
        save_ledger(hook, ledger)
    if recovery.step.value != "SUCCEEDED":
        result.action = "RESTART_FAILED"
        result.reason = recovery.error or "the recovery did not submit a driver"
        return result
    result.action = "RESTARTED"
    result.new_run_id = recovery.new_run_id
    return result


def _deployed_spec(hook: SparkStreamHook) -> StreamSpec:
    """What is deployed (an upgrade may have moved the stream past the spec this pass was given).
    :class:`SealError` when ``deployed.json``'s spec is neither this pass's own nor sealed by this deployment
    for this stream and control directory as deployable (a copied, forged, candidate or legacy-sealed spec)."""
    deployed = (hook.deployed() or {}).get("spec")
    if deployed:  # a file a driver can write: used only when sealed by this deployment or the caller's own spec
        deployed = trusted_spec(deployed, hook.deployed_path, hook.spec, home=hook.spec)
    return StreamSpec.from_dict(restore_secrets(deployed, hook.spec)) if deployed else hook.spec


def _act(deployed: StreamSpec, lock: LifecycleLock, action: Action, kill_run_id: str | None = None
         ) -> LifecycleRecord:
    """Run one of the supervisor's actions (recover, standby, failover) on what is deployed
    (:func:`_deployed_spec`), under the pass's lock: a lifecycle action with its record and history entry,
    like every other change to a stream."""
    runner = LifecycleRunner(deployed, action,
                             LifecycleOptions(owner=lock.holder.get("owner"), kill_run_id=kill_run_id), lock=lock)
    return runner.run()


def _resume(hook: SparkStreamHook, deployed: StreamSpec, lock: LifecycleLock) -> LifecycleRecord:
    """Resume the supervisor's own action that a pass left unfinished (it died mid-way), from its recorded step."""
    last = hook.lifecycle_record() or {}
    action = Action(last.get("action")) if last.get("action") in {a.value for a in Action} else Action.RECOVER
    return _act(deployed, lock, action)


def _notify(result: PassResult, notify: Callable[[dict[str, Any]], None], event: dict[str, Any]) -> None:
    result.events.append(event)
    try:
        notify(event)
    except Exception:  # noqa: BLE001 - a notifier never stops supervision
        log.exception("notification %s for %s failed", event.get("kind"), result.stream)


