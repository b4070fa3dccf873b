"""I/O for one managed stream: submit its driver detached, read its control files, stop or kill it.

Submission goes through the Spark provider's :class:`SparkSubmitHook` (its ``spark`` connection,
conf handling and secret masking); only the final ``Popen`` differs: ``SparkSubmitHook.submit()``
blocks until spark-submit exits, which for a stream in local/client mode is never, so the command is
started here in its own session (process group) with its output in the control directory and its
pid recorded in ``driver.json``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_streaming.checkpoint.batches import BatchPosition, read_batch_position
from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlPaths, DriverRecord, StatusDocument
from airflow_streaming.control.storage import ControlStorage, storage_for
from airflow_streaming.exceptions import (
    ApplicationNotFoundError,
    DriverStartError,
    JavaNotFoundError,
    StreamAlreadyRunningError,
)
from airflow_streaming.spec import StreamSpec

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
# Popen objects of drivers started by this process, so that their exit is reaped (no zombies).
_CHILDREN: dict[int, subprocess.Popen] = {}


def _reap() -> None:
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            _CHILDREN.pop(pid, None)


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


def wait_exit(record: DriverRecord, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for a driver to exit; return whether it did."""
    deadline = time.monotonic() + timeout
    while record.alive() and time.monotonic() < deadline:
        _reap()
        time.sleep(0.2)
    if record.alive():
        return False
    # A multi-threaded JVM shows as a zombie while its last threads exit; reap our own child fully.
    proc = _CHILDREN.pop(record.submit_pid, None)
    if proc is not None:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _CHILDREN[record.submit_pid] = proc
            return False
    return True


def _group_alive(record: DriverRecord) -> bool:
    return record.alive() or bool(contract.process_group_members(record.submit_pid))


def kill_driver(storage: ControlStorage, paths: ControlPaths, record: DriverRecord,
                grace: float = KILL_GRACE_SECONDS) -> None:
    """Remove the run marker, SIGTERM the driver's whole process group, then SIGKILL what is left.

    The group (spark-submit was started in its own session) holds the JVM and the Python driver: the
    JVM may exit on SIGTERM while a Python driver stuck in a batch would not, so the group - not just
    the recorded pid - must be gone. Only a driver on this host can be signalled. Never raises.
    """
    try:
        contract.request_stop(storage, paths)
    except OSError:
        log.exception("could not remove %s", paths.marker)
    if record.host != socket.gethostname():
        log.error("cannot kill driver of run %s on host %s from %s", record.run_id, record.host, socket.gethostname())
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _group_alive(record):
            return
        log.warning("sending %s to driver process group %s (run %s)", sig.name, record.submit_pid, record.run_id)
        try:
            os.killpg(record.submit_pid, sig)
        except ProcessLookupError:
            return
        except OSError:
            log.exception("could not signal process group %s", record.submit_pid)
            return
        deadline = time.monotonic() + grace
        while _group_alive(record) and time.monotonic() < deadline:
            _reap()
            time.sleep(0.2)
    wait_exit(record, 1.0)


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "was_running": self.was_running,
            "graceful": self.graceful,
            "killed": self.killed,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            **(self.position.to_dict() if self.position else {"last_committed_batch": None, "clean": None}),
        }


