"""The resumable record of one lifecycle action and the stream's deployment history (pure logic).

A lifecycle action (upgrade, restart, rollback to the previous version, parallel transition) is a
sequence of steps. The runner saves the record in the stream's control directory *before* each
step's side effect, so a task that dies anywhere can be run again and continue from the recorded
step (see :data:`TRANSITIONS`). Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from airflow_streaming.models import Model, parse
from airflow_streaming.spark_runtime import describe


class Action(str, Enum):
    DEPLOY = "deploy"
    """Start a stream that is not running (its first deploy, or after a stop) and wait until it runs."""
    STOP = "stop"
    """Stop at a micro-batch boundary (kill after the stop timeout)."""
    UPGRADE = "upgrade"
    RESTART = "restart"
    ROLLBACK = "rollback"
    PARALLEL = "parallel"
    RECOVER = "recover"
    """The supervisor's restart of a failed or vanished driver from its checkpoint (killing the recorded
    driver first when the reconcile core says so)."""
    STANDBY = "standby"
    """The supervisor's preparation of the stream's hot standby (a prepared driver beside the running one)."""
    FAILOVER = "failover"
    """The supervisor's record of a takeover by the hot standby (done by the drivers themselves): the
    history entry, and the standby's place freed."""


#: The supervisor's own actions: an abandoned one is resumed by its next pass.
SUPERVISOR_ACTIONS = frozenset({Action.RECOVER, Action.STANDBY, Action.FAILOVER})


#: Actions that replace a running version on its checkpoint (gate, stop, snapshot, start, probation).
IN_PLACE_CHANGES = frozenset({Action.UPGRADE, Action.RESTART, Action.ROLLBACK})


class Step(str, Enum):
    PLANNED = "PLANNED"
    """Record created: from/to specs chosen, lock held, nothing touched."""
    CHECKED = "CHECKED"
    """The compatibility gate passed; the old version still runs."""
    PREPARING = "PREPARING"
    """Warm start: the new version's driver is being prepared beside the running one (standby)."""
    STOPPING = "STOPPING"
    """A graceful stop was requested (repeatable: stop is idempotent)."""
    STOPPED = "STOPPED"
    """No driver runs; the checkpoint is clean at ``stop_batch``."""
    SNAPSHOTTED = "SNAPSHOTTED"
    """The checkpoint (and file sink log) at ``stop_batch`` is saved under ``snapshot``."""
    STARTING = "STARTING"
    """``new_run_id`` is chosen; its submission may or may not have happened."""
    PROBATION = "PROBATION"
    """The new version runs; it must become HEALTHY with enough batches within the window."""
    CATCHING_UP = "CATCHING_UP"
    """Parallel transition: the new stream runs beside the old one until it has caught up."""
    RETIRING = "RETIRING"
    """Parallel transition: the new stream caught up; the old one is being stopped."""
    ROLLING_BACK = "ROLLING_BACK"
    """The new version failed: stop it, restore the snapshot."""
    RESTORED = "RESTORED"
    """No new-version driver runs and the checkpoint equals the snapshot."""
    RESTARTING_OLD = "RESTARTING_OLD"
    """``old_run_id`` is chosen; the old version is being (re)started and verified."""
    SUCCEEDED = "SUCCEEDED"
    REFUSED = "REFUSED"
    """The gate refused the change; the running stream was never touched."""
    ROLLED_BACK = "ROLLED_BACK"
    FAILED = "FAILED"
    """The action could not complete and there was nothing to roll back to (see ``error``)."""
    ROLLBACK_FAILED = "ROLLBACK_FAILED"
    """The old version did not come back either: a human must look (the snapshot is kept)."""


TERMINAL = frozenset({Step.SUCCEEDED, Step.REFUSED, Step.ROLLED_BACK, Step.FAILED, Step.ROLLBACK_FAILED})

