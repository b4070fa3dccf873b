"""One typed, immutable snapshot of a stream, read once per pass (pure: no I/O, no Airflow).

Each field is one *dimension* of what a pass can observe, with a small closed set of values, so that
:func:`airflow_streaming.reconcile.decision.decide` can be checked over the whole product of them
(``tests/unit/test_reconcile_exhaustive.py``). The values say what is *known*, with its proof:
``Liveness.GONE`` means proven gone (the pid does not exist on this host, the cluster manager reports
the driver exited, the lease was released or went stale), never "I could not see it".
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum


class Desired(str, Enum):
    """What the user asked for last."""

    RUNNING = "RUNNING"
    """Deployed (``deployed.json``) and not stopped since."""
    STOPPED = "STOPPED"
    """The last lifecycle action is a stop (done or under way): never restart it."""
    NEVER_DEPLOYED = "NEVER_DEPLOYED"


class ActionState(str, Enum):
    """The stream's lifecycle action (``lifecycle.json``) and its lock."""

    NONE = "NONE"
    """No action, or the last one reached a terminal step."""
    UNDER_WAY = "UNDER_WAY"
    """An unfinished action whose lock is held by a live holder (a task, or a trigger it deferred to)."""
    ABANDONED_RECOVER = "ABANDONED_RECOVER"
    """A supervisor's recovery died before its end (the lock is free): the supervisor resumes it."""
    ABANDONED_OTHER = "ABANDONED_OTHER"
    """Another action (deploy, stop, upgrade...) died before its end: only a person may finish it."""


class RecordState(str, Enum):
    """The driver record (``driver.json``) of the last submission."""

    PRESENT = "PRESENT"
    ABSENT = "ABSENT"
    UNREADABLE = "UNREADABLE"
    """Storage error or garbage: which run, and where it runs, is unknown."""


class Liveness(str, Enum):
    """Whether the recorded run's driver runs, with its proof (also a deploy target's answer:
    :class:`airflow_streaming.targets.base.DriverState`)."""

    ALIVE = "ALIVE"
    GONE = "GONE"
    """Proven gone: no process of the run on its own host, the cluster manager reports it exited, or
    its lease is released or stale."""
    UNKNOWN = "UNKNOWN"
    """Cannot be told (another host's pid, an unreachable cluster manager, unreadable storage): never "gone"."""


class RunStatus(str, Enum):
    """The status document, as far as it belongs to the recorded run."""

    NONE = "NONE"
    """No status document of this run (not written yet, or one of an earlier run)."""
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    """The driver stopped gracefully: a stop request removed its run marker."""
    FINISHED = "FINISHED"
    """The job ended by itself (exit ``finished``: an ``availableNow``/``once`` trigger, or a script that
    stopped its own queries): a finished run, not a failure."""
    FAILED = "FAILED"
    """The driver reported a failure (query exception, non-zero exit)."""
    GARBAGE = "GARBAGE"
    """Readable, but not a status document (a driver killed while writing, a hand edit)."""
    UNREADABLE = "UNREADABLE"
    """The storage did not answer."""


class Health(str, Enum):
    """The health rules' verdict on a RUNNING status (``airflow_streaming.health.verdict``)."""

    OK = "OK"
    """HEALTHY or IDLE."""
    FALLING_BEHIND = "FALLING_BEHIND"
    STALLED = "STALLED"
    WAITING = "WAITING"
    """Not judged yet (no progress yet, stopping) or UNKNOWN."""


class Failure(str, Enum):
    """How the recorded run's failure classifies (``airflow_streaming.supervision.classification``)."""

    TRANSIENT = "TRANSIENT"
    DETERMINISTIC = "DETERMINISTIC"
    NOT_A_FAILURE = "NOT_A_FAILURE"
    """Exit code 5: another driver holds the stream's lease."""


class Budget(str, Enum):
    """The restart policy's answer for one more restart now (attempts in the window, backoff)."""

    AVAILABLE = "AVAILABLE"
    BACKOFF = "BACKOFF"
    BACKOFF_SHORT = "BACKOFF_SHORT"
    """Backing off, for no longer than the observer may wait (the supervisor pass's ``max_wait_s``)."""
    EXHAUSTED = "EXHAUSTED"


class Lease(str, Enum):
    """The checkpoint's lease (``lease.json``), seen against the recorded run."""

    FREE_OR_OURS = "FREE_OR_OURS"
    """Absent, released, stale, or held by the recorded run."""
    OTHER_RUN = "OTHER_RUN"
    """Fresh and held by a run that is not the recorded one: another driver may be on the checkpoint."""


class Standby(str, Enum):
    """The stream's hot standby (``StreamSpec.hot_standby``, ``airflow_streaming.control.takeover``)."""

    NOT_WANTED = "NOT_WANTED"
    """The deployed spec has no hot standby."""
    MISSING = "MISSING"
    """Wanted, but none is alive (never prepared, exited, failed, or it took over and was acknowledged)."""
    READY = "READY"
    """Alive (preparing or standing by), and no takeover is due; or it failed while preparing a short
    while ago (``STANDBY_RETRY_S``): not prepared again yet, and not counted on."""
    TAKING_OVER = "TAKING_OVER"
    """Alive, and the recorded run left a lease that is stale (or goes stale within its ttl): the standby
    takes over; counts as a takeover only within ``TAKEOVER_WINDOW_S`` of that, then as READY."""
    TOOK_OVER = "TOOK_OVER"
    """The recorded run is the hot standby that took over; the supervisor has not acknowledged it yet."""


@dataclass(frozen=True)
class Observation:
    """Everything one pass knows about one stream (see the module docstring).

    ``run_id``, ``step`` and ``detail`` are not dimensions: they only make reasons readable."""

    desired: Desired
    action: ActionState
    record: RecordState
    liveness: Liveness
    status: RunStatus
    health: Health = Health.WAITING
    start_overdue: bool = False
    """No RUNNING status although the run was submitted longer ago than the spec's ``startup_timeout``."""
    failure: Failure = Failure.TRANSIENT
    budget: Budget = Budget.AVAILABLE
    gave_up: bool = False
    """The supervisor gave up on this stream earlier (the ledger says so)."""
    recovering: bool = False
    """The ledger holds failures and no healthy observation since: a healthy one is a RECOVERED event."""
    lease: Lease = Lease.FREE_OR_OURS
    standby: Standby = Standby.NOT_WANTED
    run_id: str | None = None
    step: str | None = None
    """The unfinished action and its step, e.g. ``upgrade at STOPPED``."""
    detail: str = ""
    """Why liveness / status are what they are, in words (pids, cluster states, reader errors)."""


#: The dimensions of an observation and their values, in field order (what the exhaustive test spans).
DIMENSIONS: dict[str, tuple[object, ...]] = {
    "desired": tuple(Desired),
    "action": tuple(ActionState),
    "record": tuple(RecordState),
    "liveness": tuple(Liveness),
    "status": tuple(RunStatus),
    "health": tuple(Health),
    "start_overdue": (False, True),
    "failure": tuple(Failure),
    "budget": tuple(Budget),
    "gave_up": (False, True),
    "recovering": (False, True),
    "lease": tuple(Lease),
    "standby": tuple(Standby),
}

assert list(DIMENSIONS) == [f.name for f in fields(Observation)][: len(DIMENSIONS)]
