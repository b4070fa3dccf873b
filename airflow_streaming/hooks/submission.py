"""Submitting a stream's driver: the launch plan, spark-submit through the deploy target, the run
marker, the standby and its promotion, and the wait for the first progress (a part of the stream's hook).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from airflow_streaming import faults
from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlFileError, DriverRecord, StatusDocument
from airflow_streaming.control.storage import StorageError
from airflow_streaming.exceptions import (
    ApplicationNotFoundError,
    DriverStartError,
    JavaNotFoundError,
    StreamAlreadyRunningError,
)
from airflow_streaming.hooks.liveness import hostname
from airflow_streaming.control.lifecycle_lock import LifecycleLock
from airflow_streaming.log_masking import register_secrets
from airflow_streaming.redaction import (
    SPARK_REDACTION_REGEX,
    SPARK_SQL_REDACTION_STRING_REGEX,
    secret_args_conf,
    split_conf,
)
from airflow_streaming.sealing import deployer_of, sealed, sealed_deployer
from airflow_streaming.spark_runtime import (
    ResolvedRuntime,
    RuntimeUnavailableError,
    describe,
    resolve_runtime,
    without_class_archive,
)
from airflow_streaming.spec import StreamSpec
from airflow_streaming.targets.base import LaunchPlan
from airflow_streaming.targets.runtime_bundle import runtime_tree

log = logging.getLogger("airflow_streaming.hooks.streaming_job")

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
    # Spark's own redaction (UI Environment page, event log, REST API) hides what ours hides.
    "spark.redaction.regex": SPARK_REDACTION_REGEX,
    "spark.sql.redaction.string.regex": SPARK_SQL_REDACTION_STRING_REGEX,
}
DRIVER_EXIT_GRACE_SECONDS = 30.0

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


#: The log4j2 configuration of drivers in spark-submit's JVM on this host: Spark's defaults, each line
#: passed through the secret patterns of the log redaction (see the file's header).
DRIVER_LOG4J2 = Path(__file__).resolve().parents[1] / "targets" / "driver_log4j2.properties"


def redacting_log_options(spec: StreamSpec, environ: dict[str, str] | os._Environ[str]) -> str | None:
    """``SPARK_SUBMIT_OPTS`` that give a driver running in spark-submit's JVM here (local master or client
    mode) the redacting log4j2 configuration, so the raw driver log holds no secret the JVM logged;
    ``None`` for cluster mode (the driver's JVM is elsewhere) or when a log4j configuration is already
    named (``SPARK_SUBMIT_OPTS`` or ``spark.driver.extraJavaOptions``): the user's wins."""
    if spec.deploy_mode == "cluster":
        return None
    current = environ.get("SPARK_SUBMIT_OPTS", "")
    if "log4j" in current or "log4j" in str(spec.spark_conf.get("spark.driver.extraJavaOptions", "")):
        return None
    return f"{current} -Dlog4j2.configurationFile={DRIVER_LOG4J2.as_uri()}".strip()


def lease_ttl(spec: StreamSpec) -> float:
    """The driver lease's ttl: long enough for a NameNode failover, at least 12 heartbeats."""
    return max(120.0, 12 * spec.heartbeat_interval)


class SubmissionMixin:
    """Submit, promote, wait until ready (mixed into ``SparkStreamHook``)."""

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
        """Refuse, before anything is written or started, a missing application, a plain argument that holds
        a secret, (locally) a missing Java, or a Spark runtime that cannot be had here (built once if needed)."""
        self.application_argument()
        self.spec.refuse_plain_secrets()
        if self.target.kind == "local":
            check_java()
        self.spark_runtime()

    def spark_runtime(self) -> ResolvedRuntime | None:
        """The Spark runtime this version names, resolved on this host (``None``: the installed PySpark).
        Builds it once when it is a release not yet here; :class:`RuntimeUnavailableError` says what to install.
        Where the cluster's own Spark runs the driver (a standalone master's worker, a Kubernetes image) a
        runtime is refused: this host cannot choose it."""
        if self.spec.spark_runtime is None:
            return None
        if not hasattr(self, "_spark_runtime"):  # resolved once (``None``: the named release is the installed one)
            if self.target.kind in ("standalone-cluster", "kubernetes"):
                where = "the standalone workers' own Spark installation" if self.target.kind == "standalone-cluster" \
                    else "the driver image (cluster.image)"
                raise RuntimeUnavailableError(
                    f"spark_runtime ({describe(self.spec.spark_runtime)}): in {self.target.kind} cluster mode the driver "
                    f"runs on {where}, which this host cannot choose; remove spark_runtime (and change the cluster's "
                    "Spark), or run the stream in client mode or on YARN (docs/spark-runtimes.md)")
            self._spark_runtime = resolve_runtime(self.spec.spark_runtime)
        return self._spark_runtime

    def launch_plan(self, run_id: str, standby: bool = False, gate: bool | None = None,
                    failover: bool = False) -> LaunchPlan:
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
            *(["--failover"] if standby and failover else []),
            *(["--gate-only", *([] if gate else ["--gate-no-dry-run"])] if gate is not None else []),
            "--", *spec.application_args,
        ]
        spec.refuse_plain_secrets()  # before anything reaches a command line
        conf, secret = split_conf({**DEFAULT_SPARK_CONF, **spec.spark_conf})
        secret.update(secret_args_conf(spec.secret_args))  # appended to the job's arguments in the driver
        register_secrets(secret.values())
        runtime = self.spark_runtime()
        local = self.target.kind == "local"
        launcher = str(Path(runtime_tree()) / "spark_jobs" / "launch.py") if runtime and local else LAUNCHER
        plan = self.target.plan(self.resolved_spec, run_id, launcher, runtime_args, conf, secret,
                                self.driver_log_path(run_id), standby)
        if runtime is None:
            return plan
        # The runtime's spark-submit and SPARK_HOME; its Python for a driver on this host (on a cluster the
        # driver's Python is cluster.python).
        env = runtime.environment() if local else {"SPARK_HOME": runtime.spark_home}
        if local:  # this JVM loads the runtime's jars: a class archive of the installed PySpark's does not fit
            opts = redacting_log_options(self.resolved_spec, os.environ) or os.environ.get("SPARK_SUBMIT_OPTS", "")
            env["SPARK_SUBMIT_OPTS"] = without_class_archive(opts)
        return dataclasses.replace(plan, spark_binary=runtime.spark_submit, env={**plan.env, **env})

    def command_for(self, run_id: str) -> tuple[list[str], str]:
        """The spark-submit command a local/client submission of ``run_id`` runs, and its one-line record
        (for inspection: sensitive conf never appears, it travels in a 0600 properties file)."""
        from airflow_streaming.targets.submit_command import masked_command, spark_submit_argv

        plan = self.launch_plan(run_id)
        argv = spark_submit_argv(plan, self.target.binary(plan),
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
        log_options = redacting_log_options(self.resolved_spec, os.environ)
        if log_options:
            env["SPARK_SUBMIT_OPTS"] = log_options
        return env

    def submit(self, run_id: str | None = None, standby: bool = False, lock: LifecycleLock | None = None,
               owner: str | None = None, failover: bool = False) -> DriverRecord:
        """Start the stream's driver detached and return its record, under the lifecycle lock.

        Refuses (before anything is submitted) when a driver already runs the stream or that cannot be
        told, when another lifecycle action holds the lock or is unfinished, when the application is
        missing, or when Java is not usable. ``run_id`` lets a resumable caller choose (and record) the
        run id before submitting, so that it can later tell whether the submission happened
        (:meth:`processes_of_run`) instead of submitting twice.

        ``standby=True`` starts a *prepared* driver beside the running one: it builds its session and
        query, then waits - without touching the checkpoint, the lease or the status document - until
        :meth:`promote` names it in the run marker. Its record goes to ``standby-driver.json``. With
        ``failover`` it is the stream's hot standby (:mod:`airflow_streaming.hooks.hot_standby`); a live hot
        standby is retired to make room for an upgrade's standby.
        """
        self.preflight()
        with self.guarded("deploy", lock, owner) as held:
            if not standby:
                running = self.running_driver()
                if running:
                    raise StreamAlreadyRunningError(
                        f"stream {self.spec.name!r} is already running: {running}. Stop it before deploying again.")
            else:
                if not failover:
                    self.retire_hot_standby(f"an upgrade prepares its own standby, run {run_id}")
                other = self.standby_record()
                if other is not None and other.run_id != run_id and not self._is_recorded_driver(other) \
                        and self.processes_of_run(other.run_id):
                    raise StreamAlreadyRunningError(f"stream {self.spec.name!r} already has a standby driver "
                                                    f"(run {other.run_id})")
            run_id = run_id or contract.new_run_id()
            plan = self.launch_plan(run_id, standby=standby, failover=failover)
            plan = dataclasses.replace(plan, env={**self._environment(), **plan.env})
            self.storage.makedirs(self.paths.root)
            if not self.remote_storage:
                self.storage.makedirs(os.path.dirname(self.paths.log(run_id)))
            held.ensure()
            if not standby:
                contract.write_marker(self.storage, self.paths, run_id, self.spec.version)
            else:
                self.mark_standby_submitted(run_id, failover)
            try:
                handle = self.target.submit(plan)
            except BaseException:
                if not standby:
                    self._remove_marker_of(run_id)
                raise
            faults.hit("hook.submitted", run_id)  # e.g. the task killed before the record: see adopt()
            record = DriverRecord(
                run_id=run_id, stream=self.spec.name, version=self.spec.version, application=self.spec.application,
                host=hostname(), command=self.target.describe_command(plan), log_path=plan.log_path,
                submitted_at=time.time(), checkpoint_location=self.spec.checkpoint_location, target=self.target.kind,
                handle=handle)
            if standby:
                self.storage.write_atomic(self.paths.standby_driver, record.to_json())
            else:
                self._record_deployment(record, held)
            log.info("submitted stream %s %s%s to %s: run %s, %s, log %s", self.spec.name, self.spec.version,
                     " (standby)" if standby else "", self.target.kind, run_id, handle, plan.log_path)
            return record

    def _is_recorded_driver(self, standby: DriverRecord) -> bool:
        """Whether a standby record names the stream's recorded driver: it was promoted (a warm upgrade) or
        took over (the hot standby), so it is no standby any more and never blocks a new one."""
        current = self.driver_record()
        return current is not None and current.run_id == standby.run_id

    def unrecorded_record(self, run_id: str, standby: bool = False) -> DriverRecord | None:
        """A driver record for the one driver of ``run_id`` that runs although no record names it (its
        submitter was killed between the submission and the record), as the target identifies it;
        ``None`` when the target cannot tell which driver it is. Written by nobody: see :meth:`adopt`."""
        handle = self.target.adopt(run_id)
        if handle is None:
            return None
        # Nothing here may fail or take long (no launch plan: it could resolve a runtime): a rollback's
        # kill depends on this record.
        return DriverRecord(
            run_id=run_id, stream=self.spec.name, version=self.spec.version, application=self.spec.application,
            host=hostname(), command=f"(adopted {'standby ' if standby else ''}driver: submitted by a task killed "
                                     f"before it wrote this record)",
            log_path=self.driver_log_path(run_id), submitted_at=time.time(),
            checkpoint_location=self.spec.checkpoint_location, target=self.target.kind, handle=handle)

    def adopt(self, run_id: str, lock: LifecycleLock, standby: bool = False) -> DriverRecord:
        """Record the driver of ``run_id`` that a killed submitter started but never recorded, so that
        everything after (the wait for its progress, probation, a promotion, a stop, a rollback's kill)
        acts on it. Refuses (:class:`DriverStartError`) when the target cannot tell which driver it is,
        or (not for a ``standby``) when another driver of the stream still runs: the caller must
        neither submit again nor go on as if it were recorded."""
        with self.guarded("deploy", lock) as held:
            previous = self.driver_record()
            lease = contract.read_lease(self.storage, self.paths)
            other = (not standby and previous is not None and previous.run_id != run_id
                     and not self.target_of(previous).state(previous).gone)
            standby_now = self.standby_record() if standby else None
            if standby and standby_now is not None and standby_now.run_id != run_id and \
                    not self._is_recorded_driver(standby_now) and self.processes_of_run(standby_now.run_id):
                raise StreamAlreadyRunningError(f"stream {self.spec.name!r} already has a standby driver (run "
                                                f"{standby_now.run_id}): not adopting run {run_id} beside it")
            if not standby and (other or (lease is not None and not lease.is_stale() and lease.run_id != run_id)):
                raise StreamAlreadyRunningError(
                    f"stream {self.spec.name!r} runs another driver (recorded run "
                    f"{previous.run_id if previous else None}, lease of run {lease.run_id if lease else None}): not "
                    f"adopting the unrecorded driver of run {run_id} beside it")
            record = self.unrecorded_record(run_id, standby)
            if record is None:
                raise DriverStartError(f"run {run_id} of {self.spec.name} was submitted but never recorded, and "
                                       f"the {self.target.kind} target cannot tell which driver it is: "
                                       f"{self.processes_of_run(run_id)}. Stop these (each carries --run-id {run_id}: "
                                       f"on its host, or through the cluster manager), then run the action again: "
                                       f"it will submit the run afresh")
            held.ensure()
            if standby:
                self.storage.write_atomic(self.paths.standby_driver, record.to_json())
            else:
                self._record_deployment(record, held)
            log.warning("run %s of %s was submitted by a task killed before it recorded the driver: adopted %s",
                        run_id, self.spec.name, record.handle)
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
                host=hostname(), command=self.target.describe_command(plan), log_path=plan.log_path,
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

    def _record_deployment(self, record: DriverRecord, lock: LifecycleLock | None = None) -> None:
        self.storage.write_atomic(self.paths.driver, record.to_json())
        doc: dict[str, Any] = {"run_id": record.run_id, "at": record.submitted_at, "spec": sealed(self.spec.to_dict())}
        deployer = self._deployer(lock)
        if deployer is not None:
            doc["deployed_by"] = sealed_deployer(self.spec.name, deployer)
        self.storage.write_atomic(self.deployed_path, json.dumps(doc, indent=1).encode())

    def _deployer(self, lock: LifecycleLock | None) -> str | None:
        """Which task deployed the stream (the Streams page shows it to who may read that task's DAG): the
        lock owner of a ``deploy`` action (or ``parallel``: the stream under its new name) run by a task;
        for any other action (restart, upgrade, rollback, the supervisor's recovery) the deployer recorded
        before, so a shared supervisor or operations DAG does not take the stream over."""
        holder = getattr(lock, "holder", None) or {}
        owner = holder.get("owner")
        by_task = isinstance(owner, str) and re.match(r"^\S+\.\S+ run .+ try \d+$", owner) is not None
        if holder.get("action") in ("deploy", "parallel") and by_task:
            return owner
        try:
            raw = self.storage.read_bytes(self.deployed_path)
            return deployer_of(json.loads(raw), self.spec.name) if raw is not None else None
        except (StorageError, ValueError, UnicodeDecodeError):
            return None

    def standby_record(self) -> DriverRecord | None:
        data = self.storage.read_bytes(self.paths.standby_driver)
        return None if data is None else DriverRecord.from_json(self.paths.standby_driver, data)

    def standby_state(self, run_id: str) -> dict[str, Any] | None:
        """The standby driver's readiness (``state`` PREPARING / READY / FAILED / PROMOTED / EXPIRED)."""
        doc = self._standby_doc()
        return doc if doc is not None and doc.get("run_id") == run_id else None

    def promote(self, run_id: str, lock: LifecycleLock) -> DriverRecord:
        """Hand the stream to the prepared standby ``run_id``: it becomes the recorded driver and the run
        marker names it, which is its signal to take the lease and start. Only call this once no other
        driver runs (the lease would make it wait otherwise). Idempotent."""
        lock.ensure()
        record = self.standby_record()
        if record is None or record.run_id != run_id:
            raise DriverStartError(f"no standby driver record for run {run_id} in {self.paths.standby_driver}")
        self._record_deployment(record, lock)
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
