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

from airflow_streaming.control.storage import ControlStorage

SCHEMA_VERSION = 1

#: Driver exit codes (the spark-submit process exits with the Python driver's code).
EXIT_GRACEFUL = 0
EXIT_QUERY_FAILED = 3
EXIT_STARTUP_FAILED = 4
EXIT_LEASE_HELD = 5
EXIT_REASONS = {
    EXIT_GRACEFUL: "graceful stop",
    EXIT_QUERY_FAILED: "query failed",
    EXIT_STARTUP_FAILED: "startup failed",
    EXIT_LEASE_HELD: "another driver holds the stream's lease",
}

#: Driver states written in the status document.
STARTING, RUNNING, STOPPING, STOPPED, FAILED = "STARTING", "RUNNING", "STOPPING", "STOPPED", "FAILED"
TERMINAL_STATES = frozenset({STOPPED, FAILED})

#: How many progress entries per query the status document keeps (Spark keeps 100).
RECENT_PROGRESS_LIMIT = 20


def new_run_id() -> str:
    """A sortable, unique id for one submission of a stream."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


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
    def driver(self) -> str:
        return f"{self.root}/driver.json"

    def log(self, run_id: str) -> str:
        return f"{self.root}/logs/{run_id}.log"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, indent=1, sort_keys=True, default=str).encode("utf-8")


class ControlFileError(ValueError):
    """A control file exists but cannot be understood; the message names the file."""


def _loads(path: str, data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ControlFileError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise ControlFileError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


# --------------------------------------------------------------------------- run marker


def write_marker(storage: ControlStorage, paths: ControlPaths, run_id: str, version: str) -> None:
    """Create the run marker (the driver keeps running while it exists)."""
    storage.write_atomic(paths.marker, _dumps({"run_id": run_id, "version": version, "created_at": time.time()}))


def read_marker(storage: ControlStorage, paths: ControlPaths) -> dict[str, Any] | None:
    """The run marker's content (``run_id``, ``version``), ``None`` if absent or unreadable."""
    data = storage.read_bytes(paths.marker)
    try:
        return None if data is None else _loads(paths.marker, data)
    except ControlFileError:
        return None


def marker_present(storage: ControlStorage, paths: ControlPaths) -> bool:
    """Whether the run marker exists (its absence is a graceful-stop request)."""
    return storage.exists(paths.marker)


def request_stop(storage: ControlStorage, paths: ControlPaths) -> bool:
    """Ask the driver to stop gracefully by removing the run marker; return whether it existed."""
    return storage.delete(paths.marker)


# --------------------------------------------------------------------------- process identity


