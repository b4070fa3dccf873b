"""The reconcile decision over EVERY observable state of a stream: the whole product of the
observation's dimensions, with the invariants of the issue "Reconcile core" asserted on each one."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_streaming.reconcile.decision import CHANGES, Act, decide
from airflow_streaming.reconcile.observation import (
    DIMENSIONS,
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
from airflow_streaming.reconcile.table import render

REPO = Path(__file__).resolve().parents[2]

# The invariants read ~40 enum members per state, over 8.3 M states. On Python 3.11 a member read through its
# class (``Desired.RUNNING``) goes through ``EnumType.__getattr__``, ~10x a plain attribute: two thirds of
# ``_violations``' time. This module reads the very same member objects through plain namespaces instead.
Act, ActionState, Budget, Desired, Failure, Health, Lease, Liveness, RecordState, RunStatus, Standby = (
    SimpleNamespace(**enum.__members__) for enum in (Act, ActionState, Budget, Desired, Failure, Health, Lease,
                                                     Liveness, RecordState, RunStatus, Standby))


@dataclass(frozen=True)
class Policy:
    restart_on_stalled: bool
    restart_finished: bool = False


#: The policies a state is checked under, built once (not per observation: ~8 M of them).
_POLICIES = {finished: tuple(Policy(s, f) for s in (False, True) for f in ((False, True) if finished else (False,)))
             for finished in (False, True)}


def policies_for(o: Observation) -> tuple[Policy, ...]:
    """Both values of ``restart_on_stalled``; ``restart_finished`` both ways where the run finished by itself
    (the one status it is read for: ``test_restart_finished_is_read_only_for_a_finished_run`` checks that on
    a sample of the others, which keeps this product at ~8.3 M states instead of ~15 M)."""
    return _POLICIES[o.status == RunStatus.FINISHED]


def _observation(values: tuple[object, ...]) -> Observation:
    # DIMENSIONS are the observation's first fields, in order (asserted in observation.py): positional is
    # the cheap construction (no dict per state).
    return Observation(*values, run_id="r1", step="upgrade u1 at STOPPED", detail="d")


def every_observation():
    for values in itertools.product(*DIMENSIONS.values()):
        yield _observation(values)


def every_97th_observation():
    """The samples of the tests below: the same states as every 97th of :func:`every_observation`, but only
    those are built (building all 3.7 M observations to keep 1 in 97 cost ~25 s a test)."""
    for values in itertools.islice(itertools.product(*DIMENSIONS.values()), 0, None, 97):
        yield _observation(values)


def _violations(o: Observation, policy: Policy) -> list[str]:
    d = decide(o, policy)
    bad = []
    unknown = (o.liveness == Liveness.UNKNOWN or o.record == RecordState.UNREADABLE
               or o.status == RunStatus.UNREADABLE)
    if not d.reason:
        bad.append("a decision without a reason")
    # No silent outage: wanted running, provably not running, no unfinished action.
    # (A run that stopped gracefully was stopped: only a stop request removes its run marker.)
    # (A crash the hot standby is taking over is the one exception, bounded by the takeover window: the
    # observation says TAKING_OVER only within it.)
    if (o.desired == Desired.RUNNING and o.action == ActionState.NONE and o.record == RecordState.PRESENT
            and o.liveness == Liveness.GONE and o.status not in (RunStatus.STOPPED, RunStatus.FINISHED)
            and o.standby != Standby.TAKING_OVER):
        if d.act != Act.RESTART and d.event is None and not o.gave_up:
            bad.append("down and wanted running, but neither restarted nor notified")
        if d.act == Act.NOTHING and not o.gave_up:
            bad.append("a silent NOTHING for a stream that is down")
    # Unknown never kills, restarts or stops (and never gives up on what it cannot see).
    if unknown and (d.act in CHANGES or d.act == Act.GIVE_UP or d.kill_first):
        bad.append(f"acted ({d.act.value}) on an unknown state")
    # Never two drivers on one checkpoint.
    if d.act == Act.RESTART:
        if o.lease == Lease.OTHER_RUN:
            bad.append("a restart while another run holds the lease")
        if o.liveness == Liveness.ALIVE and not d.kill_first:
            bad.append("a restart beside a live driver without killing it first")
        if o.liveness != Liveness.ALIVE and d.kill_first:
            bad.append("a kill of a driver that is not alive")
    if d.kill_first and d.act != Act.RESTART:
        bad.append("kill_first without a restart")
    # Never a restart of a stream the user stopped (or never deployed).
    if o.desired != Desired.RUNNING and d.act in CHANGES:
        bad.append(f"{d.act.value} of a stream that is {o.desired.value}")
    # An unfinished action is resumed or reported, never silently abandoned.
    if o.action in (ActionState.ABANDONED_RECOVER, ActionState.ABANDONED_OTHER):
        if d.act != Act.RESUME and d.event is None:
            bad.append("an abandoned action neither resumed nor reported")
        if o.action == ActionState.ABANDONED_OTHER and d.act in CHANGES:
            bad.append("another action's abandoned record acted on by the supervisor")
    # An action under way owns the stream.
    if o.action == ActionState.UNDER_WAY and d.act != Act.OBSERVE:
        bad.append("acted while another lifecycle action is under way")
    # The policy forbids: deterministic failures, exhausted attempts, an earlier give-up, a backoff.
    if d.act == Act.RESTART and (o.failure != Failure.TRANSIENT or o.budget != Budget.AVAILABLE or o.gave_up):
        bad.append("a restart the restart policy forbids")
    if d.act == Act.WAIT and not (o.budget == Budget.BACKOFF_SHORT and d.event == "FAILED"):
        bad.append("a wait that is not a short backoff of a notified failure")
    if d.act == Act.GIVE_UP and d.event != "GAVE_UP":
        bad.append("a give-up without its notification")
    if d.act == Act.RESTART and d.event != "RESTARTING":
        bad.append("a restart without its notification")
    # A stall is only restarted when the policy says so.
    if (d.act == Act.RESTART and o.liveness == Liveness.ALIVE and o.status != RunStatus.FAILED
            and not policy.restart_on_stalled):
        bad.append("a live, not failed driver killed although restart_on_stalled is off")
    # A healthy stream is left alone (but for preparing its missing hot standby, and recording a takeover).
    healthy = (o.desired == Desired.RUNNING and o.action == ActionState.NONE and o.record == RecordState.PRESENT
               and o.liveness == Liveness.ALIVE and o.status == RunStatus.RUNNING and o.health == Health.OK
               and o.lease == Lease.FREE_OR_OURS)
    if healthy and o.standby in (Standby.NOT_WANTED, Standby.READY, Standby.TAKING_OVER) and d.act != Act.NOTHING:
        bad.append("a healthy stream acted on")
    if healthy and o.standby == Standby.MISSING and d.act != Act.PREPARE_STANDBY:
        bad.append("a healthy stream that wants a hot standby and has none did not get one")
    # The hot standby: prepared only beside a healthy run, never twice; a takeover recorded once, first.
    if d.act == Act.PREPARE_STANDBY and not (healthy and o.standby == Standby.MISSING):
        bad.append("a hot standby prepared beside a stream that is not healthy, or that has one")
    if d.act == Act.RECORD_FAILOVER and not (o.standby == Standby.TOOK_OVER and o.desired == Desired.RUNNING
                                             and o.action == ActionState.NONE and o.record == RecordState.PRESENT):
        bad.append("a takeover recorded that the observation does not show")
    if d.act == Act.RECORD_FAILOVER and d.event != "FAILED_OVER":
        bad.append("a takeover recorded without its notification")
    if (o.standby == Standby.TOOK_OVER and o.desired == Desired.RUNNING and o.action == ActionState.NONE
            and o.record == RecordState.PRESENT and d.act != Act.RECORD_FAILOVER):
        bad.append("a takeover left unrecorded")
    if o.standby == Standby.NOT_WANTED and d.act in (Act.PREPARE_STANDBY, Act.RECORD_FAILOVER):
        bad.append("a hot standby act for a stream that has none")
    # A run that finished by itself is started again only when the policy asks, only then, and only alone.
    if d.act == Act.RERUN and not (policy.restart_finished and o.status == RunStatus.FINISHED
                                   and o.liveness == Liveness.GONE and o.desired == Desired.RUNNING
                                   and o.action == ActionState.NONE and o.lease == Lease.FREE_OR_OURS
                                   and o.standby != Standby.TAKING_OVER):
        bad.append("a rerun the observation or the policy does not allow")
    if d.act == Act.RERUN and (d.event is not None or d.kill_first):
        bad.append("a rerun counted as a failure (an event or a kill)")
    if (o.status == RunStatus.FINISHED and o.liveness == Liveness.GONE and o.desired == Desired.RUNNING
            and o.action == ActionState.NONE and o.record == RecordState.PRESENT and o.lease == Lease.FREE_OR_OURS
            and o.standby not in (Standby.TOOK_OVER, Standby.TAKING_OVER)):
        if policy.restart_finished and d.act != Act.RERUN:
            bad.append("a finished run not started again although restart_finished is on")
        if not policy.restart_finished and d.act != Act.NOTHING:
            bad.append("a finished run acted on although restart_finished is off")
    # A takeover under way is not pre-empted by a restart: two starts on one checkpoint.
    if o.standby == Standby.TAKING_OVER and o.liveness == Liveness.GONE and d.act in (Act.RESTART, Act.RERUN):
        bad.append("a restart while the hot standby takes over")
    return bad


def test_every_observable_state_meets_the_invariants():
    count = 0
    failures: dict[str, tuple[Observation, bool]] = {}
    for o in every_observation():
        for policy in policies_for(o):
            count += 1
            for problem in _violations(o, policy):
                failures.setdefault(problem, (o, policy))
    print(f"\nreconcile: {count} observable states (observation x policy) checked against the invariants")
    expected = 2
    for values in DIMENSIONS.values():
        expected *= len(values)
    expected += expected // len(DIMENSIONS["status"])  # restart_finished on, for the finished run's share
    assert count == expected > 1_000_000
    assert not failures, "\n".join(f"{p}: {o} ({s})" for p, (o, s) in failures.items())


def test_restart_finished_is_read_only_for_a_finished_run():
    """Outside a run that finished by itself, ``restart_finished`` changes no decision (a sample of every
    97th state; the exhaustive test above spans it only where the status is FINISHED)."""
    for o in every_97th_observation():
        if o.status == RunStatus.FINISHED:
            continue
        for stalled in (False, True):
            a, b = decide(o, Policy(stalled, False)), decide(o, Policy(stalled, True))
            assert a == b, (o, a, b)


def test_a_finished_run_is_left_finished_unless_asked():
    o = Observation(Desired.RUNNING, ActionState.NONE, RecordState.PRESENT, Liveness.GONE, RunStatus.FINISHED)
    left, rerun = decide(o, Policy(False, False)), decide(o, Policy(False, True))
    assert left.act == Act.NOTHING and "finished by itself" in left.reason and left.event is None
    assert rerun.act == Act.RERUN and rerun.event is None and not rerun.kill_first
    stopped = Observation(Desired.RUNNING, ActionState.NONE, RecordState.PRESENT, Liveness.GONE, RunStatus.STOPPED)
    assert decide(stopped, Policy(False, True)).act == Act.NOTHING  # a graceful stop is never rerun
    taking_over = Observation(Desired.RUNNING, ActionState.NONE, RecordState.PRESENT, Liveness.GONE,
                              RunStatus.FINISHED, standby=Standby.TAKING_OVER)
    assert decide(taking_over, Policy(False, True)).act == Act.OBSERVE  # never a rerun beside a takeover


def test_the_decision_is_a_function_of_the_dimensions_only():
    """Same dimensions, other run id / step / detail: the same act and event (pure, no hidden input)."""
    for o in every_97th_observation():
        other = Observation(**{k: getattr(o, k) for k in DIMENSIONS}, run_id="r2", step=None, detail="")
        for policy in policies_for(o):
            a, b = decide(o, policy), decide(other, policy)
            assert (a.act, a.event, a.kill_first) == (b.act, b.event, b.kill_first), (o, a, b)


def test_a_driver_killed_while_starting_is_restarted_not_left_unknown():
    """The outage this core was built for: submitted, killed ~2 s later, no status document yet."""
    o = Observation(Desired.RUNNING, ActionState.NONE, RecordState.PRESENT, Liveness.GONE, RunStatus.NONE)
    d = decide(o, Policy(False))
    assert d.act == Act.RESTART and d.event == "RESTARTING" and "before it reported any status" in d.reason


@pytest.mark.parametrize("budget,failure,act,event", [
    (Budget.AVAILABLE, Failure.TRANSIENT, Act.RESTART, "RESTARTING"),
    (Budget.BACKOFF, Failure.TRANSIENT, Act.OBSERVE, "FAILED"),
    (Budget.BACKOFF_SHORT, Failure.TRANSIENT, Act.WAIT, "FAILED"),
    (Budget.EXHAUSTED, Failure.TRANSIENT, Act.GIVE_UP, "GAVE_UP"),
    (Budget.AVAILABLE, Failure.DETERMINISTIC, Act.GIVE_UP, "GAVE_UP"),
    (Budget.AVAILABLE, Failure.NOT_A_FAILURE, Act.REPORT, "UNHEALTHY"),
])
def test_the_restart_policy_rows(budget, failure, act, event):
    o = Observation(Desired.RUNNING, ActionState.NONE, RecordState.PRESENT, Liveness.GONE, RunStatus.FAILED,
                    failure=failure, budget=budget)
    d = decide(o, Policy(False))
    assert (d.act, d.event) == (act, event), d


def test_the_decision_table_in_docs_is_the_one_decide_gives():
    """docs/reconcile.md is generated from decide(): regenerate it with
    `python -m airflow_streaming.reconcile.table > docs/reconcile.md` when the rules change."""
    assert (REPO / "docs" / "reconcile.md").read_text() == render()
