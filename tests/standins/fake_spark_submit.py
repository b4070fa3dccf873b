"""STAND-IN for ``spark-submit`` in YARN and Kubernetes cluster mode (it is not Spark).

Put on PATH as ``spark-submit`` (see :func:`install`). It records its argv, its environment's
relevant variables and the properties file it was given (path, mode, content) as one JSON line in
``$FAKE_SPARK_SUBMIT_RECORD``, registers the application with the protocol stand-in the way the
real one talks to the cluster manager, and prints what the real spark-submit prints on a
``waitAppCompletion=false`` submission:

- YARN (``$FAKE_YARN_RM``): ``INFO Client: Submitting application application_... to ResourceManager``,
  ``INFO YarnClientImpl: Submitted application application_...`` and one application report;
- Kubernetes (``$FAKE_KUBE_API``, ``$FAKE_KUBE_TOKEN``): the driver pod is created through the pod API
  and ``LoggingPodStatusWatcherImpl`` prints the pod name, namespace and labels, then ``Deployed Spark
  application ... with application ID spark-... and submission ID <ns>:<pod> into Kubernetes``.

``$FAKE_SPARK_SUBMIT_EXIT`` makes it print an error and exit with that code instead.
"""

from __future__ import annotations

import json
import os
import ssl
import stat
import sys
import time
import urllib.request
import uuid
from pathlib import Path


def _conf(argv: list[str]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for i, arg in enumerate(argv):
        if arg == "--conf" and i + 1 < len(argv):
            key, _, value = argv[i + 1].partition("=")
            conf[key] = value
        if arg == "--name" and i + 1 < len(argv):
            conf.setdefault("spark.app.name", argv[i + 1])
    return conf


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def _post(url: str, doc: dict, token: str | None = None) -> dict:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, data=json.dumps(doc).encode(), method="POST", headers=headers)
    context = ssl._create_unverified_context() if url.startswith("https") else None  # noqa: S323 - test stand-in
    with urllib.request.urlopen(request, timeout=10, context=context) as resp:  # noqa: S310
        return json.loads(resp.read())


def main(argv: list[str]) -> int:
    properties = _option(argv, "--properties-file")
    record: dict = {"argv": argv, "pyspark_python": os.environ.get("PYSPARK_PYTHON")}
    if properties:
        st = os.stat(properties)
        record.update(properties_file=properties, properties_mode=oct(stat.S_IMODE(st.st_mode)),
                      properties=Path(properties).read_text(encoding="utf-8"))
    with open(os.environ["FAKE_SPARK_SUBMIT_RECORD"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
    stamp = time.strftime("%y/%m/%d %H:%M:%S")
    if os.environ.get("FAKE_SPARK_SUBMIT_EXIT"):
        print(f"{stamp} ERROR SparkSubmit: stand-in failure requested", flush=True)
        print("Exception in thread \"main\" org.apache.spark.SparkException: stand-in failure", flush=True)
        return int(os.environ["FAKE_SPARK_SUBMIT_EXIT"])
    conf = _conf(argv)
    master = _option(argv, "--master") or ""
    print(f"{stamp} WARN NativeCodeLoader: Unable to load native-hadoop library for your platform", flush=True)
    if master == "yarn":
        tags = [t for t in conf.get("spark.yarn.tags", "").split(",") if t]
        app_id = _post(f"{os.environ['FAKE_YARN_RM']}/standin/apps",
                       {"name": conf.get("spark.app.name"), "tags": tags, "queue": conf.get("spark.yarn.queue")})["id"]
        print(f"{stamp} INFO Client: Requesting a new application from cluster with 2 NodeManagers", flush=True)
        print(f"{stamp} INFO Client: Submitting application {app_id} to ResourceManager", flush=True)
        print(f"{stamp} INFO YarnClientImpl: Submitted application {app_id}", flush=True)
        print(f"{stamp} INFO Client: Application report for {app_id} (state: ACCEPTED)", flush=True)
        return 0
    if master.startswith("k8s://"):
        namespace = conf.get("spark.kubernetes.namespace", "default")
        pod = conf.get("spark.kubernetes.driver.pod.name") or f"spark-{uuid.uuid4().hex[:8]}-driver"
        app = f"spark-{uuid.uuid4().hex}"
        prefix = "spark.kubernetes.driver.label."
        labels = {k[len(prefix):]: v for k, v in conf.items() if k.startswith(prefix)}
        labels.update({"spark-app-selector": app, "spark-role": "driver"})
        api, token = os.environ["FAKE_KUBE_API"], os.environ.get("FAKE_KUBE_TOKEN")
        # As Spark's KubernetesClientApplication does: the driver's ConfigMap carries every conf spark-submit
        # knows (spark.properties), the --properties-file's entries included; secretKeyRef confs become the
        # driver container's env.
        properties = "".join(f"{k}={v}\n" for k, v in conf.items()) + (record.get("properties") or "")
        _post(f"{api}/api/v1/namespaces/{namespace}/configmaps",
              {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"spark-drv-{app[6:22]}-conf-map",
                                                                     "namespace": namespace},
               "data": {"spark.properties": properties}}, token)
        ref = "spark.kubernetes.driver.secretKeyRef."
        env = [{"name": k[len(ref):], "valueFrom": {"secretKeyRef": dict(zip(("name", "key"), v.split(":", 1)))}}
               for k, v in conf.items() if k.startswith(ref)]
        _post(f"{api}/api/v1/namespaces/{namespace}/pods",
              {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": namespace, "labels": labels},
               "spec": {"containers": [{"name": "spark-kubernetes-driver", "env": env}]}}, token)
        print(f"{stamp} INFO LoggingPodStatusWatcherImpl: State changed, new state:\n\t pod name: {pod}\n\t "
              f"namespace: {namespace}\n\t labels: {', '.join(f'{k} -> {v}' for k, v in labels.items())}\n\t "
              f"phase: Pending", flush=True)
        print(f"{stamp} INFO LoggingPodStatusWatcherImpl: Deployed Spark application {conf.get('spark.app.name')} "
              f"with application ID {app} and submission ID {namespace}:{pod} into Kubernetes", flush=True)
        return 0
    print(f"stand-in spark-submit: unsupported master {master!r}", file=sys.stderr)
    return 1


def install(directory: Path) -> Path:
    """Write an executable ``spark-submit`` in ``directory`` that runs this stand-in; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "spark-submit"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} \"$@\"\n", encoding="utf-8")
    script.chmod(0o755)
    return script


def put_first_on_path(tmp_path: Path, monkeypatch, **env: str) -> Path:  # type: ignore[no-untyped-def]
    """Install the stand-in under ``tmp_path`` first on PATH (through pytest's ``monkeypatch``), with
    ``env`` for it (e.g. ``FAKE_YARN_RM``); returns the file it records its calls in."""
    bindir = install(tmp_path / "fakebin").parent
    record = tmp_path / "spark-submit-calls.jsonl"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SPARK_SUBMIT_RECORD", str(record))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("FAKE_SPARK_SUBMIT_EXIT", raising=False)
    return record


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
