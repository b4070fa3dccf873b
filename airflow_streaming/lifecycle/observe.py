"""Read one :class:`~airflow_streaming.reconcile.observation.Observation` of a stream (the I/O half of
the reconcile core): every control file once, the driver's liveness with its proof, the health rules.

:func:`observe` never raises because a file is unreadable or garbage: that is a value of the
observation (``UNREADABLE`` / ``GARBAGE`` / ``UNKNOWN``), which :func:`~airflow_streaming.reconcile.decision.decide`
never acts on. The restart ledger is the exception: the supervisor reads it itself and refuses an
unreadable one (it holds the attempts and the gave-up state).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

from airflow_streaming.control import contract, takeover
from airflow_streaming.control.contract import ControlFileError, StatusDocument
from airflow_streaming.control.storage import StorageError
from airflow_streaming.control.lifecycle_lock import LOCK_NAME, is_stale, parse_holder
from airflow_streaming.lifecycle.record import SUPERVISOR_ACTIONS, TERMINAL, Action, Step
from airflow_streaming.reconcile.decision import Decision, decide
from airflow_streaming.reconcile.observation import (
    ActionState,
    Budget,
    Desired,
    Failure,
    Health,
    Lease,
    Liveness,
    Observation,
    RecordState,
    RunStatus,
    Standby,
)
from airflow_streaming.supervision.classification import FailureKind, classify
from airflow_streaming.supervision.policy import BudgetAction
from airflow_streaming.supervision.policy import RestartLedger, RestartPolicy, restart_budget

_TERMINAL_STEPS = frozenset(s.value for s in TERMINAL)

#: How long after the recorded run's lease went stale its hot standby counts as taking over. A standby
#: still preparing when the run crashed takes over once prepared (a JVM start, a session: well under a
#: minute here); past this window the run is judged like any other crash (restarted from the checkpoint).
TAKEOVER_WINDOW_S = 90.0
#: A hot standby that failed while preparing is not prepared again before this many seconds: a standby
#: that cannot start (no memory for a second driver, a broken environment) would otherwise cost a JVM
#: start on every pass.
STANDBY_RETRY_S = 600.0


@dataclass(frozen=True)
class Observed:
    """An observation and what it was read from (for events and reasons)."""

    observation: Observation
    record: contract.DriverRecord | None
    doc: StatusDocument | None
    """The status document of the recorded run (``None`` if none, another run's, or unreadable)."""
    verdict: Any
    """The health verdict (``airflow_streaming.health.verdict.HealthVerdict``)."""
    failed_at: float
    error_class: str | None
    budget_reason: str = ""
    """The restart policy's count, e.g. ``backing off 20s before attempt 2``."""
    attempt: int | None = None
    max_attempts: int | None = None
    backoff_s: float | None = None

    def decide(self, policy: RestartPolicy) -> Decision:
        return decide(self.observation, policy)


def observe(hook: Any, policy: RestartPolicy | None = None, ledger: RestartLedger | None = None,
            now: float | None = None, holding_lock: bool = False, wait_within_s: float = 0.0) -> Observed:
    """One observation of ``hook``'s stream. ``holding_lock``: the caller holds the stream's lifecycle
    lock, so an unfinished action is abandoned (nobody else can be running it). ``wait_within_s``: a backoff
    no longer than this is ``BACKOFF_SHORT`` (the caller may wait it out)."""
    now = time.time() if now is None else now
    policy = policy or RestartPolicy()
    ledger = ledger or RestartLedger()
    notes: list[str] = []

    desired, action, step, wanted = _desired_and_action(hook, holding_lock, notes, now)
    try:
        record = hook.driver_record()
        record_state = RecordState.ABSENT if record is None else RecordState.PRESENT
    except (ControlFileError, StorageError) as exc:
        record, record_state = None, RecordState.UNREADABLE
        notes.append(f"driver record: {exc}")

    doc: StatusDocument | None = None
    status = RunStatus.NONE
    try:
        doc = hook.status()
    except StorageError as exc:
        status = RunStatus.UNREADABLE
        notes.append(f"status: {exc}")
    except ControlFileError as exc:
        status = RunStatus.GARBAGE
        notes.append(f"status: {exc}")
    if doc is not None and (record is None or doc.run_id != record.run_id):
        doc = None  # a status of an earlier run says nothing about the recorded one
    if doc is not None:
        status = _run_status(doc)

    liveness, lease = Liveness.UNKNOWN, Lease.FREE_OR_OURS
    held: contract.Lease | None = None
    if record is not None:
        liveness, lease, why, held = _liveness(hook, record)
        notes.append(why)
    standby = _standby(hook, record, held, now, notes) if wanted else Standby.NOT_WANTED
    verdict = hook.health(now=now)
    health = {"HEALTHY": Health.OK, "IDLE": Health.OK, "FALLING_BEHIND": Health.FALLING_BEHIND,
              "STALLED": Health.STALLED}.get(verdict.state.value, Health.WAITING)
    start_overdue = (record is not None and status != RunStatus.RUNNING
                     and now - record.submitted_at > hook.spec.startup_timeout)

    error = (doc.last_exception or {}) if doc is not None else {}
    exit_code = (doc.exit or {}).get("code") if doc is not None else None
    kind = classify(error.get("error_class"), error.get("message"), exit_code, ledger.error_classes)
    failure = {FailureKind.DETERMINISTIC: Failure.DETERMINISTIC,
               FailureKind.NOT_A_FAILURE: Failure.NOT_A_FAILURE}.get(kind.kind, Failure.TRANSIENT)
    if failure != Failure.TRANSIENT:
        notes.append(kind.reason)
    # When it failed, as a fixed time (the backoff counts from it): its last heartbeat, or - gone
    # before its first status - its submission.
    failed_at = min(now, doc.heartbeat_at if doc is not None else record.submitted_at if record is not None else now)
    budget = restart_budget(policy, ledger, failed_at, now)
    observation = Observation(
        desired=desired, action=action, record=record_state, liveness=liveness, status=status, health=health,
        start_overdue=start_overdue, failure=failure,
        budget=_budget(budget, wait_within_s),
        gave_up=ledger.gave_up, recovering=bool(ledger.failures) and ledger.healthy_since is None, lease=lease,
        standby=standby, run_id=record.run_id if record is not None else None, step=step,
        detail="; ".join(n for n in notes if n))
    return Observed(observation, record, doc, verdict, failed_at, error.get("error_class"), budget.reason,
                    budget.attempt, budget.max_attempts,
                    budget.wait_s if budget.action == BudgetAction.WAIT else None)


def _budget(budget: Any, wait_within_s: float) -> Budget:
    if budget.action == BudgetAction.WAIT:
        short = budget.wait_s is not None and budget.wait_s <= wait_within_s
        return Budget.BACKOFF_SHORT if short else Budget.BACKOFF
    return Budget.EXHAUSTED if budget.action == BudgetAction.GIVE_UP else Budget.AVAILABLE


def _run_status(doc: StatusDocument) -> RunStatus:
    if doc.state == contract.FAILED or (doc.exit and doc.exit.get("code") not in (0, None)):
        return RunStatus.FAILED
    if doc.state == contract.RUNNING:
        return RunStatus.RUNNING if doc.ready else RunStatus.STARTING
    if doc.state == contract.STOPPED and doc.exit and doc.exit.get("finished"):
        return RunStatus.FINISHED
    return {contract.STARTING: RunStatus.STARTING, contract.STOPPING: RunStatus.STOPPING,
            contract.STOPPED: RunStatus.STOPPED}.get(doc.state, RunStatus.GARBAGE)


def _liveness(hook: Any, record: contract.DriverRecord) -> tuple[Liveness, Lease, str, contract.Lease | None]:
    """The recorded run's liveness with its proof, whether another run holds the lease, and the lease."""
    lease_state = Lease.FREE_OR_OURS
    try:
        lease = contract.read_lease(hook.storage, hook.paths)
    except StorageError as exc:
        return Liveness.UNKNOWN, lease_state, f"the lease cannot be read: {exc}", None
    except ControlFileError:
        lease = None  # garbage: no driver can renew it
    if lease is not None and lease.run_id != record.run_id and not lease.is_stale():
        if hook._lease_holder_exited(lease) is None:
            lease_state = Lease.OTHER_RUN
    state, detail = hook.driver_liveness()
    return state, lease_state, detail, lease


def _standby(hook: Any, record: contract.DriverRecord | None, lease: contract.Lease | None, now: float,
             notes: list[str]) -> Standby:
    """The hot standby of a stream that wants one (see :class:`~.observation.Standby`)."""
    try:
        state = hook.hot_standby_state()
    except (ControlFileError, StorageError) as exc:
        notes.append(f"hot standby: {exc}")
        return Standby.READY  # cannot tell: neither prepare a second one nor count on it
    if state is None:
        return Standby.MISSING
    if state.get("state") == takeover.TOOK_OVER:
        return Standby.TOOK_OVER if record is not None and state.get("run_id") == record.run_id else Standby.MISSING
    if not state.get("alive"):
        at = state.get("at")
        if state.get("state") == "FAILED" and isinstance(at, (int, float)) and now - at < STANDBY_RETRY_S:
            notes.append(f"hot standby run {state.get('run_id')} failed while preparing: prepared again "
                         f"{STANDBY_RETRY_S - (now - at):.0f}s from now")
            return Standby.READY  # neither prepared again now nor counted on
        return Standby.MISSING
    if record is not None and lease is not None and lease.run_id == record.run_id:
        # The standby takes over once this lease is stale: at once on its host (its holder is gone), after
        # its ttl elsewhere. (Read only where the recorded run is proven gone.)
        local = lease.host == socket.gethostname()
        stale_since = lease.renewed_at if local else lease.renewed_at + lease.ttl
        if now <= stale_since + TAKEOVER_WINDOW_S and (not local or lease.is_stale(now)):
            notes.append(f"hot standby run {state.get('run_id')} takes over from run {record.run_id}")
            return Standby.TAKING_OVER
    return Standby.READY


def _desired_and_action(hook: Any, holding_lock: bool, notes: list[str],
                        now: float) -> tuple[Desired, ActionState, str | None, bool]:
    """What the user wants, the action's state and step, and whether the deployed spec wants a hot standby."""
    try:
        deployed = hook.deployed()
    except (ControlFileError, StorageError) as exc:
        deployed = {"unreadable": str(exc)}
        notes.append(f"deployed spec: {exc}")
    spec = deployed.get("spec") if isinstance(deployed, dict) else None
    wanted = isinstance(spec, dict) and spec.get("hot_standby") is True
    desired, action, step = _desired(hook, holding_lock, notes, now, deployed)
    return desired, action, step, wanted


def _desired(hook: Any, holding_lock: bool, notes: list[str], now: float,
             deployed: Any) -> tuple[Desired, ActionState, str | None]:
    try:
        last = hook.lifecycle_record()
    except (ControlFileError, StorageError) as exc:
        notes.append(f"lifecycle record: {exc}")
        return (Desired.RUNNING if deployed else Desired.NEVER_DEPLOYED), ActionState.ABANDONED_OTHER, \
            "an unreadable lifecycle.json"
    desired = Desired.NEVER_DEPLOYED if not deployed else Desired.RUNNING
    if last is not None and last.get("action") == Action.STOP.value and last.get("step") != Step.REFUSED.value:
        desired = Desired.STOPPED
    if last is None or last.get("step") in _TERMINAL_STEPS:
        return desired, ActionState.NONE, None
    step = f"{last.get('action')} {last.get('id')} at {last.get('step')}"
    if not holding_lock and not _lock_free(hook, now):
        return desired, ActionState.UNDER_WAY, step
    if last.get("action") in {a.value for a in SUPERVISOR_ACTIONS}:  # the supervisor resumes its own action
        return desired, ActionState.ABANDONED_RECOVER, step
    return desired, ActionState.ABANDONED_OTHER, step


def _lock_free(hook: Any, now: float) -> bool:
    try:
        raw = hook.storage.read_bytes(f"{hook.paths.root}/{LOCK_NAME}")
    except StorageError:
        return False  # cannot tell: someone may hold it
    return raw is None or is_stale(parse_holder(raw), now)


def next_step(hook: Any, policy: RestartPolicy | None = None) -> dict[str, Any]:
    """What the supervisor's next pass would do with the stream, for people (the Streams page,
    ``describe``): ``{"act", "reason", "event"}``, and ``"standby"`` (the hot standby as the reconcile
    core sees it: ``MISSING``, ``READY``, ``TAKING_OVER``, ``TOOK_OVER``) when the deployed spec wants
    one. Reads the ledger itself; never raises."""
    from airflow_streaming.lifecycle.ledger_file import load_ledger

    try:
        ledger = load_ledger(hook)
    except (ControlFileError, StorageError) as exc:
        return {"act": "REPORT", "reason": str(exc), "event": None}
    try:
        observed = observe(hook, policy, ledger)
        decision = observed.decide(policy or RestartPolicy())
    except (ControlFileError, StorageError) as exc:
        return {"act": "OBSERVE", "reason": f"cannot observe the stream: {exc}", "event": None}
    step: dict[str, Any] = {"act": decision.act.value, "reason": decision.reason, "event": decision.event}
    if observed.observation.standby != Standby.NOT_WANTED:
        step["standby"] = observed.observation.standby.value
    return step


__all__ = ["Observed", "next_step", "observe"]
