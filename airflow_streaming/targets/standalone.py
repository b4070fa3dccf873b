"""Spark standalone **cluster** mode for Python drivers, through the master's REST submission server.

spark-submit refuses cluster mode for Python on standalone ("Cluster deploy mode is currently not
supported for python applications on standalone clusters"), but the master's REST server
(``spark.master.rest.enabled=true``, port 6066) runs any main class on a worker, and
``org.apache.spark.deploy.PythonRunner`` with ``appArgs = [script.py, <py-files>, args...]`` is what
spark-submit itself runs for a Python application. The driver then lives on a worker and outlives
any Airflow worker.

- submit: ``POST <rest>/v1/submissions/create``; the handle is ``{submission_id, rest_url,
  master_ui_url}`` - everything another host needs to check or kill the driver.
- state: ``GET <rest>/v1/submissions/status/<id>``: SUBMITTED/RUNNING/RELAUNCHING -> ALIVE,
  FINISHED/KILLED/FAILED/ERROR or a submission the master does not know -> GONE, a master that does
  not answer -> UNKNOWN (never GONE).
- kill: ``POST <rest>/v1/submissions/kill/<id>`` for the recorded submission only, after checking on
  the worker that the driver's launch command carries the recorded run id.
- find: the master's ``/json/`` ``activedrivers``; each one's run id is read from the launch command
  at the top of its ``stderr`` on the worker (the master's JSON does not show a driver's arguments).

Secrets: ``sparkProperties`` become ``-D`` options on the driver JVM's command line on the worker
(measured; ``ps`` shows them there), so secret conf travels in the request's
``environmentVariables`` as ``AIRFLOW_STREAMING_SECRET_CONF`` (JSON), which the runtime applies to
its SparkSession and removes from its environment.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import Any
from urllib.parse import quote, urlparse

from airflow_streaming.control.contract import DriverRecord
from airflow_streaming.exceptions import DriverStartError, StreamStateUnknownError
from airflow_streaming.reconcile.observation import Liveness
from airflow_streaming.submit_fields import spark_properties
from airflow_streaming.targets.base import DriverState, LaunchPlan
from airflow_streaming.targets.cluster import RUN_ID_CONF, SECRET_CONF_ENV, ClusterTarget
from airflow_streaming.targets.cluster_http import ClusterHttp, ClusterUnreachableError

log = logging.getLogger(__name__)

DEFAULT_REST_PORT = 6066
DEFAULT_UI_PORT = 8080
ALIVE_STATES = frozenset({"SUBMITTED", "RUNNING", "RELAUNCHING"})
GONE_STATES = frozenset({"FINISHED", "KILLED", "FAILED", "ERROR"})
EXITED_STATES = frozenset({"FINISHED", "KILLED", "FAILED"})
"""Reported by the worker after the driver's process ended. ERROR is not among them: the master also
says ERROR when it lost the driver's worker, whose driver may still run (a network partition)."""
REST_HINT = ("check that the master runs with spark.master.rest.enabled=true, that its REST port (default 6066, "
             "spark.master.rest.port) is reachable from this host, and cluster.rest_url")
_LAUNCH_FLAG = re.compile(r'"(--run-id|--stream|--control-dir)" "([^"]+)"')


def liveness_of(driver_state: str | None) -> Liveness:
    """The liveness of a standalone driver state (``None``: the master does not know the submission)."""
    if driver_state is None:
        return Liveness.GONE
    if driver_state in ALIVE_STATES:
        return Liveness.ALIVE
    if driver_state in GONE_STATES:
        return Liveness.GONE
    return Liveness.UNKNOWN  # the master's own UNKNOWN state


def _host_urls(master: str, port: int, scheme: str = "http") -> list[str]:
    """``<scheme>://host:port`` for every host of ``spark://h1:7077,h2:7077``."""
    hosts = [urlparse("spark://" + part.removeprefix("spark://")).hostname for part in master.split(",")]
    return [f"{scheme}://{host}:{port}" for host in hosts if host]


def _spark_version() -> str:
    try:
        from importlib.metadata import version

        return version("pyspark")
    except Exception:  # noqa: BLE001 - only sent as information to the master
        return "4.2.0"