#: Which step may follow which. The runner refuses anything else (a corrupted or hand-edited record).
TRANSITIONS: dict[Step, frozenset[Step]] = {
    Step.PLANNED: frozenset({Step.CHECKED, Step.REFUSED, Step.FAILED, Step.STARTING, Step.STOPPING, Step.PREPARING,
                             Step.SUCCEEDED}),
    Step.CHECKED: frozenset({Step.PREPARING, Step.STOPPING, Step.STARTING, Step.FAILED}),
    Step.PREPARING: frozenset({Step.STOPPING, Step.ROLLED_BACK, Step.FAILED, Step.CHECKED, Step.REFUSED}),
    Step.STOPPING: frozenset({Step.STOPPED, Step.ROLLING_BACK, Step.FAILED}),
    Step.STOPPED: frozenset({Step.SNAPSHOTTED, Step.STARTING, Step.ROLLING_BACK, Step.SUCCEEDED}),
    Step.SNAPSHOTTED: frozenset({Step.STARTING, Step.ROLLING_BACK}),
    Step.STARTING: frozenset({Step.PROBATION, Step.CATCHING_UP, Step.ROLLING_BACK, Step.FAILED, Step.SUCCEEDED}),
    Step.PROBATION: frozenset({Step.SUCCEEDED, Step.ROLLING_BACK, Step.FAILED}),
    Step.CATCHING_UP: frozenset({Step.RETIRING, Step.ROLLING_BACK}),
    Step.RETIRING: frozenset({Step.SUCCEEDED, Step.FAILED}),
    Step.ROLLING_BACK: frozenset({Step.RESTORED, Step.ROLLED_BACK, Step.FAILED, Step.ROLLBACK_FAILED}),
    Step.RESTORED: frozenset({Step.RESTARTING_OLD, Step.ROLLBACK_FAILED}),
    Step.RESTARTING_OLD: frozenset({Step.ROLLED_BACK, Step.ROLLBACK_FAILED}),
}


class TransitionError(RuntimeError):
    """A step that may not follow the recorded one."""


@dataclass(frozen=True)
class Probation:
    """What the new version must show before an upgrade counts as done."""

    min_batches: int = 2
    window_s: float = 300.0

    def __post_init__(self) -> None:
        if isinstance(self.min_batches, bool) or not isinstance(self.min_batches, int) or self.min_batches < 1:
            raise ValueError(f"probation min_batches must be a positive integer, got {self.min_batches!r}")
        if isinstance(self.window_s, bool) or not isinstance(self.window_s, (int, float)) or not self.window_s > 0:
            raise ValueError(f"probation window must be positive, got {self.window_s!r}")


def probation_outcome(*, state: str | None, health: str, batches: int, started_at: float, now: float,
                      probation: Probation) -> tuple[bool | None, str]:
    """``(True, why)`` passed, ``(False, why)`` failed, ``(None, why)`` keep waiting.

    Passed: HEALTHY with at least ``min_batches`` completed batches of the new run. Failed: the new
    driver ended or failed, or the window elapsed first.
    """
    if state in ("FAILED", "STOPPED") or health == "FAILED":
        return False, f"the new version's driver ended ({state or health}) during probation"
    if health == "HEALTHY" and batches >= probation.min_batches:
        return True, f"HEALTHY after {batches} completed batch(es)"
    if now - started_at > probation.window_s:
        return False, (f"probation window of {probation.window_s:.0f}s elapsed: health {health}, "
                       f"{batches}/{probation.min_batches} completed batch(es)")
    return None, f"health {health}, {batches}/{probation.min_batches} completed batch(es)"


def _probation(value: Any) -> Any:
    """A record's ``probation`` (the dataclass checks its own values: ``ValueError`` naming the field)."""
    if value is None or isinstance(value, Probation):
        return value or Probation()
    if not isinstance(value, dict):
        raise ValueError(f"must be an object with min_batches and window_s, got {type(value).__name__}")
    return Probation(**{f.name: value[f.name] for f in dataclasses.fields(Probation) if f.name in value})


