"""YARN cluster mode: the driver runs in the application master's container, not on any Airflow worker.

- submit: ``spark-submit --master yarn --deploy-mode cluster`` with
  ``spark.yarn.submit.waitAppCompletion=false`` (spark-submit returns once YARN accepted the
  application), the run id as a YARN tag (``spark.yarn.tags``), ``spark.yarn.maxAppAttempts=1`` (always:
  the project's supervisor is the one restarter, see ``docs/cluster.md``), the queue, and the
  driver runtime shipped with the application (``--py-files`` of a deterministic zip, see
  :mod:`~airflow_streaming.targets.runtime_bundle`). The application id is read from spark-submit's
  output (``Submitted application application_...``); the handle is ``{app_id, rm_url}``.
- state: ``GET <rm>/ws/v1/cluster/apps/<id>``: NEW, NEW_SAVING, SUBMITTED, ACCEPTED, RUNNING -> ALIVE;
  FINISHED, FAILED, KILLED, or an application the RM does not know (404) -> GONE; an RM that does
  not answer -> UNKNOWN.
- kill: ``PUT <rm>/ws/v1/cluster/apps/<id>/state {"state": "KILLED"}``, only for an application whose
  tags carry the recorded run id AND this stream's tag AND this control location's tag, and whose name is
  this stream's (a record names an application id that anyone who can write the control directory can
  change; the tags were set by the submission - see docs/security.md for what a forger can still copy).
- endpoints: only the configured ResourceManagers (``cluster.resourcemanager_url`` or yarn-site.xml) are
  asked or sent a kill; the ``rm_url`` a record names is never used (a record naming another one is
  reported: a fake RM's RUNNING must not hide a dead driver).
- find: ``GET <rm>/ws/v1/cluster/apps?applicationTags=<run tag>&states=<live states>``.
- logs: the RM's ``amContainerLogs`` (the driver's container logs on its NodeManager).

Secret conf goes in spark-submit's 0600 properties file (shipped to the application master inside
Spark's staging ``__spark_conf__``, never on a command line) and is deleted once spark-submit returns.
"""

from __future__ import annotations

import dataclasses
import getpass
import logging
import os
import posixpath
import re
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import quote, urlencode, urlparse

from airflow_streaming.application_source import is_fetched
from airflow_streaming.control.contract import DriverRecord
from airflow_streaming.exceptions import StreamStateUnknownError
from airflow_streaming.reconcile.observation import Liveness
from airflow_streaming.targets.base import DriverState, LaunchPlan, control_digest
from airflow_streaming.targets.cluster import ClusterTarget, run_spark_submit, submit_failure
from airflow_streaming.targets.cluster_http import ClusterHttp, ClusterUnreachableError, HttpReply
from airflow_streaming.targets.runtime_bundle import bundle_path

log = logging.getLogger(__name__)

ALIVE_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")
GONE_STATES = frozenset({"FINISHED", "FAILED", "KILLED"})
RM_HINT = ("check cluster.resourcemanager_url (the RM's web address, default port 8088) and that it is reachable "
           "from this host")
_APP_ID = re.compile(r"\b(application_\d+_\d+)\b")
_SUBMITTED = re.compile(r"Submitted application (application_\d+_\d+)")


def liveness_of(app_state: str | None) -> Liveness:
    """The liveness of a YARN application state (``None``: the RM does not know the application)."""
    if app_state is None or app_state in GONE_STATES:
        return Liveness.GONE
    if app_state in ALIVE_STATES:
        return Liveness.ALIVE
    return Liveness.UNKNOWN


def run_tag(run_id: str) -> str:
    """The YARN application tag of a run (YARN lower-cases tags; at most 100 characters)."""
    return f"airflow-streaming-run-{run_id}".lower()[:100]


def stream_tag(stream: str) -> str:
    return f"airflow-streaming-stream-{stream}".lower()[:100]


def control_tag(control_dir: str) -> str:
    """The YARN tag of a stream's control location (a digest of its path: see ``targets.base.control_path``)."""
    return f"airflow-streaming-control-{control_digest(control_dir)}"


def app_tags(app: dict[str, Any]) -> set[str]:
    return {t.strip().lower() for t in str(app.get("applicationTags") or "").split(",") if t.strip()}


