"""A hot standby's takeover of a crashed run (``StreamSpec.hot_standby``; plain Python, driver side).

A hot standby is a prepared driver of the running version (JVM, session, planned query, warm-up: see
``spark_jobs/runtime/standby.py``) that waits beside the active run. It takes the stream over only
from a run that *crashed*:

- the run marker still names that run (nobody asked it to stop: a stop removes the marker, an action
  that starts another run rewrites it), and names this standby's version;
- the driver record (``driver.json``) names that run (no action replaced it);
- the lease names that run and is stale (:meth:`~.contract.Lease.is_stale`: on its host, its holder
  process is gone; elsewhere, it was not renewed for its ttl). A run that ended on its own (an
  exception, a graceful stop) released its lease: the supervisor's restart policy judges those;
- and the standby's OWN proof agrees - ``lease.json`` is a file anyone who can write the control
  directory can forge (a stale lease naming the live run made a standby take over beside it):

  - no process of that run (``--run-id``, with this stream's ``--stream`` and ``--control-dir``) is alive
    on this host (:func:`~.process.live_run_pids`): a live one is not a crash, whatever the lease says;
  - a holder on this host is judged by its pid and start time only when the driver record also puts
    the run on this host (local target); any other holder only once the standby ITSELF has seen the
    same lease bytes unchanged for the lease's ttl (:class:`LeaseWatch`, its own monotonic clock) - a
    forged lease restarts that wait, and the live holder, whose next renewal finds bytes it did not
    write, stops itself long before (``renew_lease``: ``LeaseLostError``; every ttl/6 at most).

  - or, for a holder the standby cannot see, the cluster manager's word that the run's own submission or
    application ended (the optional ``word`` of :func:`judge_takeover`): proof of death without waiting out
    the ttl. The rule over all of it is :func:`.death_proof.decide` (one pure function, exhaustively tested);
    without a word it is the rule above, unchanged.

Why the driver decides and not the supervisor's pass: a pass runs once a minute, a takeover is worth
having only within seconds. The rule is this one pure function over the control files, and the
takeover runs under the stream's lifecycle lock, so no lifecycle action or supervisor pass interleaves
with it; the supervisor acknowledges it afterwards (``Act.RECORD_FAILOVER``: history, notification).

The takeover is three compare-and-swaps on the exact bytes judged above (:func:`take_over`): the lease
(at most one driver ever holds it), the driver record, the run marker. A standby killed between them
leaves a state the reconcile core already handles (a recorded run that is gone, a stale lease).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from airflow_streaming.control import contract, death_proof
from airflow_streaming.control.contract import ControlFileError, ControlPaths, Lease
from airflow_streaming.control.death_proof import Holder
from airflow_streaming.control.process import live_run_pids, process_start_time
from airflow_streaming.control.storage import ControlStorage

#: States of a standby (``standby.json``) that the stream's hot standby reports besides the upgrade
#: standby's PREPARING / READY / FAILED / PROMOTED / EXPIRED.
TOOK_OVER = "TOOK_OVER"


class LeaseWatch:
    """What a standby has itself seen of the lease: since when (its own monotonic clock) the lease file has
    held the bytes it holds now. Not a file: nobody but this process can make it older."""

    def __init__(self) -> None:
        self.raw: bytes | None = None
        self.since = time.monotonic()

    def unchanged_for(self, raw: bytes | None, now: float | None = None) -> float:
        """Seconds these ``raw`` bytes have been seen unchanged (``0`` when they are new to this watch)."""
        now = time.monotonic() if now is None else now
        if raw != self.raw:
            self.raw, self.since = raw, now
        return now - self.since


@dataclass(frozen=True)
class Judgement:
    """What the standby does now: ``"wait"``, ``"take_over"`` (from ``run_id``) or ``"exit"``."""

    act: str
    reason: str
    run_id: str | None = None
    lease_raw: bytes | None = None
    record_raw: bytes | None = None
    marker_raw: bytes | None = None


def judge_takeover(storage: ControlStorage, paths: ControlPaths, me: str, version: str,
                   now: float | None = None, watch: LeaseWatch | None = None, stream: str | None = None,
                   control_dir: str | None = None, alive_here: Callable[[str], list[int]] | None = None,
                   word: Callable[[death_proof.RunIds], death_proof.Word | None] | None = None,
                   word_quiet_s: float = 0.0) -> Judgement:
    """Whether the hot standby ``me`` (of ``version``) takes over now (see the module docstring).

    ``watch``: the standby's own :class:`LeaseWatch`, given at every look (without one a holder elsewhere is
    never judged crashed). ``stream`` / ``control_dir``: what the active run's command line
    must carry besides its run id to count as alive here; ``alive_here``: the pids of a run alive on this host
    (default :func:`~.process.live_run_pids`). ``word``: asks the cluster manager about the ids the run
    recorded (e.g. :class:`~.standalone_word.StandaloneWord`); with it, a holder that is not on this host is
    taken over as soon as the word proves it dead (:mod:`.death_proof`), without it only the lease decides.
    ``word_quiet_s``: the word is asked about a holder on another host only once its lease has been quiet that
    long - not renewed for it by the lease's ``renewed_at``, or seen unchanged for it by ``watch`` (e.g. two
    renewal intervals): a holder that renews its lease is not asked about. Only when to ask; never a proof.

    ``exit`` when the stream no longer wants this standby: the run marker is absent (a stop) or names
    another version (an upgrade or a rollback moved the stream on). A storage error propagates (the
    caller waits and looks again: an unreadable file is never a reason to act)."""
    marker_raw = storage.read_bytes(paths.marker)
    if marker_raw is None:
        return Judgement("exit", "the run marker is gone: the stream was stopped")
    marker = contract.json_object_or_none(marker_raw)
    if marker is None:
        return Judgement("wait", "the run marker is not readable JSON")
    if not isinstance(marker.get("run_id"), str):
        return Judgement("wait", "the run marker names no run")
    if marker.get("version") != version:
        return Judgement("exit", f"the run marker names version {marker.get('version')!r}, not {version!r}")
    active = marker["run_id"]
    if active == me:
        return Judgement("wait", "promoted: the run marker names this run")
    record_raw = storage.read_bytes(paths.driver)
    try:
        record = None if record_raw is None else contract.DriverRecord.from_json(paths.driver, record_raw)
    except ControlFileError:
        return Judgement("wait", "the driver record is not readable")
    if record is None or record.run_id != active:
        return Judgement("wait", f"the driver record does not name the marker's run {active}")
    lease_raw = storage.read_bytes(paths.lease)
    seen = watch.unchanged_for(lease_raw) if watch is not None else 0.0  # every look, so that the clock runs
    if lease_raw is None:
        return Judgement("wait", f"run {active} holds no lease (starting, or ended on its own)")
    try:
        lease = Lease.from_json(paths.lease, lease_raw)
    except ControlFileError:
        return Judgement("wait", "the lease is not readable")
    if lease.run_id != active:
        return Judgement("wait", f"the lease names run {lease.run_id}, not the marker's run {active}")
    now = time.time() if now is None else now
    here = socket.gethostname()
    holder = _holder(lease) if lease.host == here else Holder.ELSEWHERE
    stale = holder in (Holder.ABSENT, Holder.OTHER) or (holder is Holder.ELSEWHERE and now - lease.renewed_at > lease.ttl)
    quiet = holder is not Holder.ELSEWHERE or max(seen, now - lease.renewed_at) >= word_quiet_s
    if (word is None or not quiet) and not stale:
        return Judgement("wait", f"run {active} holds its lease")  # nothing to ask yet: as cheap as before
    pids = (alive_here or (lambda run: live_run_pids(run, stream, control_dir)))(active)
    if pids:
        return Judgement("wait", f"run {active} is alive on this host (pid {', '.join(map(str, pids))}): not a "
                                 "crash, whatever lease.json says")
    record_local_here = record.host == here and record.target == contract.LOCAL_TARGET
    said, ids = None, death_proof.RunIds()
    if word is not None and quiet and holder is not Holder.ALIVE and \
            not (holder is not Holder.ELSEWHERE and record_local_here):
        ids = _run_ids(storage, paths, record)
        said = word(ids)  # the I/O answers "no word" on any error: never an exception here
    decision = death_proof.decide(holder, False, record_local_here,  # no process of the run here (above)
                                  now - lease.renewed_at, lease.ttl, seen, said, ids)
    if decision.verdict is death_proof.Verdict.ALIVE:
        return Judgement("wait", f"run {active} holds its lease: {decision.reason}")
    if decision.verdict is death_proof.Verdict.WAIT:
        return Judgement("wait", f"the lease of run {active} (holder on {lease.host}): {decision.reason}")
    proof = decision.proof.value if decision.proof is not None else ""  # always one with PROVEN_DEAD
    return Judgement("take_over", f"run {active} crashed ({proof}: {decision.reason}); its marker still names it",
                     active, lease_raw, record_raw, marker_raw)


def _holder(lease: Lease) -> Holder:
    """The lease's holder process on this host, as ``/proc`` shows it."""
    if process_start_time(lease.pid) is None:
        return Holder.ABSENT
    return Holder.ALIVE if lease.identity().alive() else Holder.OTHER


