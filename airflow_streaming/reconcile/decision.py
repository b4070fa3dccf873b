"""What to do next with a stream: one pure function over an :class:`~.observation.Observation`.

Every place that used to decide for itself asks :func:`decide`: the supervisor's pass and the Streams
page's "next supervisor pass"; the lifecycle runner's waits for a run (probation, a parallel stream's
catch-up, a rollback's restart of the old version) end early only on :func:`is_down`. The callers only
carry a decision out. The rules, in order (the first that applies
wins; ``docs/reconcile.md`` lists the resulting table):

1. an action under way owns the stream: observe;
2. an abandoned recovery is resumed; any other abandoned action is reported (a person finishes it);
3. never deployed: nothing; a driver record that cannot be read, or a liveness that cannot be told:
   observe - *unknown never kills, restarts or stops*;
4. stopped by the user (a stop action, or a graceful stop of the run): nothing, or a report if a
   driver still runs;
5. wanted running and alive: judge the status and health (a start that never reports, a stall, a
   driver that reported its failure);
6. wanted running and proven gone: a run that finished by itself (an ``availableNow``/``once`` trigger)
   is left finished, or started again (``RERUN``, not a failure) when the restart policy's
   ``restart_finished`` asks for it; otherwise restart, within the restart policy; where the policy forbids it
   (attempts exhausted, a deterministic failure, gave up earlier, another run holds the lease, a
   stop made outside the lifecycle), a notification that says why; a short backoff is waited out
   (``WAIT``), a longer one observed. *Never a silent NOTHING* - but
   for a crash that the stream's hot standby is taking over (bounded: ``TAKEOVER_WINDOW_S``).

A stream with a hot standby (``StreamSpec.hot_standby``): a takeover by the standby is recorded and
notified first (``RECORD_FAILOVER``); a healthy stream without a live standby gets one
(``PREPARE_STANDBY``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

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


class Act(str, Enum):
    """What the caller does."""

    NOTHING = "NOTHING"
    """The stream is as wanted."""
    OBSERVE = "OBSERVE"
    """Look again later (starting, stopping, backing off, an action under way, unknown)."""
    RESTART = "RESTART"
    """Start a new run from the checkpoint through a RECOVER action (kill the recorded driver first
    when :attr:`Decision.kill_first`)."""
    RERUN = "RERUN"
    """Start a run that finished by itself again from its checkpoint (``restart_finished``): a RECOVER
    action that is not a failure - no restart attempt is counted and no failure is notified."""
    RESUME = "RESUME"
    """Resume the abandoned recovery from its recorded step (it never submits a run twice)."""
    GIVE_UP = "GIVE_UP"
    """Record in the ledger that the supervisor gave up, and notify."""
    WAIT = "WAIT"
    """A short backoff before the next restart: wait it out (``Observed.backoff_s``), then observe and decide
    again, once (the supervisor's pass)."""
    REPORT = "REPORT"
    """Change nothing; notify a person (the event says why)."""
    PREPARE_STANDBY = "PREPARE_STANDBY"
    """Start the stream's hot standby: a prepared driver of the deployed version that takes over when the
    active one crashes (``airflow_streaming.control.takeover``). It touches neither the checkpoint, the
    lease nor the run marker until then."""
    RECORD_FAILOVER = "RECORD_FAILOVER"
    """The hot standby took over: record it in the history, notify, and free the standby's place (a new
    standby is prepared once the stream is healthy)."""


#: Acts that start or end a driver: only ever on proof (never on UNKNOWN), never on a stopped stream.
CHANGES = frozenset({Act.RESTART, Act.RESUME, Act.RERUN})


@dataclass(frozen=True)
class Decision:
    """One decision: what to do, why, and which event (a notification kind) goes out."""

    act: Act
    reason: str
    event: str | None = None
    """``FAILED`` / ``RESTARTING`` / ``RECOVERED`` / ``GAVE_UP`` / ``UNHEALTHY`` (see
    ``airflow_streaming.notifications.events.EventKind``), ``None`` for none."""
    kill_first: bool = False
    """RESTART only: the recorded driver is alive (it reported a failure, or stalled) and is killed
    through its target before the new run is submitted."""


class Policy(Protocol):
    """The part of the restart policy the decision reads (``RestartPolicy`` has it)."""

    restart_on_stalled: bool
    restart_finished: bool


def decide(o: Observation, policy: Policy) -> Decision:
    """What to do now with the stream ``o`` describes (pure; see the module docstring)."""
    run = f"run {o.run_id}" if o.run_id else "the recorded run"
    why = f": {o.detail}" if o.detail else ""
    # 1-2. The lifecycle action in progress owns the stream.
    if o.action == ActionState.UNDER_WAY:
        return Decision(Act.OBSERVE, f"an action is under way ({o.step or 'unfinished'}); it decides")
    if o.action == ActionState.ABANDONED_RECOVER:
        if o.desired != Desired.RUNNING:
            return Decision(Act.REPORT, f"an abandoned recovery ({o.step}) of a stream that is not wanted running: "
                                        "not resumed; move lifecycle.json aside, or deploy", "UNHEALTHY")
        if _unknown(o):
            return Decision(Act.OBSERVE, f"the supervisor's recovery died at {o.step or 'a step'}, and whether a "
                                         f"driver runs cannot be told{why}: resumed once it can", "UNHEALTHY")
        return Decision(Act.RESUME, f"the supervisor's recovery died at {o.step or 'a step'}: resuming it", "RESTARTING")
    if o.action == ActionState.ABANDONED_OTHER:
        return Decision(Act.REPORT, f"an unfinished {o.step or 'action'}: its task died; run that action again "
                                    "to finish it (or to roll it back)", "UNHEALTHY")
    # 3. Nothing to act on, or nothing known enough to act on.
    if o.desired == Desired.NEVER_DEPLOYED:
        return Decision(Act.NOTHING, "never deployed")
    if o.record == RecordState.UNREADABLE:
        return Decision(Act.REPORT, f"the driver record cannot be read{why}; nothing is changed until it can",
                        "UNHEALTHY")
    if o.record == RecordState.ABSENT:
        if o.desired == Desired.RUNNING:
            return Decision(Act.REPORT, "deployed, but no driver record: no run to judge; deploy it again",
                            "UNHEALTHY")
        return Decision(Act.NOTHING, "stopped; no driver record")
    if o.standby == Standby.TOOK_OVER and o.desired == Desired.RUNNING:
        return Decision(Act.RECORD_FAILOVER, f"{run} is the hot standby that took over from a crashed driver: "
                                             "recorded; a new standby is prepared once it is healthy", "FAILED_OVER")
    if o.liveness == Liveness.UNKNOWN:
        return Decision(Act.OBSERVE, f"cannot tell whether {run} runs{why}: unknown is never acted on")
    # 4. Stopped by the user: never restarted.
    if o.desired == Desired.STOPPED:
        if o.liveness == Liveness.ALIVE and o.status not in (RunStatus.STOPPING, RunStatus.STOPPED,
                                                             RunStatus.FINISHED):
            return Decision(Act.REPORT, f"stopped by the user, but {run} still runs{why}: stop it again",
                            "UNHEALTHY")
        return Decision(Act.NOTHING, "stopped by the user")
    if o.lease == Lease.OTHER_RUN:
        return Decision(Act.REPORT, f"another run than {run} holds the checkpoint's lease: not starting or "
                                    "killing anything on it until a person looks", "UNHEALTHY")
    # 5. Wanted running, and the driver is alive.
    if o.liveness == Liveness.ALIVE:
        return _alive(o, policy, run)
    # 6. Wanted running, and proven gone.
    if o.status == RunStatus.STOPPED:  # a stop request removed the run marker
        return Decision(Act.NOTHING, f"{run} stopped gracefully (a stop request removed its run marker); deploy "
                                     "it to start it again")
    if o.status == RunStatus.FINISHED:
        if policy.restart_finished and o.standby == Standby.TAKING_OVER:
            return Decision(Act.OBSERVE, f"{run} finished by itself and its hot standby is taking over: not rerun "
                                         "beside it (two drivers on one checkpoint); looking again")
        if policy.restart_finished:
            return Decision(Act.RERUN, f"{run} finished by itself (an availableNow/once trigger) and the restart "
                                       "policy's restart_finished is on: starting it again from its checkpoint")
        return Decision(Act.NOTHING, f"{run} finished by itself (an availableNow/once trigger): a finished run, "
                                     "not a failure; restart_policy.restart_finished starts it again, or deploy it")
    if o.status == RunStatus.UNREADABLE:
        return Decision(Act.OBSERVE, f"{run} is gone, but its status cannot be read{why}; looking again before "
                                     "acting", "UNHEALTHY")
    if o.standby == Standby.TAKING_OVER:
        return Decision(Act.OBSERVE, f"{run} crashed{why}; its hot standby is taking over (restarted from the "
                                     "checkpoint if it has not within its takeover window)")
    gone = {RunStatus.NONE: f"{run} is gone before it reported any status (killed while starting?){why}",
            RunStatus.STARTING: f"{run} is gone while starting{why}",
            RunStatus.GARBAGE: f"{run} is gone and left a status document that is not one{why}",
            RunStatus.FAILED: f"{run} failed{why}"}.get(o.status, f"{run} is gone without a graceful stop{why}")
    return _failed(o, gone, kill_first=False)


def _alive(o: Observation, policy: Policy, run: str) -> Decision:
    if o.status == RunStatus.FAILED:
        return _failed(o, f"{run} reported a failure and is still exiting", kill_first=True)
    if o.status in (RunStatus.STOPPING, RunStatus.STOPPED, RunStatus.FINISHED):
        return Decision(Act.OBSERVE, f"{run} is stopping")
    if o.status == RunStatus.UNREADABLE:
        return Decision(Act.OBSERVE, f"{run} runs; its status cannot be read now")
    if o.status != RunStatus.RUNNING:  # NONE, STARTING, GARBAGE: no judged progress yet
        if not o.start_overdue:
            return Decision(Act.OBSERVE, f"{run} is starting")
        if policy.restart_on_stalled:
            return _failed(o, f"{run} runs but reported no progress within its startup timeout", kill_first=True)
        return Decision(Act.REPORT, f"{run} runs but reported no progress within its startup timeout "
                                    "(restart_on_stalled is off)", "UNHEALTHY")
    if o.health == Health.OK:
        if o.standby == Standby.MISSING:
            return Decision(Act.PREPARE_STANDBY, f"{run} is healthy{' again' if o.recovering else ''}; preparing "
                                                 "its hot standby", "RECOVERED" if o.recovering else None)
        if o.recovering:
            return Decision(Act.NOTHING, f"{run} is healthy again", "RECOVERED")
        return Decision(Act.NOTHING, f"{run} is healthy")
    if o.health == Health.FALLING_BEHIND:
        return Decision(Act.REPORT, f"{run} is falling behind", "UNHEALTHY")
    if o.health == Health.STALLED:
        if policy.restart_on_stalled:
            return _failed(o, f"{run} is stalled", kill_first=True)
        return Decision(Act.REPORT, f"{run} is stalled (restart_on_stalled is off)", "UNHEALTHY")
    return Decision(Act.OBSERVE, f"{run} runs; not judged yet")


def _failed(o: Observation, what: str, kill_first: bool) -> Decision:
    """The restart policy's answer for a failed (or to-be-killed) run."""
    if o.gave_up:  # the GAVE_UP notification went out when the ledger recorded it
        return Decision(Act.NOTHING, f"{what}; the supervisor gave up on this stream earlier (notified then): "
                                     "deploy or restart it to start over")
    if o.failure == Failure.NOT_A_FAILURE:
        return Decision(Act.REPORT, f"{what}; it found another driver holding the checkpoint's lease: not "
                                    "starting a second one", "UNHEALTHY")
    if o.failure == Failure.DETERMINISTIC:
        return Decision(Act.GIVE_UP, f"{what}; a deterministic failure, not retried", "GAVE_UP")
    if o.budget == Budget.EXHAUSTED:
        return Decision(Act.GIVE_UP, f"{what}; restart attempts exhausted", "GAVE_UP")
    if o.budget == Budget.BACKOFF:
        return Decision(Act.OBSERVE, f"{what}; backing off before the next restart", "FAILED")
    if o.budget == Budget.BACKOFF_SHORT:
        return Decision(Act.WAIT, f"{what}; backing off briefly before the next restart: waited out, then looked "
                                  "at again", "FAILED")
    return Decision(Act.RESTART, f"{what}; restarting from the checkpoint", "RESTARTING", kill_first=kill_first)


def _unknown(o: Observation) -> bool:
    return (o.record == RecordState.UNREADABLE or o.liveness == Liveness.UNKNOWN
            or o.status == RunStatus.UNREADABLE)


def is_down(o: Observation) -> bool:
    """Whether the recorded run is proven not running and not stopped on purpose: a wait for it
    (startup, probation, a rollback's restart) can end now instead of at its deadline."""
    return (o.record == RecordState.PRESENT and o.liveness == Liveness.GONE
            and o.status not in (RunStatus.STOPPED, RunStatus.FINISHED, RunStatus.UNREADABLE))
