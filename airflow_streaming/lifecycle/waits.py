"""What a lifecycle action waits for, checked without waiting - so that the wait can run in a trigger.

A lifecycle action spends most of its time waiting: for a deploy's first progress, a driver to exit,
the compatibility gate's report, a new version's probation, a parallel stream to catch up. A runner
in *deferrable* mode (``LifecycleOptions.defer``) does not sleep through these: it saves its record,
raises :class:`WaitNeeded` describing the wait, and the operator defers to
:class:`~airflow_streaming.triggers.lifecycle.SparkStreamLifecycleTrigger`, which calls :func:`wait_over`
from the triggerer until it is true (or the deadline passes), then hands the task back; the runner
resumes from the record and checks the condition itself once more. No worker slot is held meanwhile.

:func:`wait_over` only says "the runner can make progress now"; the decision (passed, failed, timed
out) stays with the runner, so a trigger never changes a stream.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

#: Wait kinds and what ends them.
READY = "ready"          # a run reports its first progress, or it ended
GONE = "gone"            # a driver exited
FILE = "file"            # a file appeared (the gate's report), or the process that writes it ended
STANDBY = "standby"      # a standby driver reported READY / FAILED, or exited
PROBATION = "probation"  # probation decided (passed or failed), see lifecycle.record.probation_outcome
CAUGHT_UP = "caught_up"  # a parallel stream caught up, or ended
HEALTHY = "healthy"      # a run is RUNNING and HEALTHY or IDLE (a rollback's restart of the old version), or ended
KINDS = (READY, GONE, FILE, STANDBY, PROBATION, CAUGHT_UP, HEALTHY)


@dataclass(frozen=True)
class Wait:
    """One wait of one lifecycle action (JSON-safe: it travels in the trigger's kwargs)."""

    kind: str
    spec: dict[str, Any]
    """The spec of the stream whose driver or files are watched."""
    run_id: str | None
    deadline: float
    """Wall-clock time after which the runner must decide anyway (timeout)."""
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Wait:
        return cls(kind=d["kind"], spec=d["spec"], run_id=d.get("run_id"), deadline=float(d["deadline"]),
                   params=dict(d.get("params") or {}))


class WaitNeeded(Exception):  # noqa: N818 - control flow of a deferrable runner, not an error
    """Raised by a runner in deferrable mode instead of blocking: the record is saved, the lock handed
    over (``holders``: control dir -> deferred holder id), ``wait`` says what to watch."""

    def __init__(self, wait: Wait, holders: dict[str, str] | None = None):
        super().__init__(f"waiting for {wait.kind} of {wait.spec.get('name')} run {wait.run_id}")
        self.wait = wait
        self.holders = dict(holders or {})


def wait_over(wait: Wait, now: float | None = None, hook: Any = None) -> bool:
    """Whether the runner can make progress now (blocking file and process I/O: run it in a thread).
    ``hook``: the spec's hook, when the caller keeps one (the trigger reuses it across polls)."""
    from airflow_streaming.hooks.streaming_job import SparkStreamHook
    from airflow_streaming.spec import StreamSpec

    now = time.time() if now is None else now
    if now >= wait.deadline:
        return True
    if hook is None:
        hook = SparkStreamHook(StreamSpec.from_dict(wait.spec))
    if wait.kind == READY:
        record = hook.driver_record()
        return record is None or record.run_id != wait.run_id or hook.readiness(record) != "waiting"
    if wait.kind == GONE:
        from airflow_streaming.targets.base import Liveness

        if wait.params.get("quiesced_is_enough") and wait.run_id and hook.quiesced(wait.run_id):
            return True
        record = hook.driver_record()
        if record is None or record.run_id != wait.run_id:
            return True
        state = hook.target_of(record).state(record)
        # A driver this host cannot observe (another host's client-mode driver) is gone once its control files
        # say it stopped: what the stop's own wait (``wait_gone``) accepts, so the two agree.
        return state.gone or (state.liveness == Liveness.UNKNOWN and hook.stopped_out_of_sight(wait.run_id))
    if wait.kind == FILE:
        path = wait.params["path"]
        if hook.storage.read_bytes(path) is not None:
            try:
                answer = json.loads(hook.storage.read_bytes(path) or b"{}")
            except ValueError:
                return True
            return not wait.params.get("id") or answer.get("id") == wait.params["id"]
        if wait.params.get("gate_driver"):  # a gate driver that ended without answering will not answer
            return recorded_gate_gone(hook, str(wait.params["gate_driver"]))
        token = wait.params.get("process_token")
        return bool(token) and not hook.processes_of_run(token)
    if wait.kind == STANDBY:
        state = (hook.standby_state(wait.run_id or "") or {}).get("state")
        return state in ("READY", "FAILED", "EXPIRED") or not hook.processes_of_run(wait.run_id or "")
    if wait.kind in (PROBATION, CAUGHT_UP, HEALTHY):
        from airflow_streaming.lifecycle.record import Probation, caught_up, probation_outcome

        raw = hook.storage.read_bytes(hook.paths.status)
        parsed = json.loads(raw) if raw else None
        doc = parsed if isinstance(parsed, dict) and parsed.get("run_id") == wait.run_id else None
        if doc is not None and doc.get("state") in ("FAILED", "STOPPED"):
            return True
        if _run_ended(hook, wait.run_id or ""):
            return True
        if wait.kind == CAUGHT_UP:
            return caught_up(doc, int(wait.params.get("min_batches", 1)))[0]
        verdict = hook.health(status=parsed) if raw is None or isinstance(parsed, dict) else hook.health()
        if wait.kind == HEALTHY:
            return (doc or {}).get("state") == "RUNNING" and verdict.state.value in ("HEALTHY", "IDLE")
        batches = int(((doc or {}).get("totals") or {}).get("batches", 0))
        passed, _ = probation_outcome(state=(doc or {}).get("state"), health=verdict.state.value, batches=batches,
                                      started_at=float(wait.params.get("started_at", now)), now=now,
                                      probation=Probation(**wait.params.get("probation", {})))
        return passed is not None
    raise ValueError(f"unknown wait kind {wait.kind!r} (known: {', '.join(KINDS)})")


def _run_ended(hook: Any, run_id: str) -> bool:
    """No process of ``run_id`` and no running driver. The recorded driver is asked first (the lease and
    one pid: cheap); only when it does not run are all local processes scanned for the run id (one scan
    per poll of every waiting trigger would cost the triggerer more than everything else it does).
    Raises what ``running_driver`` raises when liveness is unknown and no process of the run exists."""
    from airflow_streaming.exceptions import StreamStateUnknownError

    try:
        if hook.running_driver():
            return False
    except StreamStateUnknownError:
        if hook.processes_of_run(run_id):
            return False
        raise
    return not hook.processes_of_run(run_id)


def recorded_gate_gone(hook: Any, token: str) -> bool:
    """Whether the recorded gate driver ``token`` is confirmed gone (its target's word, not a search: a
    standalone master lists a just-submitted driver before its launch command can be read). No record,
    or no answer from the target: not gone, the wait goes on to its deadline."""
    try:
        gate = hook.gate_driver_record()
        return gate is not None and gate.run_id == token and hook.target_of(gate).state(gate).gone
    except Exception:  # noqa: BLE001 - cannot tell: keep waiting
        return False