def _run_ids(storage: ControlStorage, paths: ControlPaths, record: contract.DriverRecord) -> death_proof.RunIds:
    """The cluster manager's ids the run recorded: the submission id of its driver record, the application id
    of its status document (only while that document names the run), the YARN application id of a ``yarn``
    target's driver record, the driver pod of a ``kubernetes`` one. An unreadable status names none."""
    submission = record.handle.get("submission_id")
    yarn_app = record.handle.get("app_id") if record.target == "yarn" else None
    namespace, pod = (record.handle.get("namespace"), record.handle.get("pod")) if record.target == "kubernetes" \
        else (None, None)
    kube_pod = f"{namespace}/{pod}" if isinstance(namespace, str) and isinstance(pod, str) and namespace and pod \
        else None
    app_id = None
    try:
        doc = contract.json_object_or_none(storage.read_bytes(paths.status) or b"")
    except Exception:  # noqa: BLE001 - no application id: the submission's word (if any) or the lease decides
        doc = None
    if doc is not None and doc.get("run_id") == record.run_id and isinstance(doc.get("app_id"), str):
        app_id = doc["app_id"]
    return death_proof.RunIds(submission if isinstance(submission, str) and submission else None, app_id or None,
                              yarn_app if isinstance(yarn_app, str) and yarn_app else None, kube_pod)