class LifecycleRecord(Model):
    """Everything needed to continue or roll back an action after the task running it died (``lifecycle.json``).

    :meth:`from_dict` raises ``ValueError`` naming the field(s) if the document is garbage; keys it does not
    know (written by a newer version) are ignored."""

    stream: str
    action: Action = Field(strict=False)  # its string value in JSON
    from_spec: dict[str, Any] | None
    """The deployed spec before the action (``None``: the stream was never deployed)."""
    to_spec: dict[str, Any]
    allow_warnings: bool = False
    probation: Annotated[Probation, BeforeValidator(_probation)] = Field(default_factory=Probation)
    warm_start: bool = False
    """Prepare the new driver (standby) before stopping the old one, to shorten the downtime."""
    gate_in_standby: bool = False
    """Warm start with a gate to run: it runs inside the prepared driver's session (PREPARING -> CHECKED)."""
    id: str = Field(default_factory=lambda: time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6])
    step: Step = Field(Step.PLANNED, strict=False)
    steps: list[dict[str, Any]] = Field(default_factory=list)
    """``[{"step", "at", "detail"}]`` in order, the first being PLANNED."""
    owner: str | None = None
    verdict: str | None = None
    old_run_id: str | None = None
    """The run of the old version that was stopped (or, after a rollback, the one restarted)."""
    stop_batch: int | None = None
    sink_path: str | None = None
    snapshot: dict[str, Any] | None = None
    new_run_id: str | None = None
    rollback_run_id: str | None = None
    """The run of the old version started by a rollback."""
    step_started_at: float | None = None
    stop_requested_at: float | None = None
    """When the stop of this action was requested (the run marker removed)."""
    stopping_run_id: str | None = None
    """The run that was running when the stop was requested (``None``: none was)."""
    gate_token: str | None = None
    """The compatibility check started detached for this action (its report lands in the control dir)."""
    waiting: dict[str, Any] | None = None
    """What the action waits for while its task is deferred (a ``lifecycle.waits.Wait``)."""
    first_new_batch: int | None = None
    error: str | None = None
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)

    def model_post_init(self, context: Any, /) -> None:
        if not self.steps:
            self.steps.append({"step": Step.PLANNED.value, "at": self.created_at, "detail": None})

    @property
    def done(self) -> bool:
        return self.step in TERMINAL

    @property
    def from_version(self) -> str | None:
        return None if self.from_spec is None else self.from_spec.get("version")

    @property
    def to_version(self) -> str:
        return str(self.to_spec.get("version"))

    def advance(self, step: Step, detail: str | None = None, now: float | None = None) -> None:
        """Move to ``step``; :class:`TransitionError` if it may not follow the current one."""
        if step not in TRANSITIONS.get(self.step, frozenset()):
            raise TransitionError(f"{self.action.value} {self.id} of {self.stream}: {step.value} may not follow "
                                  f"{self.step.value}")
        now = time.time() if now is None else now
        self.step = step
        self.step_started_at = now
        self.waiting = None
        self.updated_at = now
        self.steps.append({"step": step.value, "at": now, "detail": detail})

    def abandon(self, reason: str, now: float | None = None) -> None:
        """End this unfinished action FAILED from whatever step it is at: the one move outside
        :data:`TRANSITIONS`, for a stop that supersedes it (an emergency ``stop_all`` may find an upgrade at
        any step, SNAPSHOTTED or RESTORED included). Its history entry says so (``error``)."""
        if self.done:
            raise TransitionError(f"{self.action.value} {self.id} of {self.stream} has ended ({self.step.value})")
        now = time.time() if now is None else now
        self.error = reason
        self.step, self.step_started_at, self.waiting, self.updated_at = Step.FAILED, now, None, now
        self.steps.append({"step": Step.FAILED.value, "at": now, "detail": reason})

    @classmethod
    def from_dict(cls, d: Any) -> LifecycleRecord:
        """Parse a record; ``ValueError`` naming the field(s) if it is garbage (a file must say its step)."""
        missing = [k for k, f in cls.model_fields.items()
                   if (f.is_required() or k in ("step", "steps")) and isinstance(d, dict) and k not in d]
        if missing:
            raise ValueError(f"lacks {', '.join(missing)}")
        return parse(cls, d)

    def _runtimes(self) -> dict[str, Any]:
        """The Spark each side ran on, when either names one (``StreamSpec.spark_runtime``); nothing otherwise,
        so that the history of streams on the installed Spark reads as before."""
        old = None if self.from_spec is None else self.from_spec.get("spark_runtime")
        new = self.to_spec.get("spark_runtime")
        if not old and not new:
            return {}
        return {"from_runtime": None if self.from_spec is None else describe(old), "to_runtime": describe(new)}

    def history_entry(self) -> dict[str, Any]:
        """One line of the stream's deployment history (written once the action is terminal)."""
        ended = self.updated_at
        return {
            "id": self.id, "action": self.action.value, "stream": self.stream,
            "from_version": self.from_version, "to_version": self.to_version,
            **self._runtimes(),
            "outcome": self.step.value, "started_at": self.created_at, "ended_at": ended,
            "owner": self.owner, "verdict": self.verdict,
            "last_batch_before": self.stop_batch, "first_batch_after": self.first_new_batch,
            "old_run_id": self.old_run_id, "new_run_id": self.new_run_id, "rollback_run_id": self.rollback_run_id,
            "snapshot": (self.snapshot or {}).get("snapshot_dir"), "error": self.error,
            "running_version": self.running_version(), "from_spec": self.from_spec,
        }

    def running_version(self) -> str | None:
        """The version the stream runs after this (terminal) action."""
        if self.action in (Action.STANDBY, Action.FAILOVER):
            return self.to_version
        if self.action == Action.STOP:
            return None if self.step == Step.SUCCEEDED else self.from_version
        if self.step == Step.SUCCEEDED:
            return self.to_version
        if self.step in (Step.REFUSED, Step.ROLLED_BACK):
            return self.from_version
        return None


