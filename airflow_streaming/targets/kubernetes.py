"""Kubernetes cluster mode: the driver is a pod, not a process on any Airflow worker.

- submit: ``spark-submit --master k8s://... --deploy-mode cluster`` with
  ``spark.kubernetes.submission.waitAppCompletion=false``, a deterministic driver pod name
  (:func:`driver_pod_name`: stream + run id, DNS-safe, at most 63 characters), labels carrying the
  run id and the stream on the driver and the executors, the image, namespace and service account
  from the spec. The handle is ``{namespace, pod, api_server}``.
- state: ``GET /api/v1/namespaces/<ns>/pods/<pod>``: phase Pending/Running -> ALIVE,
  Succeeded/Failed or 404 -> GONE, an API server that does not answer (or refuses us) -> UNKNOWN.
- kill: ``DELETE`` the driver pod with a grace period - only a pod whose labels carry this stream, this
  control location (a digest: ``CONTROL_LABEL``), the recorded run id and ``spark-role=driver``. Spark's executors, config map and service are owned by the driver
  pod and go with it.
- find: ``GET /api/v1/namespaces/<ns>/pods?labelSelector=airflow-streaming/run-id=<run>,spark-role=driver``.

The API is asked through the official Kubernetes Python client (:mod:`.kube_api`, extra
``kubernetes``). Auth: a kubeconfig (``cluster.kubeconfig``, ``cluster.kube_context``: client
certificates, exec plugins, OIDC - its context's server must be the spec's API server), or a bearer
token read from ``cluster.kube_token_file`` and the CA bundle ``cluster.kube_ca_file``; by default the
pod's own service account (``/var/run/secrets/kubernetes.io/serviceaccount``) when Airflow itself runs
in the cluster. The token is read at every request and never logged; credentials never go over plain
http unless ``cluster.allow_plain_http: true``.

The runtime is either in the image (``cluster.runtime_path``) or shipped with the application
(``--py-files`` of the runtime zip, which needs ``spark.kubernetes.file.upload.path``).

Secret conf never reaches spark-submit: Spark writes every conf spark-submit knows - its properties
file included - into the driver's ConfigMap (``spark.properties``), readable by anyone who may read
ConfigMaps in the namespace. Instead the target creates a Kubernetes **Secret** of the run
(:func:`conf_secret_name`, labelled with the run id and stream) holding the secret conf as JSON, and
spark-submit only gets ``spark.kubernetes.driver.secretKeyRef.AIRFLOW_STREAMING_SECRET_CONF=<secret>:
conf.json``: the driver container gets it as an environment variable, which the runtime applies to
its SparkSession and removes (as on a standalone cluster). Once the pod exists the Secret is owned by
it (``ownerReferences``: Kubernetes deletes it with the pod); a failed submission and a kill delete it
at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
from typing import Any
from urllib.parse import quote

from airflow_streaming.control.contract import DriverRecord
from airflow_streaming.exceptions import DriverStartError, SpecError, StreamStateUnknownError
from airflow_streaming.reconcile.observation import Liveness
from airflow_streaming.submit_fields import PATH_FIELDS, is_local_path
from airflow_streaming.targets.base import DriverState, LaunchPlan, control_digest
from airflow_streaming.targets.cluster import SECRET_CONF_ENV, ClusterTarget, run_spark_submit, submit_failure
from airflow_streaming.targets.cluster_http import ClusterUnreachableError
from airflow_streaming.targets.kube_api import KubeApi
from airflow_streaming.targets.runtime_bundle import bundle_path

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
RUN_LABEL = "airflow-streaming/run-id"
STREAM_LABEL = "airflow-streaming/stream"
CONTROL_LABEL = "airflow-streaming/control"
"""A digest of the stream's control location's path (``targets.base.control_digest``)."""
DRIVER_CONTAINER = "spark-kubernetes-driver"
ALIVE_PHASES = frozenset({"Pending", "Running"})
GONE_PHASES = frozenset({"Succeeded", "Failed"})
API_HINT = ("check cluster.api_server (or the k8s:// master), that the API server is reachable from this host, "
            "cluster.kube_token_file / kube_ca_file, and that the service account may get, list and delete pods "
            "in the namespace")
SECRET_CONF_KEY = "conf.json"
SECRET_KEY_REF = f"spark.kubernetes.driver.secretKeyRef.{SECRET_CONF_ENV}"
DRIVER_ENV_PREFIX = "spark.kubernetes.driverEnv."
EXECUTOR_ENV_PREFIX = "spark.kubernetes.executorEnv."
"""Not a Spark setting (executors take ``spark.executorEnv.<NAME>``): refused, see ``refuse_unreachable_env``."""
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_SUBMISSION = re.compile(r"submission ID (\S+?):(\S+) into Kubernetes")
_POD_NAME = re.compile(r"pod name: (\S+)")


def liveness_of(phase: str | None) -> Liveness:
    """The liveness of a pod phase (``None``: the pod does not exist)."""
    if phase is None or phase in GONE_PHASES:
        return Liveness.GONE
    if phase in ALIVE_PHASES:
        return Liveness.ALIVE
    return Liveness.UNKNOWN  # phase "Unknown": the node does not report


def _dns_label(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")


def driver_pod_name(stream: str, run_id: str) -> str:
    """``<stream>-<run id>-driver``, lower-cased, DNS-1123 safe, at most 63 characters; a longer one is
    shortened and made unique again with a hash of both. Deterministic: the same run gets the same name."""
    name = f"{_dns_label(stream)}-{_dns_label(run_id)}"
    if len(name) > 56:
        digest = hashlib.sha256(f"{stream}\0{run_id}".encode()).hexdigest()[:8]
        name = f"{name[:47].rstrip('-')}-{digest}"
    return f"{name}-driver"


def conf_secret_name(pod: str) -> str:
    """The name of the Secret holding a run's secret conf: its driver pod's name + ``-conf``."""
    return f"{pod}-conf"


def label_value(text: str) -> str:
    """``text`` as a label value (``[A-Za-z0-9._-]``, at most 63, alphanumeric at both ends); hashed if it
    does not fit, so that it stays unique."""
    if _LABEL_VALUE.match(text):
        return text
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", text).strip("-._")
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{cleaned[:54].rstrip('-._')}-{digest}" if cleaned else digest


class KubernetesClusterTarget(ClusterTarget):
    """A driver pod (see the module docstring).

    :param settings: the spec's ``cluster`` settings: ``image`` (required), ``namespace`` (default
        ``default``), ``service_account``, ``api_server`` (default: from the master), ``kubeconfig``,
        ``kube_context``, ``kube_token_file``, ``kube_ca_file``, ``verify_tls``, ``allow_plain_http``, ``runtime_path`` (the runtime inside the image),
        ``pod_template_file``, ``python``, ``archives``, ``driver_cores``, ``driver_memory``, ``spark_binary``.
    :param master: the spec's ``k8s://https://host:port`` master URL.
    """

    kind = "kubernetes"

    def __init__(self, storage: Any, paths: Any, settings: dict[str, Any] | None = None, master: str = ""):
        super().__init__(storage, paths, settings)
        self.master = master
        api = self.settings.get("api_server") or master.removeprefix("k8s://")
        if not api:
            raise ValueError("cluster.api_server: not set and the master is not k8s://https://host:port")
        self.api_server = (api if "://" in api else f"https://{api}").rstrip("/")
        self.namespace = self.settings.get("namespace") or "default"
        self.kubeconfig = self.settings.get("kubeconfig")
        self.token_file = None if self.kubeconfig else self.settings.get("kube_token_file") or _in_cluster("token")
        self.ca_file = None if self.kubeconfig else self.settings.get("kube_ca_file") or _in_cluster("ca.crt")
        self._api: KubeApi | None = None

    @property
    def api(self) -> KubeApi:
        """The API server's client (the official Kubernetes client: extra ``kubernetes``); a ``ValueError``
        saying how to install it when it is missing."""
        if self._api is None:
            self._api = KubeApi(self.api_server, API_HINT, token_file=self.token_file, ca_file=self.ca_file,
                                verify_tls=self.settings.get("verify_tls", True),
                                allow_plain_http=self.settings.get("allow_plain_http") is True,
                                kubeconfig=self.kubeconfig, context=self.settings.get("kube_context"))
        return self._api

    # ------------------------------------------------------------------ submit
    def plan(self, spec: Any, run_id: str, launcher: str, runtime_args: list[str], conf: dict[str, str],
             secret_conf: dict[str, str], log_path: str, standby: bool = False) -> LaunchPlan:
        settings = self.settings
        if not settings.get("image"):
            raise ValueError("cluster.image: Kubernetes cluster mode needs the driver's container image (Spark 4.2 "
                             "with Python, the provider's runtime dependencies and - unless shipped - the runtime)")
        self.refuse_unreachable_env(secret_conf)
        pod = driver_pod_name(spec.name, run_id)
        run_label, stream_label = label_value(run_id), label_value(spec.name)
        k8s_conf = {
            "spark.kubernetes.submission.waitAppCompletion": "false",
            "spark.kubernetes.namespace": self.namespace,
            "spark.kubernetes.container.image": settings["image"],
            "spark.kubernetes.driver.pod.name": pod,
            f"spark.kubernetes.driver.label.{RUN_LABEL}": run_label,
            f"spark.kubernetes.driver.label.{STREAM_LABEL}": stream_label,
            f"spark.kubernetes.driver.label.{CONTROL_LABEL}": control_digest(self.paths.root),
            f"spark.kubernetes.executor.label.{RUN_LABEL}": run_label,
            f"spark.kubernetes.executor.label.{STREAM_LABEL}": stream_label,
        }
        if settings.get("service_account"):
            k8s_conf["spark.kubernetes.authenticate.driver.serviceAccountName"] = settings["service_account"]
        if settings.get("pod_template_file"):
            k8s_conf["spark.kubernetes.driver.podTemplateFile"] = settings["pod_template_file"]
        if self.ca_file:
            k8s_conf["spark.kubernetes.authenticate.submission.caCertFile"] = self.ca_file
        if self.token_file:
            k8s_conf["spark.kubernetes.authenticate.submission.oauthTokenFile"] = self.token_file
        if self.kubeconfig and settings.get("kube_context"):
            k8s_conf["spark.kubernetes.context"] = settings["kube_context"]
        py_files: list[str] = []
        if settings.get("runtime_path"):
            launcher = f"local://{settings['runtime_path'].rstrip('/')}/spark_jobs/launch.py"
        else:
            if not conf.get("spark.kubernetes.file.upload.path"):
                raise ValueError(
                    "spark_conf.spark.kubernetes.file.upload.path: shipping the driver runtime to a pod needs an "
                    "upload location the pods can read (s3a://..., hdfs://...); set it, or build the runtime into "
                    "the image and set cluster.runtime_path")
            py_files.append(bundle_path())
        if secret_conf:  # delivered through the run's Secret, never through spark-submit (module docstring)
            k8s_conf[SECRET_KEY_REF] = f"{conf_secret_name(pod)}:{SECRET_CONF_KEY}"
        plan = super().plan(spec, run_id, launcher, runtime_args, {**k8s_conf, **conf}, secret_conf, log_path,
                            standby)
        # The pod name, run labels and the secret's reference are how the driver is found again and gets its
        # secret conf: never overridden by spark_conf.
        fixed = {k: v for k, v in k8s_conf.items() if k.endswith((".pod.name", RUN_LABEL)) or k == SECRET_KEY_REF}
        self.refuse_unshippable(spec, plan.conf)
        plan = self.driver_env_conf(plan, DRIVER_ENV_PREFIX, spec)
        secret_env = [n for n in getattr(spec, "env_vars", None) or {}
                      if f"{DRIVER_ENV_PREFIX}{n}" in plan.secret_conf]
        if secret_env:
            name = secret_env[0]
            raise SpecError(f"env_vars.{name}", "holds a secret, which the kubernetes target cannot hand to the "
                            "driver's environment without a command line (its secret conf reaches the driver "
                            "after it started); put it in a Kubernetes Secret and reference it with spark_conf "
                            f"spark.kubernetes.driver.secretKeyRef.{name}: <secret>:<key>")
        env = {**plan.env, **({"KUBECONFIG": self.kubeconfig} if self.kubeconfig else {})}  # spark-submit's too
        return dataclasses.replace(plan, conf={**plan.conf, **fixed}, py_files=[*py_files, *plan.py_files], env=env)

    def archives(self) -> list[str]:
        return list(self.settings.get("archives") or [])

    @staticmethod
    def refuse_unreachable_env(secret_conf: dict[str, str]) -> None:
        """A private ``spark_conf`` entry that would never set the environment variable it names: a
        ``SpecError`` naming the entry and the fix.

        ``spark.kubernetes.driverEnv.<NAME>`` is read by spark-submit when it builds the driver pod, but private
        conf travels in the run's Secret, which the driver applies to its session after it started: the variable
        never is in the driver's environment. ``spark.kubernetes.executorEnv.<NAME>`` is no Spark setting at all.
        (``spark.executorEnv.<NAME>`` does reach the executors: the Secret's conf is set before the SparkContext
        exists, and Spark builds each executor pod's environment from that context's conf.)"""
        for key in secret_conf:
            if key.startswith(DRIVER_ENV_PREFIX):
                name = key[len(DRIVER_ENV_PREFIX):]
                raise SpecError(f"spark_conf.{key}", "passes an environment variable as private conf, which the "
                                "kubernetes target delivers through the run's Secret, applied after the driver "
                                "started: the variable would never be in the driver's environment. A non-secret "
                                f"value goes in env_vars.{name}; a secret in a Kubernetes Secret referenced with "
                                f"spark_conf spark.kubernetes.driver.secretKeyRef.{name}: <secret>:<key>")
            if key.startswith(EXECUTOR_ENV_PREFIX):
                name = key[len(EXECUTOR_ENV_PREFIX):]
                raise SpecError(f"spark_conf.{key}", "Spark 4 has no such setting, so the variable would never be "
                                "in the executors' environment: use spark_conf spark.executorEnv."
                                f"{name} (private conf, delivered before the executors start), or for a secret "
                                f"spark.kubernetes.executor.secretKeyRef.{name}: <secret>:<key>")

    @staticmethod
    def refuse_unshippable(spec: Any, conf: dict[str, str]) -> None:
        """A dependency on the submitting host (a plain path or ``file:``) is uploaded by spark-submit to
        ``spark.kubernetes.file.upload.path``: without one, a ``SpecError`` naming the entry (use ``local://``
        for files in the image, or a remote URI)."""
        if conf.get("spark.kubernetes.file.upload.path"):
            return
        for name in PATH_FIELDS:
            for index, item in enumerate(getattr(spec, name, None) or ()):
                if is_local_path(item):
                    raise SpecError(f"{name}[{index}]", f"{item!r} is on the submitting host and the kubernetes "
                                    "target uploads such files only to spark_conf spark.kubernetes.file.upload.path "
                                    "(unset): set it, or name the file local:///... (in the image) or by a remote URI")

    def describe_command(self, plan: LaunchPlan) -> str:
        """The spark-submit line for records and logs; secret conf only counted (it goes in a Secret)."""
        from airflow_streaming.targets.submit_command import masked_command, spark_submit_argv

        line = masked_command(spark_submit_argv(plan, self.binary(plan)))
        if plan.secret_conf:
            line += (f" +{len(plan.secret_conf)} secret conf entries in Kubernetes Secret "
                     f"{conf_secret_name(plan.conf['spark.kubernetes.driver.pod.name'])}")
        return line

    def submit(self, plan: LaunchPlan) -> dict[str, Any]:
        pod = plan.conf["spark.kubernetes.driver.pod.name"]
        namespace = plan.conf.get("spark.kubernetes.namespace", self.namespace)
        if plan.secret_conf:
            self._create_conf_secret(plan, namespace, pod)
        try:
            code, output = run_spark_submit(self, plan, f"Kubernetes cluster-mode submission of run {plan.run_id}",
                                            secret_conf_file=False)
        except BaseException:
            self._delete_conf_secret(namespace, pod, plan.run_id)
            raise
        submitted = _SUBMISSION.search(output)
        printed = submitted.group(2) if submitted else (_POD_NAME.search(output).group(1)
                                                         if _POD_NAME.search(output) else None)
        if code != 0 or printed is None:
            self._delete_conf_secret(namespace, pod, plan.run_id)
            raise submit_failure(plan, code, output, "Kubernetes submission",
                                 "check the image, the namespace, the service account's rights and the API "
                                 "server" + ("" if printed else "; no driver pod was reported"))
        if printed != pod:
            log.warning("spark-submit reported driver pod %s, expected %s: recording the reported one", printed, pod)
            pod = printed
        if plan.secret_conf:
            self._give_conf_secret_to_pod(namespace, pod, plan.run_id,
                                          conf_secret_name(plan.conf["spark.kubernetes.driver.pod.name"]))
        self.note(plan.log_path, f"run {plan.run_id} is driver pod {namespace}/{pod} on {self.api_server}")
        log.info("Kubernetes driver pod %s/%s of run %s (API %s)", namespace, pod, plan.run_id, self.api_server)
        return {"namespace": namespace, "pod": pod, "api_server": self.api_server}

    # ------------------------------------------------------------------ the run's Secret
    def _create_conf_secret(self, plan: LaunchPlan, namespace: str, pod: str) -> None:
        """Create the run's Secret with ``plan.secret_conf``; :class:`DriverStartError` (nothing submitted) if
        the API server refuses. A Secret of the same name left by an earlier try of the same run is replaced;
        one of another run is never touched."""
        name = conf_secret_name(pod)
        labels = {RUN_LABEL: label_value(plan.run_id), STREAM_LABEL: label_value(plan.name.rsplit(":", 1)[0])}
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "stringData": {SECRET_CONF_KEY: json.dumps(plan.secret_conf, sort_keys=True)}}
        for attempt in (1, 2):
            try:
                reply = self.api.create_secret(namespace, body)
            except ClusterUnreachableError as exc:
                raise DriverStartError(f"cannot create the Secret {namespace}/{name} with the secret conf of run "
                                       f"{plan.run_id}: {exc}; nothing was submitted") from None
            if reply.ok:
                self.note(plan.log_path, f"secret conf of run {plan.run_id} ({len(plan.secret_conf)} entries) is in "
                                         f"Kubernetes Secret {namespace}/{name}")
                return
            if reply.status == 409 and attempt == 1 and self._delete_conf_secret(namespace, pod, plan.run_id):
                continue  # an earlier try of this very run left it: replaced
            raise DriverStartError(
                f"the API server refused to create the Secret {namespace}/{name} with the secret conf of run "
                f"{plan.run_id} ({reply.message()}); the identity Airflow uses needs create, get, patch and delete on "
                "secrets in the namespace (docs/cluster.md, RBAC); nothing was submitted")

    def _give_conf_secret_to_pod(self, namespace: str, pod: str, run_id: str, name: str) -> None:
        """Make the driver pod the Secret's owner, so that Kubernetes deletes it with the pod. Never raises:
        without it, the Secret still goes with a kill (logged)."""
        try:
            found = self.pod({"namespace": namespace, "pod": pod})
            uid = ((found or {}).get("metadata") or {}).get("uid")
            if not uid:
                raise ClusterUnreachableError(self._pod_url({"namespace": namespace, "pod": pod}), "no pod uid")
            patch = {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}]}}
            reply = self.api.patch_secret(namespace, name, patch)
            if not reply.ok:
                raise ClusterUnreachableError(reply.url, reply.message())
        except ClusterUnreachableError as exc:
            log.warning("the Secret %s/%s of run %s is not owned by its driver pod (%s): it is deleted when the "
                        "driver is killed, else delete it with the pod", namespace, name, run_id, exc)

    def _delete_conf_secret(self, namespace: str, pod: str, run_id: str) -> bool:
        """Delete the Secret of run ``run_id`` (only one labelled with that run); return whether it existed
        and was deleted. Never raises."""
        name = conf_secret_name(pod)
        try:
            reply = self.api.read_secret(namespace, name)
            if reply.status == 404:
                return False
            labels = ((reply.json() or {}).get("metadata") or {}).get("labels") or {}
            if not reply.ok or labels.get(RUN_LABEL) != label_value(run_id):
                log.error("not deleting the Secret %s/%s: %s", namespace, name,
                          reply.message() if not reply.ok else f"it is not labelled with run {run_id}")
                return False
            reply = self.api.delete_secret(namespace, name)
            return reply.ok or reply.status == 404
        except (ClusterUnreachableError, ValueError) as exc:
            log.error("cannot delete the Secret %s/%s of run %s now (%s): delete it by hand", namespace, name,
                      run_id, exc)
            return False

    # ------------------------------------------------------------------ the API server
    def _api_of(self, handle: dict[str, Any] | None) -> str:
        """The API server to ask about a recorded pod: always this target's (from the spec and the master),
        never one a driver record names - it is a file a driver can write, and the request carries the
        token. A record naming another one is refused: :class:`ClusterUnreachableError` (liveness UNKNOWN)."""
        named = (handle or {}).get("api_server")
        if named and str(named).rstrip("/") != self.api_server:
            raise ClusterUnreachableError(str(named), f"the driver record names API server {named}, but this "
                                          f"stream's spec names {self.api_server}: nothing is sent to it",
                                          "a record is data, not configuration; check cluster.api_server")
        return self.api_server

    def _pod_url(self, handle: dict[str, Any], suffix: str = "") -> str:
        api = self._api_of(handle)
        ns = quote(str(handle.get("namespace") or self.namespace), safe="")
        return f"{api}/api/v1/namespaces/{ns}/pods/{quote(str(handle.get('pod') or ''), safe='')}{suffix}"

    def pod(self, handle: dict[str, Any]) -> dict[str, Any] | None:
        """The recorded driver pod, ``None`` if it does not exist; :class:`ClusterUnreachableError` when the
        API server cannot be asked or refuses (401/403: the pod may well exist)."""
        self._api_of(handle)
        reply = self.api.read_pod(str(handle.get("namespace") or self.namespace), str(handle.get("pod") or ""))
        if reply.status == 404:
            return None
        if not reply.ok:
            raise ClusterUnreachableError(reply.url, reply.message(), API_HINT)
        try:
            doc = reply.json()
        except ValueError as exc:
            raise ClusterUnreachableError(reply.url, str(exc), API_HINT) from exc
        return doc if isinstance(doc, dict) else None

    def state(self, record: DriverRecord) -> DriverState:
        name = f"{record.handle.get('namespace')}/{record.handle.get('pod')}"
        if not record.handle.get("pod"):
            return DriverState(Liveness.GONE, f"no driver pod recorded for run {record.run_id}")
        try:
            pod = self.pod(record.handle)
        except ClusterUnreachableError as exc:
            return DriverState(Liveness.UNKNOWN, f"cannot ask the Kubernetes API about pod {name}: {exc}")
        if pod is None:
            return DriverState(Liveness.GONE, f"driver pod {name} of run {record.run_id} does not exist", "NotFound")
        phase = (pod.get("status") or {}).get("phase")
        reason = (pod.get("status") or {}).get("reason") or ""
        deleting = " (being deleted)" if (pod.get("metadata") or {}).get("deletionTimestamp") else ""
        return DriverState(liveness_of(phase), f"driver pod {name} of run {record.run_id} is {phase}"
                                               f"{f' ({reason})' if reason else ''}{deleting}", phase)

    def kill(self, record: DriverRecord, grace: float) -> str:
        name = f"{record.handle.get('namespace')}/{record.handle.get('pod')}"
        if not record.handle.get("pod"):
            return f"nothing to kill: no driver pod recorded for run {record.run_id}"
        try:
            pod = self.pod(record.handle)
        except ClusterUnreachableError as exc:
            message = f"cannot kill pod {name} of run {record.run_id} now: {exc}"
            log.error("%s", message)
            return message
        namespace = str(record.handle.get("namespace") or self.namespace)
        if pod is None:
            self._delete_conf_secret(namespace, str(record.handle.get("pod")), record.run_id)
            return f"nothing to kill: driver pod {name} does not exist"
        labels = (pod.get("metadata") or {}).get("labels") or {}
        problem = self.record_problem(record)
        if problem is None and (labels.get(RUN_LABEL) != label_value(record.run_id) or labels.get("spark-role") != "driver"):
            problem = (f"its labels ({RUN_LABEL}={labels.get(RUN_LABEL)}, spark-role={labels.get('spark-role')}) do "
                       f"not make it the driver of run {record.run_id}")
        if problem is None and (labels.get(STREAM_LABEL) != label_value(self.stream)
                                or labels.get(CONTROL_LABEL) != control_digest(self.paths.root)):
            problem = (f"its labels ({STREAM_LABEL}={labels.get(STREAM_LABEL)}, {CONTROL_LABEL}="
                       f"{labels.get(CONTROL_LABEL)}) do not make it a driver of stream {self.stream!r} at "
                       f"{self.paths.root}")
        if problem is not None:
            message = f"refusing to delete pod {name}: {problem}; nothing was deleted"
            log.error("%s", message)
            return message
        seconds = max(0, int(grace))
        try:
            self._api_of(record.handle)
            reply = self.api.delete_pod(namespace, str(record.handle.get("pod")), seconds)
        except ClusterUnreachableError as exc:
            message = f"delete of pod {name} (run {record.run_id}) not sent: {exc}"
            log.error("%s", message)
            return message
        if reply.ok or reply.status == 404:
            self._delete_conf_secret(namespace, str(record.handle.get("pod")), record.run_id)
        if reply.status == 404:
            return f"nothing to kill: driver pod {name} was already gone"
        if not reply.ok:
            message = f"delete of pod {name} (run {record.run_id}) refused: {reply.message()}; {API_HINT}"
            log.error("%s", message)
            return message
        sent = f"deleted driver pod {name} of run {record.run_id} (grace {seconds}s)"
        log.warning("%s", sent)
        return self.await_gone(record, sent, "pod", seconds + 30.0, poll=0.5)

    def find(self, run_id: str, record: DriverRecord | None = None) -> list[str]:
        selector = f"{RUN_LABEL}={label_value(run_id)},spark-role=driver"
        namespace = (record.handle.get("namespace") if record else None) or self.namespace
        try:
            self._api_of(record.handle if record else None)
            reply = self.api.list_pods(namespace, selector)
            if not reply.ok:
                raise ClusterUnreachableError(reply.url, reply.message(), API_HINT)
            doc = reply.json()
        except (ClusterUnreachableError, ValueError) as exc:
            raise StreamStateUnknownError(f"cannot tell whether run {run_id} has a driver pod: {exc}") from exc
        return [f"driver pod {ns}/{name} of run {run_id} is {phase}"
                for ns, name, phase in self._run_pods(doc, run_id, namespace)]

    def adopt(self, run_id: str) -> dict[str, Any] | None:
        """The one live driver pod labelled with ``run_id``, this stream and this control location in the
        target's namespace."""
        selector = (f"{RUN_LABEL}={label_value(run_id)},{STREAM_LABEL}={label_value(self.stream)},"
                    f"{CONTROL_LABEL}={control_digest(self.paths.root)},spark-role=driver")
        try:
            reply = self.api.list_pods(self.namespace, selector)
            pods = self._run_pods(reply.json(), run_id, self.namespace) if reply.ok else []
        except (ClusterUnreachableError, ValueError):
            return None
        if len(pods) != 1:
            return None
        return {"namespace": pods[0][0], "pod": pods[0][1], "api_server": self.api_server}

    @staticmethod
    def _run_pods(doc: Any, run_id: str, namespace: str) -> list[tuple[str, str, str]]:
        """(namespace, name, phase) of the live driver pods of ``run_id`` in a pod list."""
        found = []
        for pod in (doc.get("items") or []) if isinstance(doc, dict) else []:
            meta, phase = pod.get("metadata") or {}, (pod.get("status") or {}).get("phase")
            if (meta.get("labels") or {}).get(RUN_LABEL) == label_value(run_id) and phase in ALIVE_PHASES:
                found.append((str(meta.get("namespace", namespace)), str(meta.get("name")), str(phase)))
        return found

    # ------------------------------------------------------------------ for people
    def urls(self, record: DriverRecord) -> dict[str, str]:
        return {"driver_pod": self._pod_url(record.handle),
                "driver_log": self._pod_url(record.handle, f"/log?container={DRIVER_CONTAINER}")}

    def log_tail(self, record: DriverRecord, lines: int) -> str:
        """The driver container's log from the API server, else the run's notes in the control log."""
        try:
            self._api_of(record.handle)
            reply = self.api.pod_log(str(record.handle.get("namespace") or self.namespace),
                                     str(record.handle.get("pod") or ""), DRIVER_CONTAINER, lines)
            if reply.ok:
                return "\n".join(reply.text().splitlines()[-lines:])
            note = f"(the driver pod's log cannot be read: {reply.message()})"
        except ClusterUnreachableError as exc:
            note = f"(the driver pod's log cannot be read: {exc})"
        return "\n".join([*super().log_tail(record, lines).splitlines(), note][-lines:])


def _in_cluster(name: str) -> str | None:
    path = os.path.join(SERVICE_ACCOUNT_DIR, name)
    return path if os.path.isfile(path) else None