def take_over(storage: ControlStorage, paths: ControlPaths, judgement: Judgement, me: str, version: str,
              own_record: bytes, ttl: float, pid: int, pid_start_time: float | None, host: str) -> Lease | None:
    """Carry out a ``take_over`` judgement (under the stream's lifecycle lock): the lease, then the driver
    record (to ``own_record``, this standby's :class:`~.contract.DriverRecord`), then the run marker, each a
    compare-and-swap on the bytes judged. Returns the lease now held, ``None`` if the lease moved meanwhile
    (nothing changed). A record or marker that moved after the lease was taken gives the lease back."""
    now = time.time()
    lease = Lease(me, pid, pid_start_time, host, now, now, ttl)
    if not storage.compare_and_swap(paths.lease, judgement.lease_raw, lease.to_json()):
        return None
    marker = json.dumps({"run_id": me, "version": version, "created_at": now,
                         "took_over_from": judgement.run_id}).encode()
    record_swapped = False
    try:
        record_swapped = storage.compare_and_swap(paths.driver, judgement.record_raw, own_record)
        if record_swapped and storage.compare_and_swap(paths.marker, judgement.marker_raw, marker):
            return lease
    except BaseException:
        _give_back(storage, paths, lease, own_record, judgement.record_raw, record_swapped)
        raise  # a storage error: the caller looks again; nothing of the standby's is left behind
    # A file moved after the lease was taken - a stop (marker removed) or an action (marker or record
    # rewritten): theirs wins. What was taken is given back, so that what runs is what the record names.
    _give_back(storage, paths, lease, own_record, judgement.record_raw, record_swapped)
    return None


def _give_back(storage: ControlStorage, paths: ControlPaths, lease: Lease, own_record: bytes,
               record_raw: bytes | None, record_swapped: bool) -> None:
    """Undo a takeover that did not complete: the record (if it was swapped), then the lease, each only if
    it still holds what this standby wrote. Best effort: a lease left behind names a live standby, which
    the supervisor reports ("another run holds the lease") rather than acts on."""
    undo: list[tuple[str, bytes, bytes | None]] = [(paths.lease, lease.to_json(), None)]
    if record_swapped:
        undo.insert(0, (paths.driver, own_record, record_raw))
    for path, ours, theirs in undo:
        try:
            storage.compare_and_swap(path, ours, theirs)
        except Exception:  # noqa: BLE001 - the storage is failing: the next look (or a person) sees the rest
            pass


__all__ = ["TOOK_OVER", "Judgement", "LeaseWatch", "judge_takeover", "take_over"]
