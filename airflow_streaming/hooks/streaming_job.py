"""I/O for one managed stream: its control files, its driver (through a deploy target), stop and kill.

Where the driver runs is a :class:`~airflow_streaming.targets.base.DriverTarget` chosen from the
spec (``airflow_streaming.targets.target_for``); where the control files live is a
:class:`~airflow_streaming.control.storage.ControlStorage` chosen from the control location's
scheme. This hook never asks which one it is.

Every submission and every stop goes through the stream's lifecycle lock (:meth:`guarded`): a
caller either passes the lock it holds (the lifecycle runner does) or the hook takes it for the
length of the call, and refuses while another action holds it or an unfinished action is recorded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow.sdk import BaseHook

from airflow_streaming.checkpoint.batches import BatchPosition, read_batch_position
from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlFileError, ControlPaths, DriverRecord, StatusDocument
from airflow_streaming.control.storage import ControlStorage, StorageError, retrying, storage_for
from airflow_streaming.exceptions import (
    ApplicationNotFoundError,
    DriverStartError,
    JavaNotFoundError,
    StreamAlreadyRunningError,
    StreamingError,
    StreamStateUnknownError,
)
from airflow_streaming.lifecycle.lock import LifecycleLock
from airflow_streaming.redaction import mask_spec, redact, register_secrets, secret_values, split_conf
from airflow_streaming.spec import StreamSpec
from airflow_streaming.targets import target_for, target_for_record
from airflow_streaming.targets.base import DriverTarget, LaunchPlan, Liveness
from airflow_streaming.targets.local import reap_children

log = logging.getLogger(__name__)

LAUNCHER = str(Path(__file__).resolve().parents[2] / "spark_jobs" / "launch.py")
JOBS_DIR = Path(__file__).resolve().parents[2] / "spark_jobs" / "jobs"
JAVA_HINT = "install Java 17 (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless) or set JAVA_HOME"
KILL_GRACE_SECONDS = 10.0
#: Spark conf every managed driver gets unless the spec overrides it: Spark's own streaming metrics
#: (Dropwizard gauges per query) exposed for Prometheus at <driver UI>/metrics/prometheus.
DEFAULT_SPARK_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.metricsEnabled": "true",
    "spark.metrics.conf.*.sink.prometheusServlet.class": "org.apache.spark.metrics.sink.PrometheusServlet",
    "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
}
DRIVER_EXIT_GRACE_SECONDS = 30.0
RECORD_NAME = "lifecycle.json"


def check_java() -> str:
    """Return the java binary spark-submit will use; raise :class:`JavaNotFoundError` if none (or < 17)."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={java_home} has no bin/java" if java_home else "no 'java' on PATH"
        raise JavaNotFoundError(f"Spark needs Java 17: {where}; {JAVA_HINT}")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):
        major = int(match.group(2))
    if major < 17:
        raise JavaNotFoundError(f"Spark 4 needs Java 17 or newer, {java} is version {major or 'unknown'}; {JAVA_HINT}")
    return java