def caught_up(doc: dict[str, Any] | None, min_batches: int) -> tuple[bool, str]:
    """Parallel transition: has the new stream caught up with its input? (the documented criterion)

    The new run completed at least ``min_batches`` batches, and for every query:

    - every source of its last progress that reports a ``latestOffset`` (Kafka, rate...) consumed up
      to it (``endOffset == latestOffset``): nothing known at planning time was left behind;
    - a query with a source that reports none (the file source) shows its backlog drained either by
      its status (``isDataAvailable`` false: the last trigger found nothing new) or, under input that
      keeps arriving (where every trigger finds something new), by keeping up: in each of its last
      ``min_batches`` progress entries with input, it processed rows at least as fast as they arrived
      (``processedRowsPerSecond >= inputRowsPerSecond``).

    ``isDataAvailable`` alone would never turn false for a continuously fed stream, so a parallel
    transition under steady traffic would always time out and roll back.
    """
    if doc is None:
        return False, "no status of the new stream yet"
    batches = int((doc.get("totals") or {}).get("batches", 0))
    if batches < min_batches:
        return False, f"{batches}/{min_batches} completed batch(es)"
    keeping_up = False
    for query in doc.get("queries") or []:
        progress = [p for p in (query.get("recent_progress") or []) if p]
        sources = (progress[-1] if progress else {}).get("sources") or []
        for source in sources:
            latest = source.get("latestOffset")
            if latest is not None and source.get("endOffset") != latest:
                return False, f"source {source.get('description')} at {source.get('endOffset')}, latest {latest}"
        unjudged = not sources or any(source.get("latestOffset") is None for source in sources)
        if not unjudged or not (query.get("status") or {}).get("isDataAvailable"):
            continue
        with_input = [p for p in progress if (p.get("numInputRows") or 0) > 0][-max(1, min_batches):]
        if len(with_input) < max(1, min_batches) or not all(_outpaces_arrival(p) for p in with_input):
            return False, f"query {query.get('name')} still has data available (backlog not drained)"
        keeping_up = True
    how = "keeping up with arriving input" if keeping_up else "backlog drained"
    return True, f"{batches} batch(es) done, {how}"


def _outpaces_arrival(progress: dict[str, Any]) -> bool:
    processed, arrived = progress.get("processedRowsPerSecond"), progress.get("inputRowsPerSecond")
    try:
        return float(processed) >= float(arrived)
    except (TypeError, ValueError):
        return False


_ROOT_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")


def error_summary(error: dict[str, Any] | None) -> str:
    """``[CLASS] first line`` of a driver's ``last_exception``, plus the root cause line (e.g. the Python
    ``ValueError: ...`` at the bottom of a worker traceback) when it is not the first line."""
    if not error or not error.get("message"):
        return ""
    lines = [line for line in str(error["message"]).splitlines() if line.strip()]
    text = f"[{error.get('error_class')}] {lines[0].strip()}"
    roots = [line.strip() for line in lines[1:] if _ROOT_LINE.match(line)]
    if roots and roots[-1] not in text:
        text += f" ... {roots[-1]}"
    return text[:600]


def unfinished_message(stream: str, action: str, action_id: str, to_version: str | None, step: str,
                       attempted: str) -> str:
    """Why ``attempted`` is refused while another action is unfinished, and what to do."""
    return (f"stream {stream!r} has an unfinished {action} {action_id} (to version {to_version}) at step {step}: "
            f"refusing to {attempted} in the middle of it. Run that {action} again to finish it (it continues or "
            "rolls back from that step)")


HISTORY_LIMIT = 500


def append_history(history: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The history with ``entry`` added (replacing an entry with the same id), newest last, bounded."""
    kept = [h for h in history if h.get("id") != entry.get("id")]
    return (kept + [entry])[-HISTORY_LIMIT:]


def previous_spec(history: list[dict[str, Any]], current: str | None) -> dict[str, Any] | None:
    """The spec the stream ran before it moved to version ``current`` (for rollback-to-previous)."""
    for entry in reversed(history):
        if entry.get("outcome") == Step.SUCCEEDED.value and entry.get("to_version") == current \
                and entry.get("from_version") not in (None, current) and entry.get("from_spec"):
            return entry["from_spec"]
    return None
