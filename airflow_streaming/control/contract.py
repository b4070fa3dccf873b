"""The control-location contract between Airflow and a running streaming driver.

Layout of one stream's control directory (``<control_location>/<stream name>/``)::

    RUNNING        run marker. Written by the deployer before submitting; the driver runs while it
                   exists. Deleting it asks the driver to stop gracefully at a micro-batch boundary.
    status.json    status document, replaced atomically by the driver every heartbeat and on every
                   progress event (see :class:`StatusDocument`).
    lease.json     driver lease. Created exclusively by a starting driver; a second driver for the
                   same stream finds it held and refuses to start (exit code ``EXIT_LEASE_HELD``).
    driver.json    submission record written by the deployer: run id, spark-submit pid and its
                   start time, masked command, log file.
    logs/<run_id>.log   spark-submit and driver output of one run.

Everything is whole-file: reads, atomic replaces, exclusive creates, deletes. No appends.
This module is plain Python (no Airflow, no Spark) and is imported by both sides.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_streaming.health import job_trigger
from airflow_streaming.control.process import (
    ProcessIdentity,
    process_alive,
    process_start_time,
)
from airflow_streaming.control.storage import ControlStorage, StorageError

SCHEMA_VERSION = 1

#: Driver exit codes (the spark-submit process exits with the Python driver's code).
EXIT_GRACEFUL = 0
EXIT_QUERY_FAILED = 3
EXIT_STARTUP_FAILED = 4
EXIT_LEASE_HELD = 5
EXIT_JVM_GONE = 6
EXIT_REASONS = {
    EXIT_GRACEFUL: "graceful stop",
    EXIT_QUERY_FAILED: "query failed",
    EXIT_STARTUP_FAILED: "startup failed",
    EXIT_LEASE_HELD: "another driver holds the stream's lease",
    EXIT_JVM_GONE: "the driver JVM that launched this Python process is gone",
}

#: Driver states written in the status document.
STARTING, RUNNING, STOPPING, STOPPED, FAILED = "STARTING", "RUNNING", "STOPPING", "STOPPED", "FAILED"
TERMINAL_STATES = frozenset({STOPPED, FAILED})

#: How many progress entries per query the status document keeps (Spark keeps 100).
RECENT_PROGRESS_LIMIT = 20

#: ``earlier_progress`` of the status document keeps the counting fields of this many batch ids per query
#: (the newest), of at most EARLIER_PROGRESS_QUERIES queries (the last seen): the completeness watch reads a
#: checkpoint's newest ``airflow_streaming.checkpoint.committed.DEFAULT_LAST`` (32) batches, so the counts
#: of older batches could never be used.
EARLIER_PROGRESS_BATCHES = 32
EARLIER_PROGRESS_QUERIES = 4


#: Pacing on remote control storage (HDFS and other Hadoop stores), where every check or write is a
#: NameNode request: the driver checks the run marker every REMOTE_MARKER_POLL_SECONDS, writes
#: ``status.json`` at most every REMOTE_MIN_HEARTBEAT_SECONDS (progress between two heartbeats is
#: written with the next one) and renews its lease every ttl/6. One watched stream then costs at most
#: ~1 NameNode request per second (see docs/hdfs.md and bench/namenode_bench.py). Local files: no pacing.
REMOTE_MARKER_POLL_SECONDS = 5.0
REMOTE_MIN_HEARTBEAT_SECONDS = 10.0
LEASE_RENEWALS_PER_TTL = 6


def heartbeat_seconds(heartbeat_interval: float, remote: bool) -> float:
    """How often the driver writes ``status.json``: the spec's interval, at least
    ``REMOTE_MIN_HEARTBEAT_SECONDS`` on remote storage. The health check uses the same figure."""
    return max(float(heartbeat_interval), REMOTE_MIN_HEARTBEAT_SECONDS) if remote else float(heartbeat_interval)


def lease_renew_seconds(heartbeat: float, ttl: float, remote: bool) -> float:
    """How often the driver renews its lease: every heartbeat (at most ttl/6) on local files, every ttl/6
    on remote storage (a renewal is a compare-and-swap: ~6 NameNode requests)."""
    per_ttl = ttl / LEASE_RENEWALS_PER_TTL
    return max(1.0, per_ttl if remote else min(float(heartbeat), per_ttl))


def new_run_id() -> str:
    """A sortable, unique id for one submission of a stream."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


