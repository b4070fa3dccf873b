"""The Kubernetes API of the Kubernetes target, through the official Python client (extra ``kubernetes``).

The client brings what a hand-written bearer-token client cannot: a kubeconfig (``cluster.kubeconfig``
and ``cluster.kube_context``: client certificates, exec plugins such as ``aws eks get-token``, OIDC)
and the in-cluster service account, with its own TLS handling. This module keeps the target's rules
on top of it:

- the API server is the spec's (``cluster.api_server`` or the ``k8s://`` master) and nothing else: a
  kubeconfig context that points elsewhere is a :class:`ValueError`, and a driver record never names
  it (see ``KubernetesClusterTarget._api_of``);
- credentials never go over plain ``http://`` unless ``cluster.allow_plain_http: true``;
- a token file (``cluster.kube_token_file``, default the pod's service account) is read at every
  request (tokens are rotated) and never logged;
- the server answered (any status): an :class:`~airflow_streaming.targets.cluster_http.HttpReply`;
  it could not be asked: :class:`~airflow_streaming.targets.cluster_http.ClusterUnreachableError`
  (the target turns it into UNKNOWN, never GONE).

Calls go through ``CoreV1Api`` with ``_preload_content=False`` (the raw answer), which both client
generations (up to 34 and from 35) offer alike. Without the client installed, the target refuses
with :data:`MISSING_CLIENT`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlparse

from airflow_streaming.targets.cluster_http import DEFAULT_TIMEOUT, ClusterUnreachableError, HttpReply

MISSING_CLIENT = ("Kubernetes cluster mode needs the Kubernetes Python client, which is not installed: "
                  "pip install 'airflow-streaming[kubernetes]'")


def _client() -> tuple[Any, Any]:
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise ValueError(MISSING_CLIENT) from exc
    return client, config


def _origin(url: str) -> str:
    parsed = urlparse(url if "://" in url else f"https://{url}")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return f"{parsed.scheme}://{(parsed.hostname or '').lower()}:{port}"


class KubeApi:
    """Core/v1 pods and secrets of one API server (see the module docstring).

    :param api_server: the spec's API server URL.
    :param hint: what to check when the API server does not answer (appended to such errors).
    :param token_file: a file holding a bearer token, read at every request.
    :param ca_file: a CA bundle to verify the API server with (default: the system's).
    :param verify_tls: ``False`` skips certificate verification (test clusters only).
    :param allow_plain_http: send credentials over ``http://`` too.
    :param kubeconfig: a kubeconfig file to take credentials and TLS settings from (its context's server
        must be ``api_server``); ``token_file`` and ``ca_file`` are not used then.
    :param context: the kubeconfig context (default: its current one).
    :param timeout: seconds per request.
    """

    def __init__(self, api_server: str, hint: str = "", token_file: str | None = None, ca_file: str | None = None,
                 verify_tls: bool = True, allow_plain_http: bool = False, kubeconfig: str | None = None,
                 context: str | None = None, timeout: float = DEFAULT_TIMEOUT):
        client, config = _client()
        self.api_server, self.hint, self.timeout = api_server.rstrip("/"), hint, timeout
        self.token_file, self.ca_file, self.kubeconfig = token_file, ca_file, kubeconfig
        self.allow_plain_http = allow_plain_http
        configuration = client.Configuration()
        if kubeconfig:
            try:
                config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration,
                                        persist_config=False)
            except Exception as exc:  # noqa: BLE001 - ConfigException, OSError, YAML errors
                raise ValueError(f"cluster.kubeconfig {kubeconfig}: cannot be loaded ({exc})") from None
            if _origin(configuration.host) != _origin(self.api_server):
                raise ValueError(f"cluster.kubeconfig {kubeconfig}: its context {context or '(current)'} points at "
                                 f"{configuration.host}, but this stream's API server is {self.api_server} "
                                 "(cluster.api_server or the k8s:// master): make them the same")
            self.token_file = self.ca_file = None
            self.credentialed = bool(configuration.api_key or configuration.cert_file or configuration.username
                                     or getattr(configuration, "refresh_api_key_hook", None))
        else:
            configuration.ssl_ca_cert = ca_file
            configuration.verify_ssl = verify_tls
            if token_file:
                configuration.api_key = {"authorization": ""}
                configuration.api_key_prefix = {"authorization": "Bearer"}
                configuration.refresh_api_key_hook = self._refresh_token
            self.credentialed = bool(token_file)
        configuration.host = self.api_server
        configuration.retries = 0  # an API server that does not answer is UNKNOWN at once, not after retries
        self._api_exception = client.exceptions.ApiException
        self.core = client.CoreV1Api(client.ApiClient(configuration))

    def _refresh_token(self, configuration: Any) -> None:
        try:
            with open(str(self.token_file), encoding="utf-8") as fh:
                token = fh.read().strip()
        except OSError as exc:
            raise ValueError(f"the token file {self.token_file} cannot be read ({exc.strerror}); check the "
                             "cluster's kube_token_file setting or the pod's service-account mount") from None
        configuration.api_key["authorization"] = token

    # ------------------------------------------------------------------ calls
    def url(self, path: str) -> str:
        """The full URL of ``path`` on this API server (for messages and links)."""
        return f"{self.api_server}{path}"

    def _call(self, method: str, path: str, fn: Any, *args: Any, **kwargs: Any) -> HttpReply:
        url = self.url(path)
        if self.credentialed and not url.startswith("https:") and not self.allow_plain_http:
            raise ClusterUnreachableError(url, "refusing to send the credentials over plain http (anyone on the path "
                                          "could read them)", "use an https:// API server, or set the cluster "
                                          "setting allow_plain_http: true for a test cluster")
        try:
            response = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
        except self._api_exception as exc:
            if not exc.status:
                raise ClusterUnreachableError(f"{method} {url}", str(exc.reason or exc), self.hint) from None
            body = exc.body if isinstance(exc.body, bytes) else str(exc.body or "").encode()
            return HttpReply(url, int(exc.status), body, dict(exc.headers or {}))
        except Exception as exc:  # noqa: BLE001 - urllib3 (MaxRetryError, SSLError, timeouts), OSError
            if isinstance(exc, ValueError) and not isinstance(exc, OSError):
                raise  # the token file cannot be read (see _refresh_token): configuration, named
            reason = getattr(exc, "reason", None) or exc
            raise ClusterUnreachableError(f"{method} {url}", str(reason) or type(exc).__name__, self.hint) from None
        return HttpReply(url, int(response.status), response.data or b"", dict(response.headers or {}))

    @staticmethod
    def _pod_path(namespace: str, name: str = "") -> str:
        base = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
        return f"{base}/{quote(name, safe='')}" if name else base

    @staticmethod
    def _secret_path(namespace: str, name: str = "") -> str:
        base = f"/api/v1/namespaces/{quote(namespace, safe='')}/secrets"
        return f"{base}/{quote(name, safe='')}" if name else base

    def read_pod(self, namespace: str, name: str) -> HttpReply:
        return self._call("GET", self._pod_path(namespace, name), self.core.read_namespaced_pod, name, namespace)

    def list_pods(self, namespace: str, label_selector: str) -> HttpReply:
        return self._call("GET", f"{self._pod_path(namespace)}?labelSelector={quote(label_selector)}",
                          self.core.list_namespaced_pod, namespace, label_selector=label_selector)

    def delete_pod(self, namespace: str, name: str, grace_seconds: int) -> HttpReply:
        client, _ = _client()
        return self._call("DELETE", self._pod_path(namespace, name), self.core.delete_namespaced_pod, name, namespace,
                          grace_period_seconds=grace_seconds,
                          body=client.V1DeleteOptions(grace_period_seconds=grace_seconds))

    def pod_log(self, namespace: str, name: str, container: str, lines: int) -> HttpReply:
        return self._call("GET", f"{self._pod_path(namespace, name)}/log", self.core.read_namespaced_pod_log, name,
                          namespace, container=container, tail_lines=lines)

    def create_secret(self, namespace: str, body: dict[str, Any]) -> HttpReply:
        return self._call("POST", self._secret_path(namespace), self.core.create_namespaced_secret, namespace, body)

    def read_secret(self, namespace: str, name: str) -> HttpReply:
        return self._call("GET", self._secret_path(namespace, name), self.core.read_namespaced_secret, name, namespace)

    def patch_secret(self, namespace: str, name: str, patch: dict[str, Any]) -> HttpReply:
        return self._call("PATCH", self._secret_path(namespace, name), self.core.patch_namespaced_secret, name,
                          namespace, patch)

    def delete_secret(self, namespace: str, name: str) -> HttpReply:
        return self._call("DELETE", self._secret_path(namespace, name), self.core.delete_namespaced_secret, name,
                          namespace)