def rm_url_from_yarn_site(conf_dir: str | None) -> str | None:
    """``yarn.resourcemanager.webapp.address`` from ``$HADOOP_CONF_DIR/yarn-site.xml`` (first RM of an HA pair)."""
    if not conf_dir:
        return None
    try:
        root = ET.parse(os.path.join(conf_dir, "yarn-site.xml")).getroot()
    except (OSError, ET.ParseError):
        return None
    props = {p.findtext("name"): (p.findtext("value") or "").strip() for p in root.iter("property")}
    address = props.get("yarn.resourcemanager.webapp.address")
    if not address:
        ids = [i.strip() for i in (props.get("yarn.resourcemanager.ha.rm-ids") or "").split(",") if i.strip()]
        address = next((props[f"yarn.resourcemanager.webapp.address.{i}"] for i in ids
                        if props.get(f"yarn.resourcemanager.webapp.address.{i}")), None)
    if not address:
        host = props.get("yarn.resourcemanager.hostname")
        address = f"{host}:8088" if host else None
    return None if not address else (address if "://" in address else f"http://{address}")


class YarnClusterTarget(ClusterTarget):
    """A driver in a YARN application master (see the module docstring).

    :param settings: the spec's ``cluster`` settings: ``resourcemanager_url`` (default: from
        ``$HADOOP_CONF_DIR/yarn-site.xml``; several comma-separated for an HA pair), ``queue``,
        ``max_app_attempts`` (only 1: see :meth:`plan`), ``runtime_path``
        (the runtime pre-installed on every NodeManager instead of shipped), ``python``, ``archives``,
        ``driver_cores``, ``driver_memory``, ``spark_binary``, ``submit_args``.
    """

    kind = "yarn"

    def __init__(self, storage: Any, paths: Any, settings: dict[str, Any] | None = None):
        super().__init__(storage, paths, settings)
        rm = self.settings.get("resourcemanager_url") or rm_url_from_yarn_site(
            os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR"))
        if not rm:
            raise ValueError("cluster.resourcemanager_url: not set and no yarn.resourcemanager.webapp.address in "
                             "$HADOOP_CONF_DIR/yarn-site.xml; set it (e.g. http://resourcemanager:8088)")
        self.rm_urls = [u.strip().rstrip("/") for u in rm.split(",") if u.strip()]
        self.http = ClusterHttp(hint=RM_HINT)
        self.user = os.environ.get("HADOOP_USER_NAME") or getpass.getuser()

    # ------------------------------------------------------------------ submit
    def plan(self, spec: Any, run_id: str, launcher: str, runtime_args: list[str], conf: dict[str, str],
             secret_conf: dict[str, str], log_path: str, standby: bool = False) -> LaunchPlan:
        settings = self.settings
        if (settings.get("max_app_attempts") or 1) > 1 or settings.get("attempt_failures_validity_interval"):
            raise ValueError(
                "cluster.max_app_attempts > 1 / attempt_failures_validity_interval: YARN would re-attempt a failed "
                "driver itself, and the project's supervisor restarts it too - two restarts, and a re-attempt on "
                "another node waits on the failed attempt's lease. Leave max_app_attempts at 1 and put the attempts "
                "and window in the supervisor's restart policy (max_attempts, validity_interval_s; "
                "docs/supervision.md)")
        yarn_conf = {
            "spark.yarn.submit.waitAppCompletion": "false",
            # Always explicit: Spark's default is YARN's yarn.resourcemanager.am.max-attempts (2).
            "spark.yarn.maxAppAttempts": "1",
        }
        queue = getattr(spec, "queue", None) or settings.get("queue")
        if queue:  # the spec's queue, else cluster.queue (or the connection's)
            yarn_conf["spark.yarn.queue"] = queue
        if settings.get("python"):
            yarn_conf["spark.yarn.appMasterEnv.PYSPARK_PYTHON"] = settings["python"]
            yarn_conf["spark.executorEnv.PYSPARK_PYTHON"] = settings["python"]
        runtime_args = list(runtime_args)
        py_files: list[str] = []
        script_at = runtime_args.index("--script") + 1 if "--script" in runtime_args else None
        if settings.get("runtime_path"):
            launcher = f"local:{settings['runtime_path'].rstrip('/')}/spark_jobs/launch.py"
        else:
            py_files.append(bundle_path())
            if script_at is not None and not runtime_args[script_at].startswith("local:") \
                    and not is_fetched(runtime_args[script_at]):  # ship a submitting host's user script
                script = runtime_args[script_at]
                yarn_conf["spark.yarn.dist.files"] = ",".join(
                    filter(None, [conf.get("spark.yarn.dist.files", ""), script]))
                runtime_args[script_at] = os.path.basename(script)
        if script_at is not None and is_fetched(runtime_args[script_at]):
            # A fetched script already travels in --files (submit_fields.shipped_files), which YARN localizes into
            # the container's working directory (spark.yarn.dist.files, not SparkFiles): run it from there.
            runtime_args[script_at] = posixpath.basename(runtime_args[script_at])
        plan = super().plan(spec, run_id, launcher, runtime_args, {**yarn_conf, **conf}, secret_conf, log_path,
                            standby)
        tags = [t for t in (plan.conf.get("spark.yarn.tags") or "").split(",") if t]
        tags += [run_tag(run_id), stream_tag(spec.name), control_tag(self.paths.root)]
        plan = self.driver_env_conf(plan, "spark.yarn.appMasterEnv.", spec)
        return dataclasses.replace(plan, conf={**plan.conf, "spark.yarn.tags": ",".join(dict.fromkeys(tags))},
                                   py_files=[*py_files, *plan.py_files])

    def archives(self) -> list[str]:
        return list(self.settings.get("archives") or [])

    def queue(self, spec: Any) -> str | None:
        return None  # spark.yarn.queue in the plan's conf (see plan)

    def submit(self, plan: LaunchPlan) -> dict[str, Any]:
        code, output = run_spark_submit(self, plan, f"YARN cluster-mode submission of run {plan.run_id}")
        match = _SUBMITTED.search(output) or _APP_ID.search(output)
        if code != 0 or match is None:
            raise submit_failure(plan, code, output, "YARN submission",
                                 "check HADOOP_CONF_DIR/YARN_CONF_DIR on the Airflow worker, the queue and the "
                                 "ResourceManager's log" + ("" if match else "; no application id was printed"))
        app_id = match.group(1)
        self.note(plan.log_path, f"run {plan.run_id} is YARN application {app_id} ({self.rm_urls[0]}/cluster/app/"
                                 f"{app_id})")
        log.info("YARN application %s of run %s (RM %s)", app_id, plan.run_id, self.rm_urls[0])
        return {"app_id": app_id, "rm_url": self.rm_urls[0], "rm_urls": self.rm_urls}

    # ------------------------------------------------------------------ the RM
    def foreign_rm(self, handle: dict[str, Any]) -> str | None:
        """What a record's handle says of a ResourceManager that is not configured (``None``: nothing). Never
        asked: the endpoints come from the spec and the connection only."""
        named = [u.rstrip("/") for u in [*(handle.get("rm_urls") or []), handle.get("rm_url")] if isinstance(u, str) and u]
        others = [u for u in dict.fromkeys(named) if u not in self.rm_urls]
        if not others:
            return None
        message = (f"the driver record names the ResourceManager {', '.join(others)}, which is not configured "
                   f"(cluster.resourcemanager_url: {', '.join(self.rm_urls)}): asked the configured one only")
        log.warning("%s", message)
        return message

    def owner_problem(self, record: DriverRecord, app: dict[str, Any]) -> str | None:
        """Why application ``app`` is not the driver of ``record`` for this stream and control location
        (``None``: it is): its tags must carry the run, this stream and this control location, and its name
        must be this stream's."""
        tags = app_tags(app)
        wanted = {"run": run_tag(record.run_id), "stream": stream_tag(self.stream),
                  "control location": control_tag(self.paths.root)}
        missing = [f"{what} tag {tag}" for what, tag in wanted.items() if tag not in tags]
        if run_tag(record.run_id) not in tags:
            return f"its tags {sorted(tags)} do not carry run {record.run_id} (tag {run_tag(record.run_id)})"
        if missing:
            return (f"its tags {sorted(tags)} lack the {', '.join(missing)}: it is not a driver of stream "
                    f"{self.stream!r} at {self.paths.root}")
        name = str(app.get("name") or "")
        if name.rsplit(":", 1)[0] != self.stream:
            return f"it is named {name!r}, not after stream {self.stream!r}"
        return None

    def _rm_get(self, path: str, method: str = "GET", body: Any = None) -> HttpReply:
        """``method`` ``path`` at the configured RMs in turn (HA; a standby RM's redirect is followed by urllib) -
        never at one a record names. :class:`ClusterUnreachableError` when none answers."""
        error: ClusterUnreachableError | None = None
        for rm in self.rm_urls:
            try:
                reply = self.http.request(method, f"{rm}{path}", body)
            except ClusterUnreachableError as exc:
                error = error or exc
                continue
            if reply.status >= 500:
                error = error or ClusterUnreachableError(f"{method} {rm}{path}", reply.message(), RM_HINT)
                continue
            return reply
        raise error or ClusterUnreachableError(path, "no ResourceManager URL configured", RM_HINT)

    def application(self, handle: dict[str, Any]) -> dict[str, Any] | None:
        """The RM's ``app`` object of the recorded application, ``None`` if the RM does not know it."""
        app_id = str(handle.get("app_id") or "")
        reply = self._rm_get(f"/ws/v1/cluster/apps/{quote(app_id, safe='')}")
        if reply.status == 404:
            return None
        try:
            doc = reply.json()
        except ValueError as exc:
            raise ClusterUnreachableError(reply.url, str(exc), RM_HINT) from exc
        if not reply.ok or not isinstance(doc, dict) or not isinstance(doc.get("app"), dict):
            raise ClusterUnreachableError(reply.url, reply.message(), RM_HINT)
        return doc["app"]

    def state(self, record: DriverRecord) -> DriverState:
        app_id = record.handle.get("app_id")
        if not app_id:
            return DriverState(Liveness.GONE, f"no YARN application id recorded for run {record.run_id}")
        try:
            app = self.application(record.handle)
        except ClusterUnreachableError as exc:
            return DriverState(Liveness.UNKNOWN, f"cannot ask the ResourceManager about {app_id}: {exc}")
        if app is None:
            return DriverState(Liveness.GONE, f"the ResourceManager does not know {app_id} (finished and forgotten, "
                                              "or another cluster)", "NOT_FOUND")
        state = app.get("state")
        final = f", final status {app['finalStatus']}" if app.get("finalStatus") not in (None, "", "UNDEFINED") else ""
        diag = f": {str(app['diagnostics']).strip().splitlines()[0][:300]}" if app.get("diagnostics") else ""
        foreign = self.foreign_rm(record.handle)
        return DriverState(liveness_of(state), f"YARN application {app_id} of run {record.run_id} is {state}{final}"
                                               f"{diag}" + (f" ({foreign})" if foreign else ""), state)

    def kill(self, record: DriverRecord, grace: float) -> str:
        app_id = str(record.handle.get("app_id") or "")
        if not app_id:
            return f"nothing to kill: no YARN application id recorded for run {record.run_id}"
        try:
            app = self.application(record.handle)
        except ClusterUnreachableError as exc:
            message = f"cannot kill {app_id} of run {record.run_id} now: {exc}"
            log.error("%s", message)
            return message
        if app is None or app.get("state") in GONE_STATES:
            return f"nothing to kill: {app_id} is {'unknown to the RM' if app is None else app.get('state')}"
        problem = self.record_problem(record) or self.owner_problem(record, app)
        if problem is not None:
            message = f"refusing to kill {app_id}: {problem}; nothing was killed"
            log.error("%s", message)
            return message
        self.foreign_rm(record.handle)
        path = f"/ws/v1/cluster/apps/{quote(app_id, safe='')}/state?{urlencode({'user.name': self.user})}"
        try:
            reply = self._rm_get(path, "PUT", {"state": "KILLED"})  # the configured RMs only
        except ClusterUnreachableError as exc:
            message = f"kill of {app_id} (run {record.run_id}) not sent: {exc}"
            log.error("%s", message)
            return message
        if reply.status in (401, 403):
            message = (f"the ResourceManager refused to kill {app_id} ({reply.message()}): its web services need "
                       f"an authenticated user allowed to modify the application (as {self.user}); kill it with "
                       f"`yarn application -kill {app_id}`")
            log.error("%s", message)
            return message
        if reply.status not in (200, 202):
            message = f"kill of {app_id} (run {record.run_id}) failed at {reply.url}: {reply.message()}"
            log.error("%s", message)
            return message
        sent = f"kill of YARN application {app_id} (run {record.run_id}, tagged {run_tag(record.run_id)}) accepted"
        log.warning("%s", sent)
        return self.await_gone(record, sent, "application", max(grace, 1.0), poll=0.5, waited=grace)

    def find(self, run_id: str, record: DriverRecord | None = None) -> list[str]:
        query = urlencode({"applicationTags": run_tag(run_id), "states": ",".join(ALIVE_STATES)})
        try:
            reply = self._rm_get(f"/ws/v1/cluster/apps?{query}")
            doc = reply.json()
        except (ClusterUnreachableError, ValueError) as exc:
            raise StreamStateUnknownError(f"cannot tell whether run {run_id} was submitted to YARN: {exc}") from exc
        return [f"YARN application {app.get('id')} of run {run_id} is {app.get('state')}"
                for app in _run_apps(doc, run_id) if stream_tag(self.stream) in app_tags(app)]

    def adopt(self, run_id: str) -> dict[str, Any] | None:
        """The one live application tagged with ``run_id``."""
        query = urlencode({"applicationTags": run_tag(run_id), "states": ",".join(ALIVE_STATES)})
        try:
            apps = _run_apps(self._rm_get(f"/ws/v1/cluster/apps?{query}").json(), run_id)
        except (ClusterUnreachableError, ValueError):
            return None
        probe = DriverRecord(run_id, self.stream, "", "", "", "", "", 0.0, "")
        apps = [app for app in apps if self.owner_problem(probe, app) is None]
        if len(apps) != 1 or not apps[0].get("id"):
            return None
        return {"app_id": str(apps[0]["id"]), "rm_url": self.rm_urls[0], "rm_urls": self.rm_urls}

    # ------------------------------------------------------------------ for people
    def urls(self, record: DriverRecord) -> dict[str, str]:
        app_id = str(record.handle.get("app_id") or "")
        rm = self.rm_urls[0]
        links = {"resourcemanager_app": f"{rm}/cluster/app/{app_id}"}
        try:
            app = self.application(record.handle) or {}
        except ClusterUnreachableError:
            app = {}
        if app.get("trackingUrl"):
            links["tracking_url"] = app["trackingUrl"]
        if app.get("amContainerLogs"):
            links["driver_log"] = app["amContainerLogs"]
        return links

    def log_tail(self, record: DriverRecord, lines: int) -> str:
        """The driver's ``stdout`` from its NodeManager (``/ws/v1/node/containerlogs``), else the run's notes."""
        try:
            app = self.application(record.handle) or {}
        except ClusterUnreachableError:
            app = {}
        logs = str(app.get("amContainerLogs") or "")
        parsed = urlparse(logs)
        parts = parsed.path.strip("/").split("/")
        if logs and len(parts) >= 3 and parts[0] == "node" and parts[1] == "containerlogs":
            base = f"{parsed.scheme}://{parsed.netloc}/ws/v1/node/containerlogs/{parts[2]}"
            for name in ("stdout", "stderr"):
                try:
                    reply = self.http.request("GET", f"{base}/{name}?size=-65536")
                except ClusterUnreachableError:
                    break
                if reply.ok and reply.text().strip():
                    return "\n".join(reply.text().splitlines()[-lines:])
        tail = super().log_tail(record, lines)
        hint = f"(driver logs: {logs or 'not available'}; after the application ends: yarn logs -applicationId " \
               f"{record.handle.get('app_id')})"
        return "\n".join([*tail.splitlines(), hint][-lines:])


def _run_apps(doc: Any, run_id: str) -> list[dict[str, Any]]:
    """The live applications tagged with ``run_id`` in a ResourceManager's application list."""
    apps = ((doc.get("apps") or {}).get("app") or []) if isinstance(doc, dict) else []
    found = []
    for app in apps:
        tags = {t.strip().lower() for t in str(app.get("applicationTags") or "").split(",")}
        if run_tag(run_id) in tags and app.get("state") in ALIVE_STATES:
            found.append(app)
    return found