RECORD_NAME = "lifecycle.json"
HISTORY_NAME = "history.json"


@dataclass(frozen=True)
class ControlPaths:
    """Where each control file of one stream lives."""

    root: str
    """The stream's control directory, ``<control_location>/<name>``."""

    @property
    def marker(self) -> str:
        return f"{self.root}/RUNNING"

    @property
    def status(self) -> str:
        return f"{self.root}/status.json"

    @property
    def lease(self) -> str:
        return f"{self.root}/lease.json"

    @property
    def standby(self) -> str:
        """A prepared (standby) driver's readiness: ``{"run_id", "pid", "state", "error", "at"}``."""
        return f"{self.root}/standby.json"

    @property
    def standby_driver(self) -> str:
        """The standby driver's :class:`DriverRecord` until it is promoted to ``driver.json``."""
        return f"{self.root}/standby-driver.json"

    @property
    def standby_gate(self) -> str:
        """A request to the standby driver to run the compatibility gate in its session."""
        return f"{self.root}/standby-gate.json"

    @property
    def standby_gate_report(self) -> str:
        """The standby driver's answer to :attr:`standby_gate`."""
        return f"{self.root}/standby-gate-report.json"

    @property
    def gate_report(self) -> str:
        """A cold gate's answer ``{"id", "report" | "error", ...}``: written by the detached check child or
        the gate driver on the stream's target (``spark_jobs/launch.py --gate-only``)."""
        return f"{self.root}/gate-report.json"

    @property
    def gate_driver(self) -> str:
        """The :class:`DriverRecord` of the last gate driver submitted to the stream's target."""
        return f"{self.root}/gate-driver.json"

    @property
    def driver(self) -> str:
        return f"{self.root}/driver.json"

    @property
    def record(self) -> str:
        """The record of the stream's last lifecycle action (``lifecycle.json``)."""
        return f"{self.root}/{RECORD_NAME}"

    @property
    def history(self) -> str:
        """The stream's deployment history (``history.json``): one entry per ended action."""
        return f"{self.root}/{HISTORY_NAME}"

    def log(self, run_id: str) -> str:
        return f"{self.root}/logs/{run_id}.log"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, indent=1, sort_keys=True, default=str).encode("utf-8")


class ControlFileError(ValueError):
    """A control file exists but cannot be understood; the message names the file."""


def _json_value(data: bytes | str) -> Any:
    """The JSON value in UTF-8 bytes (or text); a ``ValueError`` when they are not JSON."""
    return json.loads(data if isinstance(data, str) else data.decode("utf-8"))


def _unreadable(path: str, why: str, advice: str) -> ControlFileError:
    return ControlFileError(f"{path} is unreadable ({why}); {advice}" if advice else f"{path}: {why}")


def parse_json(path: str, data: bytes | str, advice: str = "") -> Any:
    """The JSON value in a control file's bytes (or text); :class:`ControlFileError` naming ``path`` when
    they are not UTF-8 JSON. ``advice``: see :func:`parse_json_object`."""
    try:
        return _json_value(data)
    except ValueError as exc:  # UnicodeDecodeError, json.JSONDecodeError
        raise _unreadable(path, f"not valid JSON ({exc})", advice) from exc


def parse_json_object(path: str, data: bytes | str, advice: str = "") -> dict[str, Any]:
    """A control file's JSON object; :class:`ControlFileError` naming ``path`` if it is not one.

    The error reads ``<path>: not valid JSON (<why>)`` or ``<path>: expected a JSON object, got list``.
    ``advice``, for a file a person must repair (what it holds, what to do about it), turns it into
    ``<path> is unreadable (<why>); <advice>``."""
    value = parse_json(path, data, advice)
    if not isinstance(value, dict):
        raise _unreadable(path, f"expected a JSON object, got {type(value).__name__}", advice)
    return value


