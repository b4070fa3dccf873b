"""Planning a stream driver's launch (a part of the stream's hook): the application argument, the checks
before anything is started (application, secrets, Java, the Spark runtime), the launch plan the deploy target
starts, and the submitting environment. Nothing here starts or writes anything.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from airflow_streaming.application_source import driver_argument, is_fetched, local_path
from airflow_streaming.exceptions import ApplicationNotFoundError, JavaNotFoundError
from airflow_streaming.log_masking import register_secrets
from airflow_streaming.redaction import (
    SPARK_REDACTION_REGEX,
    SPARK_SQL_REDACTION_STRING_REGEX,
    secret_args_conf,
    split_conf,
)
from airflow_streaming.spark_runtime import (
    ResolvedRuntime,
    RuntimeUnavailableError,
    describe,
    resolve_runtime,
    without_class_archive,
)
from airflow_streaming.spec import SpecError, StreamSpec
from airflow_streaming.targets.base import LaunchPlan
from airflow_streaming.targets.runtime_bundle import runtime_tree

LAUNCHER = str(Path(__file__).resolve().parents[2] / "spark_jobs" / "launch.py")
JOBS_DIR = Path(__file__).resolve().parents[2] / "spark_jobs" / "jobs"
JAVA_HINT = "install Java 17 (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless) or set JAVA_HOME"
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


def _longest_call(storage: object) -> tuple[float, Any] | None:
    """``(seconds, settings)``: how long one call to a WebHDFS control storage may hang - its connect and read
    timeouts at each NameNode; ``None`` for a storage without such settings (local or mounted files)."""
    settings = getattr(storage, "settings", None)
    if settings is None:
        return None
    return (settings.connect_timeout + settings.read_timeout) * max(1, len(settings.hosts)), settings


def lease_ttl_problem(spec: StreamSpec, storage: object) -> str | None:
    """Why the spec's own ``lease_ttl`` cannot be honoured on its control storage, ``None`` when it can (or when
    the spec keeps the default, which :func:`lease_ttl` lengthens as needed). A driver stops itself once its
    lease went half a ttl unrenewed, and a renewal of a lease on WebHDFS may hang for the connection's connect
    and read timeouts at each NameNode: a call still in flight past half the ttl (a dropped route that heals
    late) could renew a lease the driver has given up. So half the ttl must exceed the longest such call."""
    longest = _longest_call(storage)
    if spec.lease_ttl is None or longest is None:
        return None
    worst, settings = longest
    if spec.lease_ttl / 2 > worst:
        return None
    return (f"half of it ({spec.lease_ttl / 2:g}s) must exceed the longest call to the control storage, {worst:g}s "
            f"(the {settings.connect_timeout:g}s connect and {settings.read_timeout:g}s read timeouts of "
            f"{settings.source or 'its settings'}, at {max(1, len(settings.hosts))} NameNode(s)): set lease_ttl above "
            f"{2 * worst:g}s, or lower the connection's 'connect_timeout'/'timeout' extras")


def lease_ttl(spec: StreamSpec, storage: object = None) -> float:
    """The driver lease's ttl: the spec's ``lease_ttl``; by default long enough for a NameNode failover and at
    least 12 heartbeats - ``max(120, 12 x heartbeat)`` - and, on a WebHDFS ``storage`` whose longest call
    (:func:`lease_ttl_problem`'s rule) reaches half of that, the next 10 s above twice that call (170 s for
    two NameNodes at the default 10 s + 30 s timeouts)."""
    if spec.lease_ttl is not None:
        return spec.lease_ttl
    ttl = max(120.0, 12 * spec.heartbeat_interval)
    longest = _longest_call(storage)
    if longest is not None and ttl / 2 <= longest[0]:
        ttl = float(math.floor(2 * longest[0] / 10) * 10 + 10)
    return ttl


class PlanningMixin:
    """What a driver of the stream is started with (mixed into ``SparkStreamHook``)."""

    def application_argument(self) -> list[str]:
        """``--job NAME`` or ``--script`` and :func:`~airflow_streaming.application_source.driver_argument`
        (a URI Spark fetches is not looked for here: it travels in ``files`` and the driver runs its fetched
        copy); :class:`ApplicationNotFoundError` if a bundled job, or a file the local target's driver would run
        on this host (a path, ``file:`` or ``local:``), is missing."""
        app = self.spec.application
        if self.spec.is_bundled:
            if not (JOBS_DIR / f"{app}.py").is_file():
                raise ApplicationNotFoundError(f"bundled job {app!r} is not installed ({JOBS_DIR / app}.py missing)")
            return ["--job", app]
        if self.target.kind == "local" and not is_fetched(app) and not os.path.isfile(local_path(app)):
            raise ApplicationNotFoundError(f"application file {local_path(app)} does not exist; nothing was submitted")
        return ["--script", driver_argument(app)]

    def preflight(self) -> None:
        """Refuse, before anything is written or started, a missing application, a plain argument that holds
        a secret, a ``lease_ttl`` too short for the control storage's timeouts, (locally) a missing Java, or a
        Spark runtime that cannot be had here (built once if needed)."""
        self.application_argument()
        self.spec.refuse_plain_secrets()
        problem = lease_ttl_problem(self.spec, self.storage.unguarded)
        if problem is not None:
            raise SpecError("lease_ttl", problem)
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
            "--lease-ttl", str(lease_ttl(spec, self.storage.unguarded)),
            *(["--standby"] if standby else []),
            *(["--failover", *self.master_word_args()] if standby and failover else []),
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

    def master_word_args(self) -> list[str]:
        """The hot standby's ``--master-rest-url`` / ``--master-ui-url``: the standalone master of the stream's
        own (resolved) spec and connection, whose word proves a crashed driver on another host dead (public
        URLs, no secret). The REST server only in cluster mode (client-mode runs record no submission); the
        first master of an HA list. On YARN, ``--yarn-rm-url``: the ResourceManagers the YARN target asks (the
        spec's ``cluster.resourcemanager_url`` or ``yarn-site.xml``), all of them, in order. On Kubernetes,
        ``--kube-api-server``: the API server the Kubernetes target asks. None for other masters."""
        from airflow_streaming.hooks.spark_master import master_ui_url
        from airflow_streaming.targets import target_settings

        spec = self.resolved_spec
        master = spec.master or ""
        if master == "yarn":
            rms = getattr(self.target, "rm_urls", None) or []
            return ["--yarn-rm-url", ",".join(rms)] if rms else []
        if master.startswith("k8s://"):
            api = getattr(self.target, "api_server", None)
            return ["--kube-api-server", api] if api else []
        if not master.startswith("spark://"):
            return []
        rest_urls = getattr(self.target, "rest_urls", None) or []
        ui = master_ui_url(master, target_settings(spec).get("master_ui_url"))
        return [*(["--master-rest-url", rest_urls[0]] if rest_urls else []),
                *(["--master-ui-url", ui] if ui else [])]

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
        own = dict(getattr(self.spec, "env_vars", None) or {})  # the spec's Python is the driver's too
        env["PYSPARK_PYTHON"] = own.get("PYSPARK_PYTHON") or os.environ.get("PYSPARK_PYTHON", sys.executable)
        env["PYSPARK_DRIVER_PYTHON"] = own.get("PYSPARK_DRIVER_PYTHON") or (
            env["PYSPARK_PYTHON"] if "PYSPARK_PYTHON" in own else os.environ.get("PYSPARK_DRIVER_PYTHON",
                                                                                env["PYSPARK_PYTHON"]))
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
