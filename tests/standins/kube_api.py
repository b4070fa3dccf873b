"""STAND-IN for the Kubernetes API server's pod API (core/v1 pods), optionally over TLS.

Not Kubernetes. It speaks the subset the Kubernetes target uses, with the real paths, object shapes
and status codes:

- ``GET /api/v1/namespaces/{ns}/pods/{name}`` -> the Pod (``metadata.labels``, ``status.phase``);
  a missing pod -> 404 ``Status`` (reason NotFound);
- ``GET /api/v1/namespaces/{ns}/pods?labelSelector=k=v,k2=v2`` -> ``PodList`` (equality selectors);
- ``DELETE /api/v1/namespaces/{ns}/pods/{name}`` with ``gracePeriodSeconds`` -> 200 and the pod,
  which disappears (the grace period asked for is recorded in ``deletions``);
- ``GET /api/v1/namespaces/{ns}/pods/{name}/log?container=..&tailLines=N`` -> text/plain;
- ``POST /api/v1/namespaces/{ns}/pods`` (what spark-submit does to create the driver pod; used by the
  fake spark-submit) -> 201;
- ``POST / GET / PATCH (merge patch) / DELETE /api/v1/namespaces/{ns}/secrets[/{name}]`` and the same for
  ``configmaps`` (GET lists them, with equality label selectors): a Secret's ``stringData`` is stored as
  base64 ``data``, as the API server does; 409 ``AlreadyExists`` on a duplicate create;
- deleting a pod deletes the Secrets and ConfigMaps whose ``metadata.ownerReferences`` name its uid
  (what Kubernetes' garbage collector does, here at once);
- every request needs ``Authorization: Bearer <token>`` -> 401 ``Status`` otherwise.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any

from standins import StandInServer


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def make_self_signed_cert(directory: Path) -> tuple[str, str]:
    """A CA-less self-signed certificate for 127.0.0.1 (openssl CLI); returns (cert, key) paths."""
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


class KubeApiStandIn(StandInServer):
    """Pod API stand-in (see the module docstring). ``pods`` maps (namespace, name) to Pod objects."""

    def __init__(self, token: str, tls: tuple[str, str] | None = None):
        super().__init__()
        self.token = token
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.logs: dict[tuple[str, str], str] = {}
        self.deletions: list[tuple[str, str, int | None]] = []
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {"secrets": {}, "configmaps": {}}
        """Secrets and ConfigMaps by kind, then (namespace, name)."""
        self._lock = threading.Lock()
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"

    def create_pod(self, namespace: str, name: str, labels: dict[str, str], phase: str = "Pending") -> dict[str, Any]:
        pod = {"kind": "Pod", "apiVersion": "v1",
               "metadata": {"name": name, "namespace": namespace, "labels": dict(labels), "uid": f"uid-{name}"},
               "spec": {"containers": [{"name": "spark-kubernetes-driver"}]},
               "status": {"phase": phase}}
        with self._lock:
            self.pods[(namespace, name)] = pod
            self.logs[(namespace, name)] = "".join(f"driver log line {i} of {name}\n" for i in range(1, 101))
        return pod

    def set_phase(self, namespace: str, name: str, phase: str, reason: str | None = None) -> None:
        with self._lock:
            self.pods[(namespace, name)]["status"] = {"phase": phase, **({"reason": reason} if reason else {})}

    def handle(self, method: str, path: str, query: dict[str, str], headers: dict[str, str],
               body: bytes) -> tuple[int, Any, str]:
        auth = headers.get("Authorization") or headers.get("authorization")
        if auth != f"Bearer {self.token}":
            return 401, _status(401, "Unauthorized", "Unauthorized"), "application/json"
        parts = path.strip("/").split("/")
        if parts[:3] != ["api", "v1", "namespaces"] or len(parts) < 5 or parts[4] not in ("pods", *self.objects):
            return 404, _status(404, "NotFound", f"stand-in: no route {method} {path}"), "application/json"
        namespace = parts[3]
        if parts[4] in self.objects:
            return self._object(parts[4], method, namespace, parts[5] if len(parts) > 5 else "", query, body)
        if len(parts) == 5:
            if method == "GET":
                return 200, self._list(namespace, query.get("labelSelector", "")), "application/json"
            if method == "POST":
                doc = json.loads(body)
                meta = doc.get("metadata") or {}
                if (namespace, meta.get("name")) in self.pods:
                    return 409, _status(409, "AlreadyExists", f'pods "{meta.get("name")}" already exists'), \
                        "application/json"
                pod = self.create_pod(namespace, meta["name"], meta.get("labels") or {})
                env = ((doc.get("spec") or {}).get("containers") or [{}])[0].get("env")
                if env:
                    pod["spec"]["containers"][0]["env"] = env
                return 201, pod, "application/json"
        name = parts[5] if len(parts) > 5 else ""
        pod = self.pods.get((namespace, name))
        if pod is None:
            return 404, _status(404, "NotFound", f'pods "{name}" not found'), "application/json"
        if len(parts) == 6 and method == "GET":
            return 200, pod, "application/json"
        if len(parts) == 6 and method == "DELETE":
            grace = query.get("gracePeriodSeconds")
            options = json.loads(body) if body else {}
            seconds = int(grace) if grace is not None else options.get("gracePeriodSeconds")
            with self._lock:
                self.deletions.append((namespace, name, seconds))
                self.pods.pop((namespace, name), None)
                uid = pod["metadata"]["uid"]
                for store in self.objects.values():  # the garbage collector: owned objects go with the pod
                    for key in [k for k, o in store.items() if any(
                            ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])]:
                        store.pop(key)
            return 200, pod, "application/json"
        if len(parts) == 7 and parts[6] == "log" and method == "GET":
            lines = self.logs.get((namespace, name), "").splitlines(keepends=True)
            if query.get("tailLines"):
                lines = lines[-int(query["tailLines"]):]
            return 200, "".join(lines).encode(), "text/plain"
        return 405, _status(405, "MethodNotAllowed", f"{method} {path}"), "application/json"

    def _object(self, kind: str, method: str, namespace: str, name: str, query: dict[str, str],
                body: bytes) -> tuple[int, Any, str]:
        store, singular = self.objects[kind], {"secrets": "Secret", "configmaps": "ConfigMap"}[kind]
        with self._lock:
            if not name and method == "POST":
                doc = json.loads(body)
                meta = doc.setdefault("metadata", {})
                if (namespace, meta.get("name")) in store:
                    return 409, _status(409, "AlreadyExists", f'{kind} "{meta.get("name")}" already exists'), \
                        "application/json"
                meta.update(namespace=namespace, uid=f"uid-{kind}-{meta['name']}")
                if "stringData" in doc:  # the API server stores stringData as base64 data
                    doc["data"] = {**(doc.get("data") or {}), **{k: base64.b64encode(v.encode()).decode()
                                                                 for k, v in doc.pop("stringData").items()}}
                doc.setdefault("kind", singular)
                store[(namespace, meta["name"])] = doc
                return 201, doc, "application/json"
            if not name and method == "GET":
                wanted = dict(t.split("=", 1) for t in query.get("labelSelector", "").split(",") if "=" in t)
                items = [o for (ns, _), o in store.items() if ns == namespace
                         and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]
                return 200, {"kind": f"{singular}List", "apiVersion": "v1", "metadata": {}, "items": items}, \
                    "application/json"
            found = store.get((namespace, name))
            if found is None:
                return 404, _status(404, "NotFound", f'{kind} "{name}" not found'), "application/json"
            if method == "GET":
                return 200, found, "application/json"
            if method == "DELETE":
                store.pop((namespace, name))
                return 200, found, "application/json"
            if method == "PATCH":
                patch = json.loads(body)
                found["metadata"].update(patch.get("metadata") or {})
                return 200, found, "application/json"
        return 405, _status(405, "MethodNotAllowed", f"{method} {kind}"), "application/json"

    def _list(self, namespace: str, selector: str) -> dict[str, Any]:
        wanted = dict(term.split("=", 1) for term in selector.split(",") if "=" in term)
        items = [pod for (ns, _), pod in self.pods.items() if ns == namespace
                 and all(pod["metadata"]["labels"].get(k) == v for k, v in wanted.items())]
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