def process_start_time(pid: int) -> float | None:
    """Start time of a local process in seconds since boot, or ``None`` if it does not exist (or is a zombie).

    Used with the pid to tell a live driver from a recycled pid. Boot-relative on purpose: the
    epoch-based boot time (``btime``) moves when the wall clock is adjusted, which would make a live
    driver look recycled.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode()
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] in ("Z", "X"):
            return None
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def process_group_members(pgid: int) -> list[int]:
    """Live (non-zombie) local processes of process group ``pgid`` (a driver's JVM and Python children)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def process_alive(pid: int | None, start_time: float | None = None, host: str | None = None) -> bool:
    """Whether a local process is alive and (when ``start_time`` is given) is the same process.

    A process on another host cannot be checked here and counts as alive.
    """
    if host is not None and host != socket.gethostname():
        return True
    if not pid:
        return False
    actual = process_start_time(pid)
    if actual is None:
        return False
    return start_time is None or abs(actual - start_time) < 0.05


# --------------------------------------------------------------------------- lease


@dataclass(frozen=True)
class Lease:
    """Who runs a stream right now. A lease is stale when its holder is provably gone:

    - same host: the holder pid is dead or was recycled (start time differs);
    - other host: it was not renewed for ``ttl`` seconds.
    """

    run_id: str
    pid: int
    pid_start_time: float | None
    host: str
    acquired_at: float
    renewed_at: float
    ttl: float

    def is_stale(self, now: float | None = None) -> bool:
        if self.host == socket.gethostname():
            return not process_alive(self.pid, self.pid_start_time)
        return (now or time.time()) - self.renewed_at > self.ttl

    def to_json(self) -> bytes:
        return _dumps(asdict(self))

    @classmethod
    def from_json(cls, path: str, data: bytes) -> Lease:
        raw = _loads(path, data)
        try:
            return cls(**{k: raw[k] for k in cls.__dataclass_fields__})
        except KeyError as exc:
            raise ControlFileError(f"{path}: lease is missing field {exc}") from exc


class LeaseHeldError(RuntimeError):
    """Another live driver holds the stream's lease."""

    def __init__(self, lease: Lease):
        self.lease = lease
        super().__init__(
            f"stream is already run by driver pid {lease.pid} on {lease.host} (run {lease.run_id}, "
            f"lease renewed {time.time() - lease.renewed_at:.0f}s ago); stop it first"
        )


def read_lease(storage: ControlStorage, paths: ControlPaths) -> Lease | None:
    data = storage.read_bytes(paths.lease)
    return None if data is None else Lease.from_json(paths.lease, data)


TAKEOVER_LOCK_STALE_SECONDS = 30.0


def take_over_stale(storage: ControlStorage, path: str, judged_stale: bytes | None) -> None:
    """Delete the file at ``path`` that we judged stale, unless someone replaced it meanwhile.

    The read-compare-delete runs under an exclusive ``<path>.takeover`` lock, so two processes that
    both found the same stale file cannot both delete-and-recreate it. A takeover lock older than
    ``TAKEOVER_LOCK_STALE_SECONDS`` (its taker died mid-takeover) is removed. Used for the driver
    lease and for the lifecycle lock.
    """
    lock = path + ".takeover"
    if not storage.create_exclusive(lock, _dumps({"pid": os.getpid(), "host": socket.gethostname(), "at": time.time()})):
        try:
            held_since = float(_loads(lock, storage.read_bytes(lock) or b"{}").get("at", 0))
        except (ControlFileError, ValueError):
            held_since = 0.0
        if time.time() - held_since > TAKEOVER_LOCK_STALE_SECONDS:
            storage.delete(lock)
        time.sleep(0.05)
        return
    try:
        if storage.read_bytes(path) == judged_stale:
            storage.delete(path)
    finally:
        storage.delete(lock)


def acquire_lease(storage: ControlStorage, paths: ControlPaths, run_id: str, ttl: float) -> Lease:
    """Take the stream's lease for this process, taking over a stale one; raise :class:`LeaseHeldError`.

    Rule: a lease is taken over only when it is stale (see :class:`Lease`); the takeover itself is
    serialized by :func:`take_over_stale`, so at most one driver ever holds the lease.
    """
    deadline = time.monotonic() + 2 * TAKEOVER_LOCK_STALE_SECONDS
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
            current = None  # unreadable lease: treated as stale
        if current is not None and not current.is_stale():
            raise LeaseHeldError(current)
        take_over_stale(storage, paths.lease, raw)
    raise RuntimeError(f"could not acquire {paths.lease}: its takeover lock stayed held")


class LeaseLostError(RuntimeError):
    """The lease file no longer names this driver: another driver took the stream over."""


def renew_lease(storage: ControlStorage, paths: ControlPaths, lease: Lease) -> Lease:
    """Refresh ``renewed_at``; raise :class:`LeaseLostError` if another driver holds the lease now."""
    try:
        current = read_lease(storage, paths)
    except ControlFileError:
        current = None
    if current is None or current.run_id != lease.run_id or current.pid != lease.pid:
        raise LeaseLostError(
            f"{paths.lease} now names {current.run_id + ' pid ' + str(current.pid) if current else 'nobody'}, "
            f"not this driver (run {lease.run_id} pid {lease.pid})"
        )
    renewed = Lease(**{**asdict(lease), "renewed_at": time.time()})
    storage.write_atomic(paths.lease, renewed.to_json())
    return renewed


def release_lease(storage: ControlStorage, paths: ControlPaths, lease: Lease) -> None:
    """Delete the lease if this holder still owns it."""
    try:
        current = read_lease(storage, paths)
    except ControlFileError:
        current = None
    if current is not None and current.run_id == lease.run_id and current.pid == lease.pid:
        storage.delete(paths.lease)


# --------------------------------------------------------------------------- submission record


@dataclass(frozen=True)
class DriverRecord:
    """What the deployer knows about one submission (written to ``driver.json``)."""

    run_id: str
    stream: str
    version: str
    application: str
    submit_pid: int
    submit_pid_start_time: float | None
    host: str
    command: str
    """The spark-submit command line with secrets masked."""
    log_path: str
    submitted_at: float
    checkpoint_location: str

    def alive(self) -> bool:
        return process_alive(self.submit_pid, self.submit_pid_start_time, self.host)

    def to_json(self) -> bytes:
        return _dumps(asdict(self))

    @classmethod
    def from_json(cls, path: str, data: bytes) -> DriverRecord:
        raw = _loads(path, data)
        try:
            return cls(**{k: raw[k] for k in cls.__dataclass_fields__})
        except KeyError as exc:
            raise ControlFileError(f"{path}: driver record is missing field {exc}") from exc


def read_driver_record(storage: ControlStorage, paths: ControlPaths) -> DriverRecord | None:
    data = storage.read_bytes(paths.driver)
    return None if data is None else DriverRecord.from_json(paths.driver, data)


# --------------------------------------------------------------------------- status document


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
    schema: int = SCHEMA_VERSION

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def last_batch_id(self) -> int | None:
        ids = [q.last_batch_id for q in self.queries if q.last_batch_id is not None]
        return max(ids) if ids else None

    def to_json(self) -> bytes:
        return _dumps(asdict(self))

    @classmethod
    def from_json(cls, path: str, data: bytes) -> StatusDocument:
        raw = _loads(path, data)
        if raw.get("schema") != SCHEMA_VERSION:
            raise ControlFileError(f"{path}: unsupported status schema {raw.get('schema')!r}")
        try:
            queries = [QueryStatus(**q) for q in raw.pop("queries", [])]
            return cls(queries=queries, **{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})
        except TypeError as exc:
            raise ControlFileError(f"{path}: malformed status document ({exc})") from exc


def read_status(storage: ControlStorage, paths: ControlPaths) -> StatusDocument | None:
    """The current status document, ``None`` if none was written yet; :class:`ControlFileError` if unreadable."""
    data = storage.read_bytes(paths.status)
    return None if data is None else StatusDocument.from_json(paths.status, data)


def write_status(storage: ControlStorage, paths: ControlPaths, doc: StatusDocument) -> None:
    storage.write_atomic(paths.status, doc.to_json())