class StreamingJobHook:
    """Submit, watch, stop and kill the driver of one stream described by a :class:`StreamSpec`.

    :param spec: the stream.
    :param storage: control storage (default: chosen from the control location's scheme).
    """

    def __init__(self, spec: StreamSpec, storage: ControlStorage | None = None):
        self.spec = spec
        default_storage, control_dir = storage_for(spec.control_dir)
        self.storage = storage or default_storage
        self.paths = ControlPaths(control_dir)
        _, self.checkpoint_path = storage_for(spec.checkpoint_location)

    # ------------------------------------------------------------------ reading
    def status(self) -> StatusDocument | None:
        """The driver's status document (``None`` before the first driver wrote one)."""
        return contract.read_status(self.storage, self.paths)

    def driver_record(self) -> DriverRecord | None:
        return contract.read_driver_record(self.storage, self.paths)

    def batch_position(self) -> BatchPosition:
        return read_batch_position(self.storage, self.checkpoint_path)

    def running_driver(self) -> str | None:
        """A description of the live driver of this stream, or ``None`` if none runs."""
        _reap()
        lease = contract.read_lease(self.storage, self.paths)
        if lease is not None and not lease.is_stale():
            return f"driver pid {lease.pid} on {lease.host} holds the lease (run {lease.run_id})"
        record = self.driver_record()
        if record is not None and (record.alive() or (record.host == socket.gethostname()
                                                      and contract.process_group_members(record.submit_pid))):
            return f"spark-submit pid {record.submit_pid} on {record.host} is alive (run {record.run_id})"
        return None

    @property
    def deployed_path(self) -> str:
        return f"{self.paths.root}/deployed.json"

    def deployed(self) -> dict[str, Any] | None:
        """``{"run_id", "at", "spec"}`` of the last submission (the spec as deployed), or ``None``."""
        raw = self.storage.read_bytes(self.deployed_path)
        try:
            return json.loads(raw) if raw is not None else None
        except ValueError:
            log.error("unreadable %s: the deployed spec is unknown", self.deployed_path)
            return None

    def processes_of_run(self, run_id: str) -> list[int]:
        """Local processes started for ``run_id`` (its spark-submit, JVM or Python driver), found by
        their command line: tells whether a submission happened even if its record was never written."""
        import psutil

        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                cmdline = proc.info["cmdline"] or []
                if proc.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
            except (psutil.Error, KeyError):
                continue
            if any(a == run_id and i > 0 and cmdline[i - 1] == "--run-id" for i, a in enumerate(cmdline)):
                found.append(proc.info["pid"])
        return found

    def log_tail(self, run_id: str, lines: int = 40) -> str:
        """The last lines of a run's driver output, with ``secret``/``password`` values masked."""
        from airflow.providers.apache.spark.hooks.spark_submit import _mask_sensitive_values

        data = self.storage.read_text(self.paths.log(run_id)) or ""
        return _mask_sensitive_values("\n".join(data.splitlines()[-lines:]))

    def health(self, thresholds: Any = None, now: float | None = None) -> Any:
        """The stream's :class:`~airflow_streaming.health.verdict.HealthVerdict` right now.

        Driver liveness: the recorded spark-submit process on this host (``None`` = unknown when the
        driver runs elsewhere). An unreadable status document yields UNKNOWN with the reason.
        """
        from airflow_streaming.health.thresholds import HealthThresholds
        from airflow_streaming.health.verdict import evaluate

        _reap()
        unreadable = None
        doc = None
        doc_dict = None
        try:
            raw = self.storage.read_bytes(self.paths.status)
            if raw is not None:
                doc = contract.StatusDocument.from_json(self.paths.status, raw)  # validates
                doc_dict = json.loads(raw)  # the same content as a dict, without a deep copy of asdict()
        except (contract.ControlFileError, OSError) as exc:
            unreadable = str(exc)
        try:
            record = self.driver_record()
        except contract.ControlFileError:
            record = None
        alive: bool | None = None
        if record is not None:
            alive = None if record.host != socket.gethostname() else record.alive()
        if doc is not None and record is not None and doc.run_id != record.run_id:
            doc = None  # a status of a previous run says nothing about the current submission
        liveness_note = None
        cluster = self.cluster_app_state(doc.app_id if doc is not None else None)
        if cluster is not None:
            liveness_note = f"standalone master reports app {cluster.app_id} {cluster.state or 'unknown'}"
            if cluster.active is False:
                alive = False  # the cluster ended the application, whatever the local process does
            elif cluster.active and alive is None:
                alive = True
        verdict = evaluate(
            None if doc is None else doc_dict, now=time.time() if now is None else now,
            driver_alive=alive, trigger_interval=self.spec.trigger_interval,
            heartbeat_interval=self.spec.heartbeat_interval,
            thresholds=thresholds or HealthThresholds.from_mapping(self.spec.health), unreadable=unreadable,
            liveness_note=liveness_note)
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

    # ------------------------------------------------------------------ submitting
    def application_argument(self) -> list[str]:
        """``--job NAME`` or ``--script PATH``; :class:`ApplicationNotFoundError` if it is missing."""
        app = self.spec.application
        if self.spec.is_bundled:
            if not (JOBS_DIR / f"{app}.py").is_file():
                raise ApplicationNotFoundError(f"bundled job {app!r} is not installed ({JOBS_DIR / app}.py missing)")
            return ["--job", app]
        if not os.path.isfile(app):
            raise ApplicationNotFoundError(f"application file {app} does not exist; nothing was submitted")
        return ["--script", app]

    def build_command(self, run_id: str, standby: bool = False) -> tuple[list[str], str]:
        """The spark-submit command (through SparkSubmitHook) and its masked form."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        spec = self.spec
        runtime_args = [
            "--stream", spec.name, "--version", spec.version, "--run-id", run_id,
            "--control-dir", self.paths.root, "--checkpoint", spec.checkpoint_location,
            *self.application_argument(),
            "--trigger-seconds", str(spec.trigger_interval), "--heartbeat-seconds", str(spec.heartbeat_interval),
            "--lease-ttl", str(max(30.0, 6 * spec.heartbeat_interval)),
            *(["--standby"] if standby else []), "--", *spec.application_args,
        ]
        conf = {**DEFAULT_SPARK_CONF, **spec.spark_conf}
        if spec.master is None:
            self._require_connection()
        hook = SparkSubmitHook(conf=conf, conn_id=spec.conn_id, name=f"{spec.name}:{spec.version}",
                               application_args=runtime_args)
        if spec.master is not None:
            hook._connection["master"] = spec.master  # the spec overrides the connection's master
        cmd = hook._build_spark_submit_command(LAUNCHER)
        return cmd, hook._mask_cmd(cmd)

    def _require_connection(self) -> None:
        from airflow.sdk import BaseHook

        try:
            BaseHook.get_connection(self.spec.conn_id)
        except Exception as exc:  # noqa: BLE001 - AirflowNotFoundException across Airflow versions
            raise ValueError(
                f"master: the spec sets no master and the Spark connection {self.spec.conn_id!r} cannot be "
                f"loaded ({exc}); set `master: local[2]` in the spec or define the connection "
                f"(e.g. AIRFLOW_CONN_{self.spec.conn_id.upper()}='{{\"conn_type\": \"spark\", \"host\": \"local[2]\"}}')"
            ) from exc

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
        bindir = os.path.dirname(sys.executable)
        if not shutil.which("spark-submit", path=env.get("PATH")) and os.path.exists(os.path.join(bindir, "spark-submit")):
            env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        if (self.spec.master or "").startswith("local"):
            env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        return env

    def submit(self, run_id: str | None = None, standby: bool = False) -> DriverRecord:
        """Start the stream's driver detached and return its record.

        Refuses (before anything is submitted) when a live driver already runs the stream, when the
        application is missing, or when Java is not usable. ``run_id`` lets a resumable caller choose
        (and record) the run id before submitting, so that it can later tell whether the submission
        happened (:meth:`processes_of_run`) instead of submitting twice.

        ``standby=True`` starts a *prepared* driver beside the running one: it builds its session and
        query, then waits - without touching the checkpoint, the lease or the status document - until
        :meth:`promote` names it in the run marker. Its record goes to ``standby-driver.json``.
        """
        if not standby:
            running = self.running_driver()
            if running:
                raise StreamAlreadyRunningError(
                    f"stream {self.spec.name!r} is already running: {running}. Stop it before deploying again."
                )
        else:
            other = self.standby_record()
            if other is not None and other.run_id != run_id and self.processes_of_run(other.run_id):
                raise StreamAlreadyRunningError(f"stream {self.spec.name!r} already has a standby driver "
                                                f"(run {other.run_id}, pid {other.submit_pid})")
        self.application_argument()
        check_java()
        run_id = run_id or contract.new_run_id()
        cmd, masked = self.build_command(run_id, standby=standby)
        self.storage.makedirs(self.paths.root)
        self.storage.makedirs(os.path.dirname(self.paths.log(run_id)))
        if not standby:
            contract.write_marker(self.storage, self.paths, run_id, self.spec.version)
        log_path = self.paths.log(run_id)
        env = self._environment()
        if shutil.which(cmd[0], path=env.get("PATH")) is None:
            if not standby:
                contract.request_stop(self.storage, self.paths)
            raise ApplicationNotFoundError(
                f"{cmd[0]} is not on PATH: install PySpark in the Airflow worker's environment "
                "(pip install pyspark==4.2.0 pyspark-client==4.2.0) or put Spark's bin directory on PATH; "
                "nothing was submitted")
        with open(log_path, "ab") as log_file:
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True, close_fds=True)
        _CHILDREN[proc.pid] = proc
        record = DriverRecord(
            run_id=run_id, stream=self.spec.name, version=self.spec.version, application=self.spec.application,
            submit_pid=proc.pid, submit_pid_start_time=contract.process_start_time(proc.pid),
            host=socket.gethostname(), command=masked, log_path=log_path, submitted_at=time.time(),
            checkpoint_location=self.spec.checkpoint_location,
        )
        if standby:
            self.storage.write_atomic(self.paths.standby_driver, record.to_json())
        else:
            self._record_deployment(record)
        log.info("submitted stream %s %s%s: run %s, spark-submit pid %s, log %s", self.spec.name, self.spec.version,
                 " (standby)" if standby else "", run_id, proc.pid, log_path)
        return record

    def _record_deployment(self, record: DriverRecord) -> None:
        self.storage.write_atomic(self.paths.driver, record.to_json())
        self.storage.write_atomic(self.deployed_path, json.dumps(
            {"run_id": record.run_id, "at": record.submitted_at, "spec": self.spec.to_dict()}, indent=1).encode())

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
        return doc if doc is not None and doc.get("run_id") == run_id else None

    def promote(self, run_id: str) -> DriverRecord:
        """Hand the stream to the prepared standby ``run_id``: it becomes the recorded driver and the run
        marker names it, which is its signal to take the lease and start. Only call this once no other
        driver runs (the lease would make it wait otherwise). Idempotent."""
        record = self.standby_record()
        if record is None or record.run_id != run_id:
            raise DriverStartError(f"no standby driver record for run {run_id} in {self.paths.standby_driver}")
        self._record_deployment(record)
        contract.write_marker(self.storage, self.paths, run_id, self.spec.version)
        log.info("promoted standby run %s of %s %s", run_id, self.spec.name, self.spec.version)
        return record

    def wait_until_ready(self, record: DriverRecord, timeout: float | None = None, poll: float = 0.5) -> StatusDocument:
        """Wait until the run's query reports progress (or idles); raise :class:`DriverStartError` with the
        driver's own error if it dies first. On timeout the driver is stopped and killed."""
        timeout = self.spec.startup_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            _reap()
            doc = self._status_of_run(record.run_id)
            if doc is not None and doc.ready and doc.state == contract.RUNNING:
                return doc
            if doc is not None and doc.is_terminal or not record.alive():
                # Let the driver exit and flush its last lines; never leave a failed driver behind.
                wait_exit(record, DRIVER_EXIT_GRACE_SECONDS)
                if record.alive():
                    self.kill(record)
                raise DriverStartError(self._failure_message(record, self._status_of_run(record.run_id)))
            if time.monotonic() > deadline:
                self.kill(record)
                raise DriverStartError(
                    f"stream {record.stream!r} did not report progress within {timeout:.0f}s; the driver was "
                    f"stopped. Last driver output:\n{self.log_tail(record.run_id)}"
                )
            time.sleep(poll)

    def _status_of_run(self, run_id: str) -> StatusDocument | None:
        try:
            doc = self.status()
        except contract.ControlFileError:
            return None
        return doc if doc is not None and doc.run_id == run_id else None

    def _failure_message(self, record: DriverRecord, doc: StatusDocument | None) -> str:
        head = f"driver of stream {record.stream!r} (run {record.run_id}) failed while starting"
        if doc is not None and doc.last_exception:
            err = doc.last_exception
            head += f": [{err.get('error_class')}] {err.get('message')}"
        if doc is not None and doc.exit:
            head += f" (exit code {doc.exit.get('code')}: {doc.exit.get('reason')})"
        return f"{head}\nLast driver output ({record.log_path}):\n{self.log_tail(record.run_id)}"

    # ------------------------------------------------------------------ stopping
    def request_stop(self) -> bool:
        """Remove the run marker: the driver stops at the next micro-batch boundary."""
        return contract.request_stop(self.storage, self.paths)

    def kill(self, record: DriverRecord, grace: float = KILL_GRACE_SECONDS) -> None:
        """Remove the marker, SIGTERM the driver's process group, SIGKILL after ``grace`` s. Never raises."""
        kill_driver(self.storage, self.paths, record, grace)

    def stop(self, timeout: float | None = None, kill_on_timeout: bool = True) -> StopReport:
        """Stop gracefully at a micro-batch boundary; after ``timeout`` (the spec's stop timeout) kill."""
        timeout = self.spec.stop_timeout if timeout is None else timeout
        started = time.monotonic()
        record = self.driver_record()
        # The whole process group counts: a Python driver can outlive its JVM (and hold the lease).
        running = record is not None and _group_alive(record)
        self.request_stop()
        if not running:
            log.info("stream %s is not running; nothing to stop", self.spec.name)
            return StopReport(self.spec.name, False, False, False, None, self._position(), 0.0)
        deadline = started + timeout
        while _group_alive(record) and time.monotonic() < deadline:
            _reap()
            time.sleep(0.2)
        wait_exit(record, 1.0)
        killed = False
        if _group_alive(record):
            if not kill_on_timeout:
                raise TimeoutError(f"stream {self.spec.name!r} did not stop within {timeout:.0f}s")
            log.warning("stream %s did not stop within %.0fs: killing it", self.spec.name, timeout)
            self.kill(record)
            killed = True
        doc = self._status_of_run(record.run_id)
        exit_code = doc.exit.get("code") if doc is not None and doc.exit else None
        report = StopReport(self.spec.name, True, not killed and exit_code == contract.EXIT_GRACEFUL, killed,
                            exit_code, self._position(), time.monotonic() - started)
        log.info("stream %s stopped: %s", self.spec.name, report.to_dict())
        return report

    def _position(self) -> BatchPosition | None:
        try:
            return self.batch_position()
        except OSError:
            return None