class StandaloneClusterTarget(ClusterTarget):
    """A driver on a standalone worker, submitted through the master's REST server (module docstring).

    :param settings: the spec's ``cluster`` settings: ``rest_url`` (default ``<rest_scheme>://<master host>:
        <rest_port>``, ``http`` and 6066 unless set - the Spark connection's ``rest-scheme`` / ``rest-port``;
        several comma-separated for masters in HA), ``master_ui_url`` (default ``http://<master host>:8080``),
        ``runtime_path`` (the project's root as the workers see it), ``python``, ``driver_cores``,
        ``driver_memory``.
    :param master: the spec's ``spark://host:port`` master URL.
    """

    kind = "standalone-cluster"

    def __init__(self, storage: Any, paths: Any, settings: dict[str, Any] | None = None, master: str = ""):
        super().__init__(storage, paths, settings)
        self.master = master
        rest = self.settings.get("rest_url")
        self.rest_urls = ([u.strip().rstrip("/") for u in rest.split(",") if u.strip()] if rest
                          else _host_urls(master, int(self.settings.get("rest_port") or DEFAULT_REST_PORT),
                                          str(self.settings.get("rest_scheme") or "http")))
        if not self.rest_urls:
            raise ValueError(f"cluster.rest_url: cannot derive the REST server of master {master!r}; set it "
                             "(e.g. http://spark-master:6066)")
        ui = self.settings.get("master_ui_url")
        self.master_ui_url = ui.rstrip("/") if ui else (_host_urls(master, DEFAULT_UI_PORT) or [""])[0]
        self.http = ClusterHttp(hint=REST_HINT)

    # ------------------------------------------------------------------ submit
    def plan(self, spec: Any, run_id: str, launcher: str, runtime_args: list[str], conf: dict[str, str],
             secret_conf: dict[str, str], log_path: str, standby: bool = False) -> LaunchPlan:
        if self.kerberos_args():
            raise ValueError(
                "cluster.principal / cluster.keytab (or the Spark connection's principal and keytab extras): the "
                "standalone master's REST submission has no Kerberos login (Spark's delegation tokens work on YARN "
                "and Kubernetes). Use a Spark connection without them for this stream, or run it on YARN or "
                "Kubernetes")
        root = self.settings.get("runtime_path")
        if root:
            launcher = f"{root.rstrip('/')}/spark_jobs/launch.py"
        plan = super().plan(spec, run_id, launcher, runtime_args, conf, secret_conf, log_path, standby)
        # No spark-submit runs: the spec's SparkSubmitOperator fields travel as the Spark conf spark-submit would
        # have made of them (explicit options win over spark_conf, as on spark-submit); PythonRunner's own
        # py-files argument puts the local ones on the driver's PYTHONPATH (it refuses remote ones, which the
        # driver's SparkContext fetches through spark.files / spark.submit.pyFiles). env_vars are the plan's env:
        # the request's environmentVariables.
        local_py_files = [f for f in plan.py_files if f.startswith(("/", "file:", "local:"))]
        return dataclasses.replace(plan, conf={**plan.conf, **spark_properties(spec)}, py_files=local_py_files,
                                   submit_args=[])

    def request_body(self, plan: LaunchPlan) -> dict[str, Any]:
        """The ``CreateSubmissionRequest`` of ``plan`` (secret conf only in ``environmentVariables``)."""
        env = {k: v for k, v in plan.env.items() if k != "PATH"}
        python = self.settings.get("python") or env.get("PYSPARK_PYTHON")
        if python:
            env["PYSPARK_PYTHON"] = python
            env["PYSPARK_DRIVER_PYTHON"] = self.settings.get("python") or env.get("PYSPARK_DRIVER_PYTHON", python)
        if plan.secret_conf:
            env[SECRET_CONF_ENV] = json.dumps(plan.secret_conf, sort_keys=True)
        properties = {
            **plan.conf,
            "spark.master": self.master,
            "spark.submit.deployMode": "cluster",
            "spark.app.name": plan.name,
            "spark.driver.supervise": "false",
            RUN_ID_CONF: plan.run_id,
        }
        if python:
            properties.setdefault("spark.pyspark.python", python)
            properties.setdefault("spark.pyspark.driver.python", env["PYSPARK_DRIVER_PYTHON"])
        resource = plan.launcher if "://" in plan.launcher or plan.launcher.startswith("file:") \
            else f"file:{plan.launcher}"
        return {
            "action": "CreateSubmissionRequest",
            "appResource": resource,
            "mainClass": "org.apache.spark.deploy.PythonRunner",
            # PythonRunner: args(0) the script, args(1) comma-separated py-files ("" for none), then its args.
            "appArgs": [plan.launcher, ",".join(plan.py_files), *plan.runtime_args],
            "clientSparkVersion": _spark_version(),
            "environmentVariables": env,
            "sparkProperties": properties,
        }

    def describe_command(self, plan: LaunchPlan) -> str:
        """The REST submission as one line for the record (secret conf only counted, never shown)."""
        from airflow_streaming.targets.submit_command import masked_command

        body = self.request_body(plan)
        props = [f"{k}={v}" for k, v in sorted(body["sparkProperties"].items())]
        secrets = f" +{len(plan.secret_conf)} secret conf entries in the driver's environment" if plan.secret_conf else ""
        return masked_command([f"POST {self.rest_urls[0]}/v1/submissions/create", body["mainClass"],
                               *body["appArgs"][:1], repr(body["appArgs"][1]), *body["appArgs"][2:],
                               "sparkProperties:", *props]) + secrets

    def submit(self, plan: LaunchPlan) -> dict[str, Any]:
        body = self.request_body(plan)
        failures = []
        for rest in self.rest_urls:
            try:
                reply = self.http.request("POST", f"{rest}/v1/submissions/create", body)
            except ClusterUnreachableError as exc:
                failures.append(str(exc))
                continue
            try:
                doc = reply.json()
            except ValueError as exc:
                failures.append(str(exc))
                continue
            if reply.ok and doc.get("success") and doc.get("submissionId"):
                handle = {"submission_id": doc["submissionId"], "rest_url": rest, "master_ui_url": self.master_ui_url,
                          "master": self.master}
                self.note(plan.log_path, f"run {plan.run_id} submitted to {rest} as {doc['submissionId']} "
                                         f"(driver output on its worker: see the submission's stdout/stderr)")
                log.info("standalone cluster submission %s of run %s via %s (master UI %s)",
                         doc["submissionId"], plan.run_id, rest, self.master_ui_url)
                return handle
            message = doc.get("message") if isinstance(doc, dict) else None
            failures.append(f"{rest} refused the submission: HTTP {reply.status}: {message or doc}")
            if reply.status < 500 and reply.status != 404:
                break  # the master answered and said no: another master would say the same
        detail = "; ".join(failures)
        self.note(plan.log_path, f"submission of run {plan.run_id} failed: {detail}")
        raise DriverStartError(f"cannot submit run {plan.run_id} of {plan.name} to the standalone master "
                               f"{self.master}: {detail}. Nothing runs; {REST_HINT}")

    # ------------------------------------------------------------------ status
    def _status(self, handle: dict[str, Any]) -> dict[str, Any]:
        """The master's status of the recorded submission; :class:`ClusterUnreachableError` if no REST
        server answers."""
        sid = quote(str(handle.get("submission_id") or ""), safe="")
        errors: list[ClusterUnreachableError] = []
        for rest in self.rest_urls:  # the configured REST servers only, never one a record names
            try:
                reply = self.http.request("GET", f"{rest}/v1/submissions/status/{sid}")
                doc = reply.json()
            except ClusterUnreachableError as exc:
                errors.append(exc)
                continue
            except ValueError as exc:
                errors.append(ClusterUnreachableError(f"GET {rest}/v1/submissions/status/{sid}", str(exc), REST_HINT))
                continue
            if isinstance(doc, dict) and doc.get("action") == "SubmissionStatusResponse":
                return doc
            errors.append(ClusterUnreachableError(f"GET {rest}/v1/submissions/status/{sid}",
                                                  f"unexpected reply HTTP {reply.status}: {str(doc)[:200]}", REST_HINT))
        raise errors[0] if errors else ClusterUnreachableError("(no REST URL)", "nothing to ask", REST_HINT)

    def state(self, record: DriverRecord) -> DriverState:
        sid = record.handle.get("submission_id")
        if not sid:
            return DriverState(Liveness.GONE, f"no standalone submission id recorded for run {record.run_id}")
        try:
            doc = self._status(record.handle)
        except ClusterUnreachableError as exc:
            return DriverState(Liveness.UNKNOWN, f"cannot ask the standalone master about {sid}: {exc}")
        if not doc.get("success"):
            return DriverState(Liveness.GONE, f"the master does not know submission {sid} (finished and forgotten, "
                                              "or submitted to another master)", "NOT_FOUND")
        driver_state = doc.get("driverState")
        foreign = self.foreign_endpoints(record.handle)
        why_foreign = f" ({foreign})" if foreign else ""
        where = f" on worker {doc['workerHostPort']}" if doc.get("workerHostPort") else ""
        why = f": {doc['message'].splitlines()[0]}" if doc.get("message") else ""
        return DriverState(liveness_of(driver_state), f"standalone submission {sid} of run {record.run_id} is "
                                                      f"{driver_state}{where}{why}{why_foreign}", driver_state,
                           exited=driver_state in EXITED_STATES)

    # ------------------------------------------------------------------ the worker's view of a driver
    def _master_json(self, ui: str | None = None) -> dict[str, Any]:
        url = f"{(ui or self.master_ui_url).rstrip('/')}/json/"
        reply, doc = self.http.get_json(url)
        if not reply.ok or not isinstance(doc, dict):
            raise ClusterUnreachableError(f"GET {url}", f"HTTP {reply.status}",
                                          "check cluster.master_ui_url (the master's web UI, default port 8080)")
        return doc

    def _worker_ui(self, worker_id: str | None, master_doc: dict[str, Any]) -> str | None:
        for worker in master_doc.get("workers") or []:
            if worker.get("id") == worker_id:
                return (worker.get("webuiaddress") or "").rstrip("/") or None
        return None

    def _driver_log(self, worker_ui: str, sid: str, log_type: str, length: int, from_start: bool = False) -> str:
        """The driver's ``stdout``/``stderr`` file on its worker (the worker UI's ``/log`` endpoint)."""
        offset = "&offset=0" if from_start else ""
        url = f"{worker_ui}/log?driverId={quote(sid, safe='')}&logType={log_type}{offset}&byteLength={length}"
        reply = self.http.request("GET", url)
        if not reply.ok:
            raise ClusterUnreachableError(f"GET {url}", reply.message(), "check the worker's web UI")
        text = reply.text()
        if text.startswith("==== Bytes"):
            text = text.split("\n", 1)[1] if "\n" in text else ""
        return text

    def foreign_endpoints(self, handle: dict[str, Any]) -> str | None:
        """What a record's handle says of a REST server or master UI that is not configured (``None``:
        nothing); never asked - the endpoints come from the spec and the connection only."""
        named = {"REST server": handle.get("rest_url"), "master UI": handle.get("master_ui_url")}
        configured = {"REST server": self.rest_urls, "master UI": [self.master_ui_url]}
        others = [f"the {what} {url}" for what, url in named.items()
                  if isinstance(url, str) and url and url.rstrip("/") not in configured[what]]
        if not others:
            return None
        message = (f"the driver record names {' and '.join(others)}, not configured (cluster.rest_url / "
                   "master_ui_url): asked the configured ones only")
        log.warning("%s", message)
        return message

    def launch_run_id(self, sid: str, worker_id: str | None, master_doc: dict[str, Any]) -> str | None:
        """The ``--run-id`` on the launch command of driver ``sid`` (see :meth:`launch_flags`)."""
        return (self.launch_flags(sid, worker_id, master_doc) or {}).get("--run-id")

    def launch_flags(self, sid: str, worker_id: str | None, master_doc: dict[str, Any]) -> dict[str, str] | None:
        """``--run-id``, ``--stream`` and ``--control-dir`` on the launch command of driver ``sid`` (first line
        of its stderr on the worker); ``None`` when it cannot be read (not launched yet, worker UI unreachable)."""
        worker_ui = self._worker_ui(worker_id, master_doc)
        if not worker_ui:
            return None
        try:
            head = self._driver_log(worker_ui, sid, "stderr", 65536, from_start=True)
        except ClusterUnreachableError as exc:
            log.info("cannot read the launch command of %s: %s", sid, exc)
            return None
        flags: dict[str, str] = {}
        for flag, value in _LAUNCH_FLAG.findall(head.split("\n=====", 1)[0]):
            flags.setdefault(flag, value)
        return flags or None

    # ------------------------------------------------------------------ kill and find
    def kill(self, record: DriverRecord, grace: float) -> str:
        sid = record.handle.get("submission_id")
        if not sid:
            return f"nothing to kill: no standalone submission id recorded for run {record.run_id}"
        state = self.state(record)
        if state.liveness == Liveness.GONE:
            return f"nothing to kill: {state.detail}"
        if state.liveness == Liveness.UNKNOWN:
            message = f"cannot kill {sid} of run {record.run_id} now: {state.detail}"
            log.error("%s", message)
            return message
        problem = self.record_problem(record)
        try:
            status = self._status(record.handle)
            launched = self.launch_flags(sid, status.get("workerId"), self._master_json())
        except ClusterUnreachableError as exc:
            launched = None
            log.info("cannot cross-check %s on its worker: %s", sid, exc)
        if problem is None and launched is None:
            problem = (f"the launch command of {sid} cannot be read on its worker (its UI: see cluster.master_ui_url), "
                       f"so nothing proves that it is run {record.run_id} of this stream; if it is, kill it with "
                       f"`spark-class org.apache.spark.deploy.Client kill {self.master} {sid}`")
        elif problem is None and launched is not None and launched.get("--run-id") != record.run_id:
            problem = (f"its launch command carries run {launched.get('--run-id')}, not the recorded run "
                       f"{record.run_id} (a record pointing at another submission)")
        elif problem is None and launched is not None:
            problem = self.launch_problem(record.run_id, launched.get("--stream"), launched.get("--control-dir"))
        if problem is not None:
            message = f"refusing to kill {sid}: {problem}; nothing was killed"
            log.error("%s", message)
            return message
        proof = "its launch command on the worker carries the run id, the stream and the control directory"
        rest = self.rest_urls[0]
        try:
            reply = self.http.request("POST", f"{rest}/v1/submissions/kill/{quote(sid, safe='')}")
            doc = reply.json()
        except (ClusterUnreachableError, ValueError) as exc:
            message = f"kill of {sid} (run {record.run_id}) not sent: {exc}"
            log.error("%s", message)
            return message
        sent = f"kill of {sid} (run {record.run_id}; identified by {proof}) sent to {rest}: {doc.get('message')}"
        log.warning("%s", sent)
        return self.await_gone(record, sent, "driver", max(grace, 1.0), poll=0.3, waited=grace)

    def find(self, run_id: str, record: DriverRecord | None = None) -> list[str]:
        found: list[str] = []
        known: set[str] = set()
        for rec in self.recorded(run_id, record):
            state = self.state(rec)
            if state.liveness == Liveness.UNKNOWN:
                raise StreamStateUnknownError(f"cannot tell whether run {run_id} runs: {state.detail}")
            known.add(str(rec.handle.get("submission_id")))
            if state.alive:
                found.append(state.detail)
        for sid, driver in self._unrecorded(run_id, known):
            found.append(f"standalone submission {sid} of run {run_id} is {driver.get('state')} "
                         f"(found on the master, not recorded)")
        return found

    def adopt(self, run_id: str) -> dict[str, Any] | None:
        """The one active submission whose launch command on its worker carries ``run_id``."""
        try:
            found = self._unrecorded(run_id, set())
        except StreamStateUnknownError:
            return None
        if len(found) != 1:
            return None
        return {"submission_id": found[0][0], "rest_url": self.rest_urls[0], "master_ui_url": self.master_ui_url,
                "master": self.master}

    def _unrecorded(self, run_id: str, known: set[str]) -> list[tuple[str, dict[str, Any]]]:
        """(submission id, the master's entry) of active drivers of ``run_id`` not in ``known``."""
        try:
            master_doc = self._master_json()
        except ClusterUnreachableError as exc:
            raise StreamStateUnknownError(f"cannot tell whether run {run_id} was submitted: {exc}") from exc
        found = []
        for driver in master_doc.get("activedrivers") or []:
            sid = driver.get("id")
            if not sid or sid in known:
                continue
            flags = self.launch_flags(sid, driver.get("worker"), master_doc) or {}
            launched = flags.get("--run-id")
            if launched == run_id and self.launch_problem(run_id, flags.get("--stream"), flags.get("--control-dir")) is None:
                found.append((str(sid), driver))
            elif launched is None:
                log.info("active driver %s (%s) has no readable launch command yet: cannot tell its run",
                         sid, driver.get("state"))
        return found

    # ------------------------------------------------------------------ for people
    def urls(self, record: DriverRecord) -> dict[str, str]:
        sid = str(record.handle.get("submission_id") or "")
        ui = self.master_ui_url
        rest = self.rest_urls[0]
        links = {"master_ui": ui, "submission_status": f"{rest}/v1/submissions/status/{sid}"}
        try:
            worker_ui = self._worker_ui(self._status(record.handle).get("workerId"), self._master_json(ui))
        except ClusterUnreachableError:
            worker_ui = None
        if worker_ui:
            links["driver_log"] = f"{worker_ui}/logPage/?driverId={sid}&logType=stdout"
            links["driver_jvm_log"] = f"{worker_ui}/logPage/?driverId={sid}&logType=stderr"
        return links

    def log_tail(self, record: DriverRecord, lines: int) -> str:
        """The driver's Python output (its ``stdout`` on the worker), else the run's note in the control log."""
        sid = str(record.handle.get("submission_id") or "")
        try:
            status = self._status(record.handle)
            worker_ui = self._worker_ui(status.get("workerId"), self._master_json())
            if worker_ui:
                text = self._driver_log(worker_ui, sid, "stdout", 256 * 1024)
                if not text.strip():
                    text = self._driver_log(worker_ui, sid, "stderr", 256 * 1024)
                return "\n".join(text.splitlines()[-lines:])
        except ClusterUnreachableError as exc:
            note = f"(the driver's output on its worker cannot be read: {exc})"
            return "\n".join([*super().log_tail(record, lines).splitlines(), note][-lines:])
        return super().log_tail(record, lines)