def json_object_or_none(data: bytes | str | None) -> dict[str, Any] | None:
    """The JSON object in a control file's bytes (or text); ``None`` when there are none (``data`` is
    ``None``: no file) or they do not hold one. Never raises: for the readers to whom garbage counts as
    absent (they wait, retry or fall back); the others use :func:`parse_json_object`."""
    if data is None:
        return None
    try:
        value = _json_value(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# --------------------------------------------------------------------------- run marker


def write_marker(storage: ControlStorage, paths: ControlPaths, run_id: str, version: str) -> None:
    """Create the run marker (the driver keeps running while it exists)."""
    storage.write_atomic(paths.marker, _dumps({"run_id": run_id, "version": version, "created_at": time.time()}))


def read_marker(storage: ControlStorage, paths: ControlPaths) -> dict[str, Any] | None:
    """The run marker's content (``run_id``, ``version``), ``None`` if absent or unreadable."""
    return json_object_or_none(storage.read_bytes(paths.marker))


def marker_present(storage: ControlStorage, paths: ControlPaths) -> bool:
    """Whether the run marker exists (its absence is a graceful-stop request).

    Raises :class:`StorageError` when that cannot be told: an unreadable marker is never a stop request.
    """
    return storage.exists(paths.marker)


def request_stop(storage: ControlStorage, paths: ControlPaths) -> bool:
    """Ask the driver to stop gracefully by removing the run marker; return whether it existed."""
    return storage.delete(paths.marker)




# --------------------------------------------------------------------------- field validation


def _require(path: str, raw: dict[str, Any], name: str, kinds: tuple[type, ...], optional: bool = False) -> Any:
    """``raw[name]`` if it has one of ``kinds`` (bool is never a number); :class:`ControlFileError` otherwise."""
    if name not in raw or raw[name] is None:
        if optional:
            return None
        raise ControlFileError(f"{path}: field {name!r} is missing")
    value = raw[name]
    if isinstance(value, bool) and bool not in kinds:
        ok = False
    else:
        ok = isinstance(value, kinds)
    if not ok:
        wanted = " or ".join("number" if k in (int, float) else k.__name__ for k in kinds)
        raise ControlFileError(f"{path}: field {name!r} must be {wanted}, got {type(value).__name__} {value!r:.60}")
    return value


_NUMBER = (int, float)


# --------------------------------------------------------------------------- lease


@dataclass(frozen=True)
class Lease:
    """Who runs a stream right now. A lease is stale when its holder is provably gone:

    - same host: the holder process (pid + start time) is gone;
    - other host: it was not renewed for ``ttl`` seconds. A driver that cannot renew its lease stops
      itself after ``ttl / 2`` (see the runtime's reporter), before anyone may judge it stale.
    """

    run_id: str
    pid: int
    pid_start_time: float | None
    host: str
    acquired_at: float
    renewed_at: float
    ttl: float

    def identity(self) -> ProcessIdentity:
        return ProcessIdentity(self.pid, self.pid_start_time, self.host)

    def is_stale(self, now: float | None = None) -> bool:
        if self.host == socket.gethostname():
            return not self.identity().alive()
        return (now or time.time()) - self.renewed_at > self.ttl

    def to_json(self) -> bytes:
        return _dumps(asdict(self))

    @classmethod
    def from_json(cls, path: str, data: bytes) -> Lease:
        raw = parse_json_object(path, data)
        return cls(
            run_id=_require(path, raw, "run_id", (str,)), pid=_require(path, raw, "pid", (int,)),
            pid_start_time=_require(path, raw, "pid_start_time", _NUMBER, optional=True),
            host=_require(path, raw, "host", (str,)), acquired_at=_require(path, raw, "acquired_at", _NUMBER),
            renewed_at=_require(path, raw, "renewed_at", _NUMBER), ttl=_require(path, raw, "ttl", _NUMBER))


class LeaseHeldError(RuntimeError):
    """Another live driver holds the stream's lease."""

    def __init__(self, lease: Lease):
        self.lease = lease
        super().__init__(
            f"stream is already run by driver pid {lease.pid} on {lease.host} (run {lease.run_id}, "
            f"lease renewed {time.time() - lease.renewed_at:.0f}s ago); stop it first"
        )


def read_lease(storage: ControlStorage, paths: ControlPaths) -> Lease | None:
    """The lease, ``None`` if there is none; :class:`ControlFileError` if unreadable, :class:`StorageError`
    if it cannot be read."""
    data = storage.read_bytes(paths.lease)
    return None if data is None else Lease.from_json(paths.lease, data)


ACQUIRE_WAIT_SECONDS = 60.0


def acquire_lease(storage: ControlStorage, paths: ControlPaths, run_id: str, ttl: float) -> Lease:
    """Take the stream's lease for this process, taking over a stale one; raise :class:`LeaseHeldError`.

    Rule: a lease is taken over only when it is stale (see :class:`Lease`) or unreadable garbage; the
    takeover is a compare-and-swap on the exact bytes judged stale, so at most one driver ever holds
    the lease. A storage error raises :class:`StorageError` (the driver does not start).
    """
    deadline = time.monotonic() + ACQUIRE_WAIT_SECONDS
    while time.monotonic() < deadline:
        now = time.time()
        pid = os.getpid()
        lease = Lease(run_id, pid, process_start_time(pid), socket.gethostname(), now, now, ttl)
        if storage.create_exclusive(paths.lease, lease.to_json()):
            return lease
        raw = storage.read_bytes(paths.lease)
        if raw is None:
            continue  # released meanwhile: try again
        try:
            current: Lease | None = Lease.from_json(paths.lease, raw)
        except ControlFileError:
            current = None  # unreadable lease: no driver can be renewing it
        if current is not None and not current.is_stale():
            raise LeaseHeldError(current)
        storage.compare_and_swap(paths.lease, raw, None)
    raise RuntimeError(f"could not acquire {paths.lease} within {ACQUIRE_WAIT_SECONDS:.0f}s")


class LeaseLostError(RuntimeError):
    """The lease file no longer names this driver: another driver took the stream over."""


def renew_lease(storage: ControlStorage, paths: ControlPaths, lease: Lease) -> Lease:
    """Refresh ``renewed_at`` by compare-and-swap on the bytes this driver last wrote.

    Raises :class:`LeaseLostError` if the file holds anything else now (another driver took the stream
    over, or someone deleted it), :class:`StorageError` if the storage could not be reached (the
    caller retries; the lease was not renewed).
    """
    renewed = Lease(**{**asdict(lease), "renewed_at": time.time()})
    if storage.compare_and_swap(paths.lease, lease.to_json(), renewed.to_json()):
        return renewed
    try:
        current = read_lease(storage, paths)
    except ControlFileError:
        current = None
    raise LeaseLostError(
        f"{paths.lease} now names {current.run_id + ' pid ' + str(current.pid) if current else 'nobody'}, "
        f"not this driver (run {lease.run_id} pid {lease.pid})"
    )


def release_lease(storage: ControlStorage, paths: ControlPaths, lease: Lease) -> None:
    """Delete the lease if it still holds exactly what this holder last wrote."""
    storage.compare_and_swap(paths.lease, lease.to_json(), None)


# --------------------------------------------------------------------------- submission record

LOCAL_TARGET = "local"


@dataclass(frozen=True)
class DriverRecord:
    """What the deployer knows about one submission (written to ``driver.json``).

    ``target`` names where the driver runs (``local``, ``standalone-cluster``, ``yarn``,
    ``kubernetes``: see ``airflow_streaming.targets``); ``handle`` is that target's own identity of the
    driver (local: ``pid`` and ``start_time`` of the spark-submit process, whose command line carries
    ``--run-id``; cluster targets: a submission, application or pod id).
    """

    run_id: str
    stream: str
    version: str
    application: str
    host: str
    """The host the submission was made from."""
    command: str
    """The submission command with secrets masked."""
    log_path: str
    submitted_at: float
    checkpoint_location: str
    target: str = LOCAL_TARGET
    handle: dict[str, Any] = field(default_factory=dict)

    @property
    def submit_pid(self) -> int | None:
        """The local spark-submit pid (``None`` for cluster targets)."""
        pid = self.handle.get("pid")
        return pid if isinstance(pid, int) and not isinstance(pid, bool) else None

    @property
    def submit_pid_start_time(self) -> float | None:
        return self.handle.get("start_time")

    def local_identity(self) -> ProcessIdentity | None:
        """The submitting process's identity (local target only)."""
        if self.submit_pid is None:
            return None
        return ProcessIdentity(self.submit_pid, self.submit_pid_start_time, self.host, token=self.run_id)

    def to_json(self) -> bytes:
        return _dumps(asdict(self))

    @classmethod
    def from_json(cls, path: str, data: bytes) -> DriverRecord:
        raw = parse_json_object(path, data)
        if "handle" not in raw and "submit_pid" in raw:  # written by 0.1 (local target only)
            raw = {**raw, "target": LOCAL_TARGET,
                   "handle": {"pid": raw.get("submit_pid"), "start_time": raw.get("submit_pid_start_time")}}
        text = {name: _require(path, raw, name, (str,)) for name in
                ("run_id", "stream", "version", "application", "host", "command", "log_path", "checkpoint_location")}
        handle = _require(path, raw, "handle", (dict,), optional=True) or {}
        if "pid" in handle and handle["pid"] is not None:
            _require(path, handle, "pid", (int,))
            _require(path, handle, "start_time", _NUMBER, optional=True)
        return cls(**text, submitted_at=_require(path, raw, "submitted_at", _NUMBER),
                   target=_require(path, raw, "target", (str,), optional=True) or LOCAL_TARGET, handle=handle)


def read_driver_record(storage: ControlStorage, paths: ControlPaths) -> DriverRecord | None:
    """``driver.json``; ``None`` if the stream was never submitted; :class:`ControlFileError` if unreadable."""
    data = storage.read_bytes(paths.driver)
    return None if data is None else DriverRecord.from_json(paths.driver, data)


# --------------------------------------------------------------------------- status document

_STATES = frozenset({STARTING, RUNNING, STOPPING, STOPPED, FAILED})


def _trigger(where: str, raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not job_trigger.valid(raw):
        raise ControlFileError(f"{where}: trigger must be {{'kind': processing_time|available_now|once|continuous, "
                               f"'interval_s': seconds >= 0 or null}}, got {raw!r}")
    return dict(raw)


@dataclass
class QueryStatus:
    """One streaming query as last seen by the driver."""

    id: str
    run_id: str
    name: str | None
    active: bool
    status: dict[str, Any] = field(default_factory=dict)
    """``query.status``: message, isDataAvailable, isTriggerActive."""
    recent_progress: list[dict[str, Any]] = field(default_factory=list)
    """The last ``RECENT_PROGRESS_LIMIT`` progress reports (Spark's JSON, parsed)."""
    last_batch_id: int | None = None
    """The batchId of the last completed micro-batch of this run."""
    trigger: dict[str, Any] | None = None
    """The trigger the job started the query with (``airflow_streaming.health.job_trigger``); ``None``: not
    known (a driver of an older release)."""

    @classmethod
    def from_dict(cls, path: str, raw: Any, index: int) -> QueryStatus:
        where = f"{path} queries[{index}]"
        if not isinstance(raw, dict):
            raise ControlFileError(f"{where}: expected an object, got {type(raw).__name__}")
        progress = _require(where, raw, "recent_progress", (list,), optional=True) or []
        if not all(isinstance(p, dict) for p in progress):
            raise ControlFileError(f"{where}: recent_progress must be a list of objects")
        return cls(id=_require(where, raw, "id", (str,)), run_id=_require(where, raw, "run_id", (str,)),
                   name=_require(where, raw, "name", (str,), optional=True),
                   active=bool(_require(where, raw, "active", (bool,))),
                   status=_require(where, raw, "status", (dict,), optional=True) or {},
                   recent_progress=progress,
                   last_batch_id=_require(where, raw, "last_batch_id", (int,), optional=True),
                   trigger=_trigger(where, raw.get("trigger")))


@dataclass
class StatusDocument:
    """The driver's view of the stream, replaced atomically in ``status.json``."""

    stream: str
    version: str
    run_id: str
    state: str
    pid: int
    host: str
    started_at: float
    heartbeat_at: float
    app_id: str | None = None
    spark_ui: str | None = None
    master: str | None = None
    checkpoint_location: str | None = None
    ready: bool = False
    """True once Spark reported the first progress (a completed micro-batch) or idle event of this run."""
    queries: list[QueryStatus] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=lambda: {"batches": 0, "input_rows": 0, "quarantined_rows": 0})
    """Counters for this run: completed batches, input rows, quarantined (malformed) rows."""
    last_exception: dict[str, Any] | None = None
    """``{"message": first lines, "error_class": Spark condition or exception type}``."""
    exit: dict[str, Any] | None = None
    """Set just before the driver exits: ``{"code", "reason", "last_committed_batch"}``."""
    storage_errors: dict[str, Any] | None = None
    """``{"count", "last", "at"}`` when the driver could not read its control files (it keeps running)."""
    query_checkpoints: dict[str, str] = field(default_factory=dict)
    """Query id -> its resolved checkpoint root as Spark uses it (a user script's own
    ``checkpointLocation`` or ``<checkpoint>/<queryName>`` may differ from the spec's location)."""
    earlier_progress: Any = field(default_factory=list)
    """The counting fields (:func:`progress_counting_fields`) of the progress reports before ``recent_progress``:
    those of the stream's earlier driver runs (a starting driver carries them over from the status document it
    replaces) and this run's that ``recent_progress`` no longer holds; see :func:`carry_progress`. As the file
    holds it (not checked when the document is read: a health poll never pays for it): read it through
    :meth:`earlier_reports`."""
    counters: Any = field(default_factory=dict)
    """Query id -> the row counts of every batch its drivers reported since an epoch began (:func:`count_report`):
    ``{"from_batch", "through_batch", "input_rows", "late_rows", "epoch", "run_id"}``; carried over by each
    starting driver like :attr:`earlier_progress`. As the file holds it: read it through :meth:`counters_of`."""
    schema: int = SCHEMA_VERSION

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def last_batch_id(self) -> int | None:
        ids = [q.last_batch_id for q in self.queries if q.last_batch_id is not None]
        return max(ids) if ids else None

    def checkpoints(self) -> list[str]:
        """The resolved checkpoint roots of this run's queries (as recorded by the driver)."""
        return sorted(set(self.query_checkpoints.values()))

    def earlier_reports(self) -> tuple[list[dict[str, Any]], int]:
        """The entries of :attr:`earlier_progress` that are counting fields of a report, and how many are not
        (garbage is left out and counted, never raised: an older or damaged document only loses counts)."""
        if self.earlier_progress is None:
            return [], 0
        if not isinstance(self.earlier_progress, list):
            return [], 1
        entries = [progress_counting_fields(e) for e in self.earlier_progress]
        kept = [e for e in entries if e is not None]
        return kept, len(entries) - len(kept)

    def counters_of(self, query_id: str | None) -> dict[str, Any] | None:
        """The valid :attr:`counters` entry of ``query_id`` (:func:`valid_counters`), ``None`` when there is none
        or it is garbage (never raised: an older or damaged document only loses counts)."""
        if query_id is None or not isinstance(self.counters, dict):
            return None
        return valid_counters(self.counters.get(query_id))

    def to_json(self) -> bytes:
        return _dumps(asdict(self))

    @classmethod
    def from_json(cls, path: str, data: bytes) -> StatusDocument:
        return cls.from_dict(path, parse_json_object(path, data))

    @classmethod
    def from_dict(cls, path: str, raw: dict[str, Any]) -> StatusDocument:
        """Validate a parsed ``status.json`` (``path`` names it in errors); ``raw`` is not modified, so a
        caller that needs both the dict and the document parses the JSON once."""
        if raw.get("schema") != SCHEMA_VERSION:
            raise ControlFileError(f"{path}: unsupported status schema {raw.get('schema')!r}")
        queries = _require(path, raw, "queries", (list,), optional=True) or []
        totals = _require(path, raw, "totals", (dict,), optional=True)
        if totals is not None:
            for key in ("batches", "input_rows", "quarantined_rows"):
                _require(f"{path} totals", totals, key, (int,))
        state = _require(path, raw, "state", (str,))
        if state not in _STATES:
            raise ControlFileError(f"{path}: unknown state {state!r} (expected one of {', '.join(sorted(_STATES))})")
        optional_text = {name: _require(path, raw, name, (str,), optional=True)
                         for name in ("app_id", "spark_ui", "master", "checkpoint_location")}
        return cls(
            stream=_require(path, raw, "stream", (str,)), version=_require(path, raw, "version", (str,)),
            run_id=_require(path, raw, "run_id", (str,)), state=state, pid=_require(path, raw, "pid", (int,)),
            host=_require(path, raw, "host", (str,)), started_at=_require(path, raw, "started_at", _NUMBER),
            heartbeat_at=_require(path, raw, "heartbeat_at", _NUMBER), **optional_text,
            ready=bool(_require(path, raw, "ready", (bool,), optional=True)),
            queries=[QueryStatus.from_dict(path, q, i) for i, q in enumerate(queries)],
            **({"totals": dict(totals)} if totals is not None else {}),
            last_exception=_require(path, raw, "last_exception", (dict,), optional=True),
            exit=_require(path, raw, "exit", (dict,), optional=True),
            storage_errors=_require(path, raw, "storage_errors", (dict,), optional=True),
            query_checkpoints={str(k): str(v) for k, v in
                               (_require(path, raw, "query_checkpoints", (dict,), optional=True) or {}).items()},
            earlier_progress=raw.get("earlier_progress"),
            counters=raw.get("counters", {}),
        )


def check_view(path: str, view: Any) -> Any:
    """``view`` (a :class:`~airflow_streaming.health.view.StatusView`) if its fields are what
    :meth:`StatusDocument.from_dict` accepts (the same checks, the same messages); :class:`ControlFileError`
    naming ``path`` otherwise."""
    require = _require
    raw = view.fields()
    if view.schema != SCHEMA_VERSION:
        raise ControlFileError(f"{path}: unsupported status schema {view.schema!r}")
    if view.totals is not None:
        for key in ("batches", "input_rows", "quarantined_rows"):
            require(f"{path} totals", view.totals, key, (int,))
    state = require(path, raw, "state", (str,))
    if state not in _STATES:
        raise ControlFileError(f"{path}: unknown state {state!r} (expected one of {', '.join(sorted(_STATES))})")
    for name in ("app_id", "spark_ui", "master", "checkpoint_location"):
        require(path, raw, name, (str,), optional=True)
    for name in ("stream", "version", "run_id", "host"):
        require(path, raw, name, (str,))
    require(path, raw, "pid", (int,))
    require(path, raw, "started_at", _NUMBER)
    require(path, raw, "heartbeat_at", _NUMBER)
    require(path, raw, "ready", (bool,), optional=True)
    for i, query in enumerate(view.queries or ()):
        where, q = f"{path} queries[{i}]", query.fields()
        for name in ("id", "run_id"):
            require(where, q, name, (str,))
        require(where, q, "name", (str,), optional=True)
        require(where, q, "active", (bool,))
        require(where, q, "last_batch_id", (int,), optional=True)
        _trigger(where, query.trigger)
    return view


def _int_or_none(value: Any) -> bool:
    return value is None or isinstance(value, int) and not isinstance(value, bool)


def progress_counting_fields(report: Any) -> dict[str, Any] | None:
    """What the completeness watch counts from a progress report (Spark's JSON, parsed, or such an entry of
    ``earlier_progress``): ``{"id", "batchId", "numInputRows", "stateOperators": [{"numRowsDroppedByWatermark"}],
    "eventTime": {"min"} | None}``; ``None`` when ``report`` is not one (no integer ``batchId``, a count that
    is not an integer, a query id that is not text)."""
    if not isinstance(report, dict):
        return None
    batch, rows, query = report.get("batchId"), report.get("numInputRows"), report.get("id")
    operators, event_time = report.get("stateOperators") or [], report.get("eventTime")
    if (batch is None or not _int_or_none(batch) or not _int_or_none(rows) or not isinstance(query, (str, type(None)))
            or not isinstance(operators, list) or not isinstance(event_time, (dict, type(None)))):
        return None
    dropped = [op.get("numRowsDroppedByWatermark") if isinstance(op, dict) else False for op in operators]
    first = event_time.get("min") if event_time is not None else None
    if not all(_int_or_none(d) for d in dropped) or not isinstance(first, (str, type(None))):
        return None
    return {"id": query, "batchId": batch, "numInputRows": rows,
            "stateOperators": [{"numRowsDroppedByWatermark": d} for d in dropped],
            "eventTime": {"min": first} if event_time is not None else None}


def carry_progress(earlier: list[Any], reports: list[Any]) -> list[dict[str, Any]]:
    """The counting fields (:func:`progress_counting_fields`) of ``earlier`` then ``reports`` (entries that are
    not a report's are left out), a later entry of a ``(query id, batch id)`` replacing an earlier one: the
    newest :data:`EARLIER_PROGRESS_BATCHES` batch ids of each of the last :data:`EARLIER_PROGRESS_QUERIES`
    queries seen, in batch id order per query."""
    by_query: dict[Any, dict[int, dict[str, Any]]] = {}
    for entry in map(progress_counting_fields, [*earlier, *reports]):
        if entry is None:
            continue
        batches = by_query.pop(entry["id"], {})  # re-inserted last: the query seen last
        batches[entry["batchId"]] = entry
        by_query[entry["id"]] = batches
    return [batches[b] for batches in list(by_query.values())[-EARLIER_PROGRESS_QUERIES:]
            for b in sorted(batches)[-EARLIER_PROGRESS_BATCHES:]]


#: ``counters`` of the status document keeps the epochs of at most this many queries (the last counted).
COUNTER_QUERIES = EARLIER_PROGRESS_QUERIES


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def valid_counters(entry: Any) -> dict[str, Any] | None:
    """``entry`` if it is a ``counters`` entry (:func:`count_report`), else ``None``."""
    if not isinstance(entry, dict) or not all(_count(entry.get(k)) for k in
                                              ("from_batch", "through_batch", "input_rows", "late_rows")):
        return None
    if entry["through_batch"] < entry["from_batch"] or not all(isinstance(entry.get(k), str) for k in ("epoch", "run_id")):
        return None
    return {k: entry[k] for k in ("from_batch", "through_batch", "input_rows", "late_rows", "epoch", "run_id")}


def count_report(counters: dict[str, Any], report: Any) -> dict[str, Any]:
    """``counters`` (query id -> epoch, see :attr:`StatusDocument.counters`) after the progress ``report`` of a
    committed batch: the sums over every batch ``from_batch..through_batch`` that this stream's drivers reported,
    each once. The report of batch ``through_batch + 1`` is added; the first report of a query, one of a later
    batch (the reports between are lost: a driver killed between a commit and its report) or, from another run
    than the epoch's last, one of a batch id already counted (the checkpoint's ids went back: a rollback to an
    older copy) begins a new **epoch** (``from_batch`` = that batch, ``epoch`` = the report's run id). The same
    run reporting a counted batch again (a repeated delivery) adds nothing; a report without its counts ends the
    query's epoch (the next report begins one). At most :data:`COUNTER_QUERIES` queries, the last counted."""
    fields = progress_counting_fields(report)
    out = {k: v for k, v in counters.items() if valid_counters(v) is not None} if isinstance(counters, dict) else {}
    if fields is None or not isinstance(fields["id"], str):
        return out
    query, batch, run = fields["id"], fields["batchId"], str(report.get("runId"))
    rows = fields["numInputRows"]
    dropped = [op["numRowsDroppedByWatermark"] for op in fields["stateOperators"]]
    current = out.pop(query, None)
    if rows is None or batch < 0 or any(d is None for d in dropped):
        return out
    late = sum(dropped)
    if current is not None and batch == current["through_batch"] + 1:
        entry = {**current, "through_batch": batch, "input_rows": current["input_rows"] + rows,
                 "late_rows": current["late_rows"] + late, "run_id": run}
    elif current is not None and batch <= current["through_batch"] and run == current["run_id"]:
        entry = current
    else:
        entry = {"from_batch": batch, "through_batch": batch, "input_rows": rows, "late_rows": late, "epoch": run,
                 "run_id": run}
    out[query] = entry  # re-inserted last: the query counted last
    return dict(list(out.items())[-COUNTER_QUERIES:])


def carry_counters(previous: Any) -> dict[str, Any]:
    """The valid entries of a previous status document's ``counters`` (at most :data:`COUNTER_QUERIES`), for
    the starting driver to continue: garbage is left out."""
    if not isinstance(previous, dict):
        return {}
    kept = {str(k): valid_counters(v) for k, v in previous.items()}
    return dict([(k, v) for k, v in kept.items() if v is not None][-COUNTER_QUERIES:])


def read_status(storage: ControlStorage, paths: ControlPaths) -> StatusDocument | None:
    """The current status document, ``None`` if none was written yet; :class:`ControlFileError` if
    unreadable, :class:`StorageError` if it cannot be read."""
    data = storage.read_bytes(paths.status)
    return None if data is None else StatusDocument.from_json(paths.status, data)


def write_status(storage: ControlStorage, paths: ControlPaths, doc: StatusDocument) -> None:
    storage.write_atomic(paths.status, doc.to_json())


__all__ = [
    "ControlFileError", "ControlPaths", "DriverRecord", "Lease", "LeaseHeldError", "LeaseLostError",
    "ProcessIdentity", "QueryStatus", "StatusDocument", "StorageError", "acquire_lease", "carry_counters",
    "carry_progress", "count_report", "valid_counters",
    "json_object_or_none", "progress_counting_fields",
    "marker_present", "parse_json", "parse_json_object",
    "new_run_id", "process_alive", "process_start_time", "read_driver_record",
    "read_lease", "read_marker", "read_status", "release_lease", "renew_lease", "request_stop", "write_marker",
    "write_status",
]
