"""The Kubernetes API server's word about a run's driver pod (standard library only).

A hot standby on another host than the active driver cannot see that driver's process. In Kubernetes cluster
mode the driver is a pod, and the API server knows when every container of that pod terminated
(:mod:`.death_proof` says which of its words are proof of death). This module asks it, from inside a Spark
driver - the standby's own driver pod - (hence ``urllib``, no client library):

- ``GET <api>/api/v1/namespaces/<ns>/pods/<name>`` (JSON): the Pod's ``metadata`` and ``status.phase``; a pod
  the API server does not know answers 404 with a ``Status`` of reason ``NotFound`` (an answer: "unknown to
  it", never proof - a force-deleted pod's containers may still run).

The API server asked is the one the standby was LAUNCHED with (``--kube-api-server``: the stream's
``cluster.api_server`` or its ``k8s://`` master, never a control file). The credentials are the standby pod's
OWN service account (``/var/run/secrets/kubernetes.io/serviceaccount``: ``token``, read at every ask, and
``ca.crt``), the account a Spark driver already needs to read its executors' pods - never the Airflow side's
keys. The token is sent over https only; over plain http the API server is asked without it.

Every error - a refused connection, a timeout, a 401/403, a 5xx, a reply that is not the expected JSON -
is an unanswered word (``Word.answered`` false), never an exception: no word is no proof.
"""

from __future__ import annotations

import os
import ssl
from urllib.parse import quote

from airflow_streaming.control.death_proof import RunIds, Word, WordKind
from airflow_streaming.control.word_http import get_json

#: Seconds to wait for the API server's reply.
TIMEOUT_S = 2.0
#: Where Kubernetes mounts a pod's service-account credentials.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Another directory of the same shape (``token``, ``ca.crt``), for a non-standard mount and for tests.
SERVICE_ACCOUNT_DIR_ENV = "AIRFLOW_STREAMING_KUBE_SA_DIR"


class KubeWord:
    """The ``word`` of :func:`~.takeover.judge_takeover` for Kubernetes: the phase of the driver pod the run's
    driver record names (``RunIds.kube_pod``); ``None`` (no word) when the run recorded none or no API server
    is known.

    :param api_server: the API server the standby was launched with.
    :param sa_dir: the service-account directory (``token``, ``ca.crt``); default :data:`SERVICE_ACCOUNT_DIR`,
        or :data:`SERVICE_ACCOUNT_DIR_ENV` when set.
    """

    def __init__(self, api_server: str | None, sa_dir: str | None = None, timeout: float = TIMEOUT_S):
        self.api_server = (api_server or "").rstrip("/")
        self.sa_dir = sa_dir or os.environ.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT_DIR
        self.timeout = timeout

    def _credentials(self) -> tuple[dict[str, str], ssl.SSLContext | None]:
        if not self.api_server.startswith("https://"):
            return {}, None  # never a token in clear
        ca = os.path.join(self.sa_dir, "ca.crt")
        context = ssl.create_default_context(cafile=ca if os.path.exists(ca) else None)
        try:
            with open(os.path.join(self.sa_dir, "token"), encoding="utf-8") as fh:
                token = fh.read().strip()
        except OSError:
            token = ""
        return ({"Authorization": f"Bearer {token}"} if token else {}), context

    def pod(self, namespace: str, name: str) -> Word:
        """What the API server says about pod ``namespace/name``."""
        subject = f"{namespace}/{name}"
        unanswered = Word(WordKind.KUBE_POD, subject, answered=False)
        try:
            headers, context = self._credentials()
        except (OSError, ssl.SSLError):  # a CA file that cannot be loaded
            return unanswered
        reply = get_json(f"{self.api_server}/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}",
                         self.timeout, headers, context)
        if reply is None:
            return unanswered
        status, doc = reply
        if not isinstance(doc, dict):
            return unanswered
        if status == 404 and doc.get("kind") == "Status" and doc.get("reason") == "NotFound":
            return Word(WordKind.KUBE_POD, subject, answered=True, state=None)
        meta, pod_status = doc.get("metadata"), doc.get("status")
        if status != 200 or doc.get("kind") != "Pod" or not isinstance(meta, dict) or not isinstance(pod_status, dict):
            return unanswered
        phase = pod_status.get("phase")
        if not isinstance(meta.get("namespace"), str) or not isinstance(meta.get("name"), str) \
                or not isinstance(phase, str):
            return unanswered
        return Word(WordKind.KUBE_POD, f"{meta['namespace']}/{meta['name']}", answered=True, state=phase)

    def __call__(self, ids: RunIds) -> Word | None:
        if not ids.kube_pod or not self.api_server or "/" not in ids.kube_pod:
            return None
        namespace, name = ids.kube_pod.split("/", 1)
        return self.pod(namespace, name)


__all__ = ["SERVICE_ACCOUNT_DIR", "SERVICE_ACCOUNT_DIR_ENV", "TIMEOUT_S", "KubeWord"]