@dataclass(frozen=True)
class StopReport:
    """How a stop went."""

    stream: str
    was_running: bool
    graceful: bool
    """The driver exited by itself after the stop request (no kill)."""
    killed: bool
    exit_code: int | None
    position: BatchPosition | None
    """The checkpoint's last planned/committed batch after the stop."""
    seconds: float
    note: str | None = None
    """What else a person should know (e.g. why nothing was signalled)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "was_running": self.was_running,
            "graceful": self.graceful,
            "killed": self.killed,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            **(self.position.to_dict() if self.position else {"last_committed_batch": None, "clean": None}),
            **({"note": self.note} if self.note else {}),
        }


def storage_path(location: str) -> str:
    """The storage-local path of a checkpoint location or a Hadoop-qualified path (``file:/x`` -> ``/x``)."""
    parsed = urlparse(location)
    return parsed.path if parsed.scheme else location


class StreamingJobHook(BaseHook):
    """Submit, watch, stop and kill the driver of one stream described by a :class:`StreamSpec`.

    Connections: the spec's ``conn_id`` (a ``spark`` connection of the Spark provider: master as host
    and port, ``deploy-mode``, ``queue``, ``namespace``, ``spark-binary`` extras), used when the spec
    sets no ``master``; and ``storage_conn_id`` (a ``webhdfs`` connection of the HDFS provider) for
    ``hdfs://`` / ``webhdfs://`` control and checkpoint locations.

    :param spec: the stream.
    :param storage: control storage (default: chosen from the control location's scheme).
    :param target: where the driver runs (default: chosen from the spec's master and deploy mode).
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"
    hook_name = "Spark Structured Streaming"

    def __init__(self, spec: StreamSpec, storage: ControlStorage | None = None, target: DriverTarget | None = None):
        super().__init__()
        self.spec = spec
        self.conn_id = spec.conn_id
        default_storage, control_dir = storage_for(spec.control_dir, spec.storage_conn_id)
        self.storage = storage or default_storage
        self.paths = ControlPaths(control_dir)
        checkpoint_storage, self.checkpoint_path = storage_for(spec.checkpoint_location, spec.storage_conn_id)
        self.checkpoint_storage = storage or checkpoint_storage
        self._target = target
        self._resolved: StreamSpec | None = None

    @property
    def remote_storage(self) -> bool:
        """Whether the control files live on remote storage (HDFS...): the driver paces its requests there
        (see ``contract.heartbeat_seconds``) and a local target keeps its driver log on this host."""
        from airflow_streaming.control.local import LocalStorage

        return not isinstance(self.storage, LocalStorage)

    def storage_of(self, location: str) -> tuple[ControlStorage, str]:
        """The storage holding ``location`` (a checkpoint, a file sink's output) and the path inside it,
        through the spec's storage connection."""
        return storage_for(location, self.spec.storage_conn_id)

    def driver_log_path(self, run_id: str) -> str:
        """Where the submitting host writes a run's spark-submit output: ``logs/<run_id>.log`` in the control
        dir on local storage; a local file on remote storage (a process's output cannot go to HDFS):
        ``$AIRFLOW_STREAMING_LOG_DIR`` (default ``<tmp>/airflow-streaming-logs``) ``/<stream>/<run_id>.log``."""
        if not self.remote_storage:
            return self.paths.log(run_id)
        base = os.environ.get("AIRFLOW_STREAMING_LOG_DIR") or os.path.join(tempfile.gettempdir(),
                                                                           "airflow-streaming-logs")
        return os.path.join(base, self.spec.name, f"{run_id}.log")

    @property
    def resolved_spec(self) -> StreamSpec:
        """The spec with master, deploy mode and submit options from its Spark connection when it sets no
        master itself."""
        if self._resolved is None:
            self._resolved = self.spec if self.spec.master is not None else self._spec_with_connection()
        return self._resolved

    @property
    def target(self) -> DriverTarget:
        """Where the driver runs: from the (resolved) spec's master and deploy mode."""
        if self._target is None:
            self._target = target_for(self.resolved_spec, self.storage, self.paths)
        return self._target

    def target_of(self, record: DriverRecord) -> DriverTarget:
        """The target that ran ``record``: the stream's own when it is of the record's kind, else one rebuilt
        from the record's handle (no Spark connection needed; a driver started under another deploy target
        is still checked where it runs)."""
        if self._target is not None and self._target.kind == record.target:
            return self._target
        return target_for_record(record, self.storage, self.paths, dict(self.spec.cluster))

    def _spec_with_connection(self) -> StreamSpec:
        """The spec with master, deploy mode and submit options taken from its ``spark`` connection."""
        from airflow.sdk import BaseHook

        try:
            conn = BaseHook.get_connection(self.spec.conn_id)
        except Exception as exc:  # noqa: BLE001 - AirflowNotFoundException across Airflow versions
            raise ValueError(
                f"master: the spec sets no master and the Spark connection {self.spec.conn_id!r} cannot be "
                f"loaded ({exc}); set `master: local[2]` in the spec or define the connection "
                f"(e.g. AIRFLOW_CONN_{self.spec.conn_id.upper()}='{{\"conn_type\": \"spark\", \"host\": \"local[2]\"}}')"
            ) from exc
        extra = conn.extra_dejson or {}
        master = (conn.host or "local[2]") + (f":{conn.port}" if conn.port else "")
        cluster = dict(self.spec.cluster)
        if extra.get("queue"):
            cluster.setdefault("queue", extra["queue"])
        if extra.get("namespace"):
            cluster.setdefault("namespace", extra["namespace"])
        if extra.get("spark-binary"):
            cluster.setdefault("spark_binary", extra["spark-binary"])
        return dataclasses.replace(self.spec, master=master, deploy_mode=self.spec.deploy_mode or extra.get("deploy-mode"),
                                   cluster=cluster)

    # ------------------------------------------------------------------ reading
    def _read(self, what: str, fn: Any) -> Any:
        return retrying(fn, f"reading {what} of {self.spec.name}")

    def status(self) -> StatusDocument | None:
        """The driver's status document (``None`` before the first driver wrote one).

        :class:`ControlFileError` if it is garbage, :class:`StorageError` if it cannot be read."""
        return self._read("status.json", lambda: contract.read_status(self.storage, self.paths))

    def driver_record(self) -> DriverRecord | None:
        """``driver.json`` (``None``: never submitted); errors as for :meth:`status`."""
        return self._read("driver.json", lambda: contract.read_driver_record(self.storage, self.paths))

    @property
    def deployed_path(self) -> str:
        return f"{self.paths.root}/deployed.json"

    def deployed(self) -> dict[str, Any] | None:
        """``{"run_id", "at", "spec"}`` of the last submission (the spec as deployed), ``None`` if never.

        :class:`ControlFileError` naming the file when it is unreadable: the deployed spec is what
        restarts and rollbacks start, so garbage is never read as "never deployed"."""
        return self._read("deployed.json", lambda: self.deployed_at(self.storage, self.deployed_path))

    @staticmethod
    def deployed_at(storage: ControlStorage, path: str) -> dict[str, Any] | None:
        """Parse a ``deployed.json`` (see :meth:`deployed`)."""
        raw = storage.read_bytes(path)
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ControlFileError(f"{path} is not valid JSON ({exc}); it records the deployed spec: restore it "
                                   "from a backup or from the stream's history.json, or move it aside and deploy "
                                   "the stream again") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("spec"), dict) \
                or not isinstance(doc.get("run_id"), (str, type(None))):  # it goes into lifecycle.json
            raise ControlFileError(f"{path}: expected {{'run_id', 'at', 'spec'}}, got {str(doc)[:100]}; move it "
                                   "aside and deploy the stream again")
        return doc

    def checkpoint_locations(self) -> list[str]:
        """The checkpoint roots the stream's query/queries really use.

        The driver records each query's resolved checkpoint (a user script may set its own
        ``checkpointLocation`` or a ``queryName`` under the spec's location); without a record, the
        spec's ``checkpoint_location``."""
        try:
            doc = self.status()
        except (ControlFileError, StorageError):
            doc = None
        recorded = [self._normalized_location(c) for c in (doc.checkpoints() if doc is not None else [])]
        return sorted(set(recorded)) or [self.spec.checkpoint_location]

    def _normalized_location(self, location: str) -> str:
        """A checkpoint root as Spark records it (``file:/x``, ``hdfs://nn:8020/x``) in the spec's form."""
        ours = self.spec.checkpoint_location
        if storage_path(location).rstrip("/") == storage_path(ours).rstrip("/"):
            return ours
        parsed = urlparse(location)
        return parsed.path if parsed.scheme == "file" else location

    def batch_position(self, checkpoint: str | None = None) -> BatchPosition:
        """Last planned/committed batch of the (first) checkpoint the stream uses."""
        location = checkpoint or self.checkpoint_locations()[0]
        return read_batch_position(self.checkpoint_storage, storage_path(location))

    def checkpoint_exists(self, checkpoint: str | None = None) -> bool:
        location = checkpoint or self.checkpoint_locations()[0]
        return self.checkpoint_storage.exists(storage_path(location))

    def lifecycle_record(self) -> dict[str, Any] | None:
        """``lifecycle.json`` as a dict (``None`` if absent); :class:`ControlFileError` if garbage."""
        path = f"{self.paths.root}/{RECORD_NAME}"
        raw = self._read(RECORD_NAME, lambda: self.storage.read_bytes(path))
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ControlFileError(f"{path} is not valid JSON ({exc}); it is the record of the stream's last "
                                   f"lifecycle action: inspect it, then move it aside (mv {path} {path}.bad) "
                                   "to start over") from exc
        if not isinstance(doc, dict):
            raise ControlFileError(f"{path}: expected a JSON object, got {type(doc).__name__}; move it aside "
                                   f"(mv {path} {path}.bad) to start over")
        return doc

    # ------------------------------------------------------------------ liveness
    def driver_liveness(self) -> tuple[Liveness, str]:
        """Whether a driver of this stream runs: from the lease and the deploy target, with why.

        UNKNOWN when it cannot be told (a lease or record that cannot be read, a cluster that does not
        answer): callers never treat it as "not running"."""
        reap_children()
        try:
            lease = self._read("lease.json", lambda: contract.read_lease(self.storage, self.paths))
        except StorageError as exc:
            return Liveness.UNKNOWN, f"the lease cannot be read: {exc}"
        except ControlFileError as exc:
            log.warning("ignoring an unreadable lease (no driver can renew it): %s", exc)
            lease = None
        if lease is not None and not lease.is_stale():
            exited = self._lease_holder_exited(lease)
            if exited is None:
                return Liveness.ALIVE, f"driver pid {lease.pid} on {lease.host} holds the lease (run {lease.run_id})"
            return Liveness.GONE, exited
        try:
            record = self.driver_record()
        except StorageError as exc:
            return Liveness.UNKNOWN, f"the driver record cannot be read: {exc}"
        except ControlFileError as exc:
            return Liveness.UNKNOWN, f"the driver record is unreadable: {exc}"
        if record is None:
            return Liveness.GONE, "never submitted"
        state = self.target_of(record).state(record)
        if state.liveness == Liveness.UNKNOWN and (lease is None or lease.is_stale()):
            # Another host's client-mode driver: its lease is the evidence (renewed, or it stopped itself).
            if lease is not None or self._terminal_status_of(record.run_id):
                return Liveness.GONE, f"{state.detail}; its lease is {'stale' if lease else 'released'}"
        return state.liveness, state.detail

    def _lease_holder_exited(self, lease: contract.Lease) -> str | None:
        """Why the driver holding a fresh ``lease`` is known to have exited, ``None`` if it is not.

        On the lease's own host a lease is stale as soon as its pid is gone; any other host has to wait
        for its ttl (it cannot see that pid). A driver killed through its cluster manager leaves its
        lease behind, so without this, only the host the driver ran on would see at once that it is
        gone; every other host (another Airflow worker, a triggerer) would call the stream running - and
        refuse a restart - for up to the lease's ttl. The cluster manager's word counts only when it
        reports that the recorded driver of the lease's very run *exited* (``DriverState.exited``: the
        node confirmed the process ended), never when it merely lost track of it."""
        if lease.host == _hostname():
            return None  # Lease.is_stale already checked the pid
        try:
            record = self.driver_record()
        except (ControlFileError, StorageError):
            return None
        if record is None or record.run_id != lease.run_id:
            return None
        state = self.target_of(record).state(record)
        if not (state.gone and state.exited):
            return None
        age = max(0.0, time.time() - lease.renewed_at)
        return (f"{state.detail}; the lease it held (pid {lease.pid} on {lease.host}, renewed {age:.0f}s ago) is "
                f"left over: a next driver on {lease.host} takes it over at once, one on another host after its ttl "
                f"({lease.ttl:.0f}s)")

    def _terminal_status_of(self, run_id: str) -> bool:
        try:
            doc = self.status()
        except (ControlFileError, StorageError):
            return False
        return doc is not None and doc.run_id == run_id and doc.is_terminal

    def alive(self, record: DriverRecord) -> bool:
        """Whether the driver of ``record`` is alive (per its target; UNKNOWN counts as alive)."""
        return not self.target_of(record).state(record).gone

    def running_driver(self) -> str | None:
        """A description of the live driver of this stream, ``None`` if none runs.

        Raises :class:`StreamStateUnknownError` when that cannot be told (see :meth:`driver_liveness`)."""
        liveness, detail = self.driver_liveness()
        if liveness == Liveness.UNKNOWN:
            raise StreamStateUnknownError(f"cannot tell whether stream {self.spec.name!r} runs: {detail}")
        return detail if liveness == Liveness.ALIVE else None

    def processes_of_run(self, run_id: str) -> list[str]:
        """Drivers (processes, applications, pods) of ``run_id`` that exist now: tells whether a
        submission happened even if its record was never written."""
        return self.target.find(run_id)

    def log_tail(self, run_id: str, lines: int = 40) -> str:
        """The last lines of a run's driver output, with secrets masked."""
        try:
            record = self.driver_record()
        except (ControlFileError, StorageError):
            record = None
        try:
            if record is not None and record.run_id == run_id:
                text = self.target_of(record).log_tail(record, lines)
            else:
                from airflow_streaming.control.local import LocalStorage

                logs = LocalStorage() if self.remote_storage else self.storage
                text = "\n".join((logs.read_text(self.driver_log_path(run_id)) or "").splitlines()[-lines:])
        except StorageError as exc:
            text = f"(the driver log cannot be read: {exc})"
        return self.redact(text)

    def redact(self, text: str) -> str:
        """``text`` with the spec's secret conf values and every known secret pattern masked
        (:func:`airflow_streaming.redaction.redact`, Airflow's masker included)."""
        return redact(text, secret_values(self.spec.spark_conf))

    def health(self, thresholds: Any = None, now: float | None = None) -> Any:
        """The stream's :class:`~airflow_streaming.health.verdict.HealthVerdict` right now.

        Anything that cannot be read (status, record, lease, the cluster) gives UNKNOWN with the reason,
        never FAILED or STOPPED; garbage in the status document likewise."""
        from airflow_streaming.health.thresholds import HealthThresholds
        from airflow_streaming.health.verdict import HealthState, HealthVerdict, Reason, evaluate

        reap_children()
        unreadable = None
        doc = None
        doc_dict = None
        try:
            raw = self._read("status.json", lambda: self.storage.read_bytes(self.paths.status))
            if raw is not None:
                doc = contract.StatusDocument.from_json(self.paths.status, raw)  # validates
                doc_dict = json.loads(raw)  # the same content as a dict, without a deep copy of asdict()
        except (ControlFileError, StorageError) as exc:
            unreadable = str(exc)
        alive: bool | None = None
        liveness_note = None
        try:
            record = self.driver_record()
        except (ControlFileError, StorageError) as exc:
            record = None
            unreadable = unreadable or f"driver record: {exc}"
        if record is not None:
            state = self.target_of(record).state(record)
            alive = None if state.liveness == Liveness.UNKNOWN else state.alive
            if state.cluster_state is not None or state.gone:
                liveness_note = state.detail
        if doc is not None and record is not None and doc.run_id != record.run_id:
            doc = doc_dict = None  # a status of a previous run says nothing about the current submission
        cluster = self.cluster_app_state(doc.app_id if doc is not None else None)
        if cluster is not None:
            liveness_note = f"standalone master reports app {cluster.app_id} {cluster.state or 'unknown'}"
            if cluster.active is False:
                alive = False  # the cluster ended the application, whatever the local process does
            elif cluster.active and alive is None:
                alive = True
        try:
            verdict = evaluate(
                None if doc is None else doc_dict, now=time.time() if now is None else now,
                driver_alive=alive, trigger_interval=self.spec.trigger_interval,
                heartbeat_interval=contract.heartbeat_seconds(self.spec.heartbeat_interval, self.remote_storage),
                thresholds=thresholds or HealthThresholds.from_mapping(self.spec.health), unreadable=unreadable,
                liveness_note=liveness_note)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # garbage that passed validation
            verdict = HealthVerdict(self.spec.name, HealthState.UNKNOWN, (Reason(
                "STATUS_UNREADABLE", f"{self.paths.status} has unexpected content ({type(exc).__name__}: {exc})"),))
        if verdict.stream is None:
            verdict = dataclasses.replace(verdict, stream=self.spec.name)
        return verdict

    def cluster_app_state(self, app_id: str | None) -> Any:
        """The standalone master's view of the stream's application (``None`` if not applicable/reachable)."""
        from airflow_streaming.hooks.spark_master import app_state, master_ui_url

        ui = master_ui_url(self.spec.master or "", self.spec.master_ui_url)
        if ui is None or not app_id:
            return None
        try:
            return app_state(ui, app_id)
        except (OSError, ValueError) as exc:
            log.warning("Spark master %s not reachable for liveness of %s: %s", ui, app_id, exc)
            return None

    # ------------------------------------------------------------------ the guard
    @contextlib.contextmanager
    def guarded(self, action: str, lock: LifecycleLock | None = None, owner: str | None = None) -> Iterator[LifecycleLock]:
        """Hold the stream's lifecycle lock for ``action``: the caller's ``lock`` (checked), or one taken
        here for the length of the block. A lock taken here also refuses while an unfinished lifecycle
        action is recorded (it must be finished first)."""
        if lock is not None:
            lock.ensure()
            yield lock
            return
        taken = LifecycleLock.acquire(self.storage, self.paths.root, action, owner)
        try:
            self.refuse_if_unfinished(action)
            yield taken
        finally:
            taken.release()

    def refuse_if_unfinished(self, action: str) -> None:
        """Raise :class:`StreamingError` when ``lifecycle.json`` records an action that has not ended."""
        from airflow_streaming.lifecycle.record import TERMINAL, Step, unfinished_message

        record = self.lifecycle_record()
        if record is None:
            return
        step = record.get("step")
        if step in {s.value for s in TERMINAL} or step not in {s.value for s in Step}:
            return
        raise StreamingError(unfinished_message(self.spec.name, str(record.get("action")), str(record.get("id")),
                                                (record.get("to_spec") or {}).get("version"), str(step), action))

    # ------------------------------------------------------------------ submitting
    def application_argument(self) -> list[str]:
        """``--job NAME`` or ``--script PATH``; :class:`ApplicationNotFoundError` if it is missing."""
        app = self.spec.application
        if self.spec.is_bundled:
            if not (JOBS_DIR / f"{app}.py").is_file():
                raise ApplicationNotFoundError(f"bundled job {app!r} is not installed ({JOBS_DIR / app}.py missing)")
            return ["--job", app]
        if self.target.kind == "local" and not os.path.isfile(app):
            raise ApplicationNotFoundError(f"application file {app} does not exist; nothing was submitted")
        return ["--script", app]

    def preflight(self) -> None:
        """Refuse, before anything is written or started, a missing application or (locally) Java."""
        self.application_argument()
        if self.target.kind == "local":
            check_java()

    def launch_plan(self, run_id: str, standby: bool = False, gate: bool | None = None) -> LaunchPlan:
        """What the target starts for ``run_id``: the runtime's arguments and the conf (secrets apart).
        ``gate`` not ``None``: a gate driver (``True``: with the Spark dry run) - see :meth:`submit_gate`."""
        spec = self.spec
        runtime_args = [
            "--stream", spec.name, "--version", spec.version, "--run-id", run_id,
            "--control-dir", spec.control_dir, "--checkpoint", spec.checkpoint_location,
            *self.application_argument(),
            "--trigger-seconds", str(spec.trigger_interval), "--heartbeat-seconds", str(spec.heartbeat_interval),
            "--lease-ttl", str(lease_ttl(spec)),
            *(["--standby"] if standby else []),
            *(["--gate-only", *([] if gate else ["--gate-no-dry-run"])] if gate is not None else []),
            "--", *spec.application_args,
        ]
        conf, secret = split_conf({**DEFAULT_SPARK_CONF, **spec.spark_conf})
        register_secrets(secret.values())
        return self.target.plan(self.resolved_spec, run_id, LAUNCHER, runtime_args, conf, secret,
                                self.driver_log_path(run_id), standby)

    def command_for(self, run_id: str) -> tuple[list[str], str]:
        """The spark-submit command a local/client submission of ``run_id`` runs, and its one-line record
        (for inspection: sensitive conf never appears, it travels in a 0600 properties file)."""
        from airflow_streaming.targets.submit_command import masked_command, spark_submit_argv

        plan = self.launch_plan(run_id)
        argv = spark_submit_argv(plan, self.target.settings.get("spark_binary", "spark-submit"),
                                 "<0600 properties file>" if plan.secret_conf else None)
        return argv, masked_command(argv)

    def _environment(self) -> dict[str, str]:
        env: dict[str, str] = {}
        env["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
        env["PYSPARK_DRIVER_PYTHON"] = os.environ.get("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
        bindir = os.path.dirname(sys.executable)
        path = os.environ.get("PATH", "")
        if not shutil.which("spark-submit", path=path) and os.path.exists(os.path.join(bindir, "spark-submit")):
            env["PATH"] = bindir + os.pathsep + path
        if (self.spec.master or "").startswith("local"):
            env["SPARK_LOCAL_IP"] = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
        return env

    def submit(self, run_id: str | None = None, standby: bool = False, lock: LifecycleLock | None = None,
               owner: str | None = None) -> DriverRecord:
        """Start the stream's driver detached and return its record, under the lifecycle lock.

        Refuses (before anything is submitted) when a driver already runs the stream or that cannot be
        told, when another lifecycle action holds the lock or is unfinished, when the application is
        missing, or when Java is not usable. ``run_id`` lets a resumable caller choose (and record) the
        run id before submitting, so that it can later tell whether the submission happened
        (:meth:`processes_of_run`) instead of submitting twice.

        ``standby=True`` starts a *prepared* driver beside the running one: it builds its session and
        query, then waits - without touching the checkpoint, the lease or the status document - until
        :meth:`promote` names it in the run marker. Its record goes to ``standby-driver.json``.
        """
        self.preflight()
        with self.guarded("deploy", lock, owner) as held:
            if not standby:
                running = self.running_driver()
                if running:
                    raise StreamAlreadyRunningError(
                        f"stream {self.spec.name!r} is already running: {running}. Stop it before deploying again.")
            else:
                other = self.standby_record()
                if other is not None and other.run_id != run_id and self.processes_of_run(other.run_id):
                    raise StreamAlreadyRunningError(f"stream {self.spec.name!r} already has a standby driver "
                                                    f"(run {other.run_id})")
            run_id = run_id or contract.new_run_id()
            plan = self.launch_plan(run_id, standby=standby)
            plan = dataclasses.replace(plan, env={**self._environment(), **plan.env})
            self.storage.makedirs(self.paths.root)
            if not self.remote_storage:
                self.storage.makedirs(os.path.dirname(self.paths.log(run_id)))
            held.ensure()
            if not standby:
                contract.write_marker(self.storage, self.paths, run_id, self.spec.version)
            try:
                handle = self.target.submit(plan)
            except BaseException:
                if not standby:
                    self._remove_marker_of(run_id)
                raise
            record = DriverRecord(
                run_id=run_id, stream=self.spec.name, version=self.spec.version, application=self.spec.application,
                host=_hostname(), command=self.target.describe_command(plan), log_path=plan.log_path,
                submitted_at=time.time(), checkpoint_location=self.spec.checkpoint_location, target=self.target.kind,
                handle=handle)
            if standby:
                self.storage.write_atomic(self.paths.standby_driver, record.to_json())
            else:
                self._record_deployment(record)
            log.info("submitted stream %s %s%s to %s: run %s, %s, log %s", self.spec.name, self.spec.version,
                     " (standby)" if standby else "", self.target.kind, run_id, handle, plan.log_path)
            return record

    def submit_gate(self, run_id: str, lock: LifecycleLock, dry_run: bool = True) -> DriverRecord:
        """Start a *gate driver* on the stream's own target: a short driver that runs the compatibility gate
        of this spec (the candidate) against its checkpoint where the checkpoint and the job's dependencies
        are, writes ``{"id": run_id, "report" | "error"}`` to ``gate-report.json`` and exits
        (``spark_jobs/launch.py --gate-only``). It touches neither the checkpoint, the lease, the run marker
        nor the status document; its record goes to ``gate-driver.json`` (logs, kill). Under ``lock``."""
        self.preflight()
        with self.guarded("gate", lock) as held:
            plan = self.launch_plan(run_id, gate=dry_run)
            plan = dataclasses.replace(plan, name=f"{plan.name} gate",
                                       env={**self._environment(), **plan.env})
            self.storage.makedirs(self.paths.root)
            if not self.remote_storage:
                self.storage.makedirs(os.path.dirname(self.paths.log(run_id)))
            held.ensure()
            handle = self.target.submit(plan)
            record = DriverRecord(
                run_id=run_id, stream=self.spec.name, version=self.spec.version, application=self.spec.application,
                host=_hostname(), command=self.target.describe_command(plan), log_path=plan.log_path,
                submitted_at=time.time(), checkpoint_location=self.spec.checkpoint_location, target=self.target.kind,
                handle=handle)
            self.storage.write_atomic(self.paths.gate_driver, record.to_json())
            log.info("submitted the compatibility gate of %s %s to %s: run %s, %s, log %s", self.spec.name,
                     self.spec.version, self.target.kind, run_id, handle, plan.log_path)
            return record

    def gate_driver_record(self) -> DriverRecord | None:
        """The record of the last gate driver (:meth:`submit_gate`), if any."""
        data = self.storage.read_bytes(self.paths.gate_driver)
        return None if data is None else DriverRecord.from_json(self.paths.gate_driver, data)

    def _remove_marker_of(self, run_id: str) -> None:
        """Remove the run marker if it names ``run_id`` (a failed start must leave no marker behind)."""
        try:
            marker = contract.read_marker(self.storage, self.paths)
            if marker is not None and marker.get("run_id") == run_id:
                contract.request_stop(self.storage, self.paths)
        except StorageError as exc:
            log.error("could not remove the run marker of the failed run %s: %s", run_id, exc)

    def _record_deployment(self, record: DriverRecord) -> None:
        self.storage.write_atomic(self.paths.driver, record.to_json())
        self.storage.write_atomic(self.deployed_path, json.dumps(
            {"run_id": record.run_id, "at": record.submitted_at, "spec": mask_spec(self.spec.to_dict())},
            indent=1).encode())

    def standby_record(self) -> DriverRecord | None:
        data = self.storage.read_bytes(self.paths.standby_driver)
        return None if data is None else DriverRecord.from_json(self.paths.standby_driver, data)

    def standby_state(self, run_id: str) -> dict[str, Any] | None:
        """The standby driver's readiness (``state`` PREPARING / READY / FAILED / PROMOTED / EXPIRED)."""
        raw = self.storage.read_bytes(self.paths.standby)
        try:
            doc = json.loads(raw) if raw is not None else None
        except ValueError:
            return None
        return doc if isinstance(doc, dict) and doc.get("run_id") == run_id else None

    def promote(self, run_id: str, lock: LifecycleLock) -> DriverRecord:
        """Hand the stream to the prepared standby ``run_id``: it becomes the recorded driver and the run
        marker names it, which is its signal to take the lease and start. Only call this once no other
        driver runs (the lease would make it wait otherwise). Idempotent."""
        lock.ensure()
        record = self.standby_record()
        if record is None or record.run_id != run_id:
            raise DriverStartError(f"no standby driver record for run {run_id} in {self.paths.standby_driver}")
        self._record_deployment(record)
        contract.write_marker(self.storage, self.paths, run_id, self.spec.version)
        log.info("promoted standby run %s of %s %s", run_id, self.spec.name, self.spec.version)
        return record

    def wait_until_ready(self, record: DriverRecord, timeout: float | None = None, poll: float = 0.5,
                         lock: LifecycleLock | None = None) -> StatusDocument:
        """Wait until the run's query reports progress (or idles); raise :class:`DriverStartError` with the
        driver's own error if it dies first. On timeout the driver is stopped and killed. Either way a
        failed start leaves no run marker behind."""
        timeout = self.spec.startup_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            readiness = self.readiness(record)
            if readiness == "ready":
                return self._status_of_run(record.run_id)  # type: ignore[return-value]
            if readiness == "ended":
                # Let the driver exit and flush its last lines; never leave a failed driver behind.
                self.wait_gone(record, DRIVER_EXIT_GRACE_SECONDS)
                self._remove_marker_of(record.run_id)
                if not self.target_of(record).state(record).gone:
                    self.kill(record)
                final = self._status_of_run(record.run_id)
                raise DriverStartError(self._failure_message(record, final),
                                       error_class=(final.last_exception or {}).get("error_class") if final else None,
                                       exit_code=(final.exit or {}).get("code") if final else None)
            if time.monotonic() > deadline:
                self.kill(record)
                raise DriverStartError(
                    f"stream {record.stream!r} did not report progress within {timeout:.0f}s; the driver was "
                    f"stopped. Last driver output:\n{self.log_tail(record.run_id)}", timed_out=True
                )
            if lock is not None:
                lock.ensure()
            time.sleep(poll)

    def readiness(self, record: DriverRecord) -> str:
        """``ready`` (the run reported progress or idles), ``ended`` (it failed or exited first) or
        ``waiting`` - checked once, without waiting."""
        doc = self._status_of_run(record.run_id)
        if doc is not None and doc.ready and doc.state == contract.RUNNING:
            return "ready"
        if (doc is not None and doc.is_terminal) or self.target_of(record).state(record).gone:
            return "ended"
        return "waiting"

    def _status_of_run(self, run_id: str) -> StatusDocument | None:
        try:
            doc = self.status()
        except (ControlFileError, StorageError) as exc:
            log.warning("status of %s not readable (treated as not yet written): %s", self.spec.name, exc)
            return None
        return doc if doc is not None and doc.run_id == run_id else None

    def _failure_message(self, record: DriverRecord, doc: StatusDocument | None) -> str:
        head = f"driver of stream {record.stream!r} (run {record.run_id}) failed while starting"
        if doc is not None and doc.last_exception:
            err = doc.last_exception
            head += f": [{err.get('error_class')}] {self.redact(str(err.get('message')))}"
        if doc is not None and doc.exit:
            head += f" (exit code {doc.exit.get('code')}: {doc.exit.get('reason')})"
        return f"{head}\nLast driver output ({record.log_path}):\n{self.log_tail(record.run_id)}"

    # ------------------------------------------------------------------ stopping
    def request_stop(self) -> bool:
        """Remove the run marker: the driver stops at the next micro-batch boundary."""
        return contract.request_stop(self.storage, self.paths)

    def kill(self, record: DriverRecord, grace: float = KILL_GRACE_SECONDS) -> str:
        """Remove the marker and hard-kill the recorded driver through its target. Never raises;
        signals only what the target can prove is the recorded driver. Returns what was done."""
        try:
            contract.request_stop(self.storage, self.paths)
        except StorageError:
            log.exception("could not remove %s", self.paths.marker)
        try:
            outcome = self.target_of(record).kill(record, grace)
        except Exception as exc:  # noqa: BLE001 - kill paths log and never raise
            log.exception("kill of run %s failed", record.run_id)
            return f"kill of run {record.run_id} failed: {exc}"
        log.warning("kill of stream %s run %s: %s", self.spec.name, record.run_id, outcome)
        return outcome

    def wait_gone(self, record: DriverRecord, timeout: float, lock: LifecycleLock | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the recorded driver to be gone; return whether it is."""
        deadline = time.monotonic() + timeout
        while True:
            liveness = self.target_of(record).state(record).liveness
            if liveness == Liveness.GONE:
                return self.target_of(record).wait_gone(record, max(1.0, deadline - time.monotonic()))
            if liveness == Liveness.UNKNOWN and self._terminal_status_of(record.run_id) and not self._lease_held():
                return True
            if time.monotonic() > deadline:
                return False
            if lock is not None:
                lock.ensure()
            time.sleep(0.2)

    def _lease_held(self) -> bool:
        try:
            lease = contract.read_lease(self.storage, self.paths)
        except (ControlFileError, StorageError):
            return True
        return lease is not None and not lease.is_stale()

    def stop(self, timeout: float | None = None, kill_on_timeout: bool = True, lock: LifecycleLock | None = None,
             owner: str | None = None) -> StopReport:
        """Stop gracefully at a micro-batch boundary; after ``timeout`` (the spec's stop timeout) kill.

        Runs under the lifecycle lock (see :meth:`guarded`): a stop during another action (an upgrade's
        probation, say) is refused with what to do instead, never half-applied."""
        timeout = self.spec.stop_timeout if timeout is None else timeout
        with self.guarded("stop", lock, owner) as held:
            requested_at = time.time()
            run_id = self.begin_stop()
            return self.finish_stop(run_id, requested_at, timeout, kill_on_timeout, held)

    def begin_stop(self) -> str | None:
        """Ask the driver to stop (remove the run marker); return the run id that was running, ``None``
        when none was. The caller holds the lifecycle lock; :meth:`finish_stop` waits and reports."""
        record = self.driver_record()
        liveness = self.driver_liveness()[0] if record is not None else Liveness.GONE
        if liveness == Liveness.UNKNOWN and record is not None and self.target_of(record).state(record).gone:
            liveness = Liveness.GONE
        self.request_stop()
        return None if record is None or liveness == Liveness.GONE else record.run_id

    def finish_stop(self, run_id: str | None, requested_at: float, timeout: float, kill_on_timeout: bool = True,
                    lock: LifecycleLock | None = None) -> StopReport:
        """Wait until ``requested_at + timeout`` for the run of a :meth:`begin_stop` to exit, kill it after
        that, and report (a deferred stop calls this once its trigger saw the driver gone)."""
        record = self.driver_record()
        if run_id is None or record is None or record.run_id != run_id:
            log.info("stream %s is not running; nothing to stop", self.spec.name)
            return StopReport(self.spec.name, False, False, False, None, self._position(), 0.0)
        stopped = self.wait_gone(record, max(0.0, requested_at + timeout - time.time()), lock)
        killed = False
        note = None
        if not stopped:
            if not kill_on_timeout:
                raise TimeoutError(f"stream {self.spec.name!r} did not stop within {timeout:.0f}s")
            log.warning("stream %s did not stop within %.0fs: killing it", self.spec.name, timeout)
            note = self.kill(record)
            killed = True
        doc = self._status_of_run(record.run_id)
        exit_code = doc.exit.get("code") if doc is not None and doc.exit else None
        report = StopReport(self.spec.name, True, not killed and exit_code == contract.EXIT_GRACEFUL, killed,
                            exit_code, self._position(), time.time() - requested_at, note)
        log.info("stream %s stopped: %s", self.spec.name, report.to_dict())
        return report

    def _position(self) -> BatchPosition | None:
        try:
            return self.batch_position()
        except OSError:
            return None


def lease_ttl(spec: StreamSpec) -> float:
    """The driver lease's ttl: long enough for a NameNode failover, at least 12 heartbeats."""
    return max(120.0, 12 * spec.heartbeat_interval)


def _hostname() -> str:
    import socket

    return socket.gethostname()
