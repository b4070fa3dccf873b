"""The small HTTP client of the standalone REST and YARN ResourceManager targets, and the reply type all
cluster targets share (the Kubernetes target asks its API server through the official client:
:mod:`.kube_api`).

Plain ``urllib`` on purpose: no library of ours speaks these REST APIs, a timeout on every request,
errors that name the URL and what to check.

Two outcomes are kept apart, because the targets map them differently:

- the server answered (any HTTP status): an :class:`HttpReply` with the status and the parsed body;
- the server could not be asked (refused, timed out, DNS, TLS): :class:`ClusterUnreachableError`.
  A cluster that does not answer says nothing about a driver: the targets turn it into UNKNOWN,
  never GONE.
"""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from airflow_streaming.exceptions import StreamStateUnknownError

DEFAULT_TIMEOUT = 10.0
"""Seconds per request (connect + read). Cluster managers answer status calls in milliseconds."""


class ClusterUnreachableError(StreamStateUnknownError):
    """A cluster endpoint could not be asked (connection refused, timeout, DNS, TLS); names the URL."""

    def __init__(self, url: str, reason: str, hint: str = ""):
        self.url = url
        self.reason = reason
        super().__init__(f"{url} did not answer ({reason})" + (f"; {hint}" if hint else ""))


@dataclass(frozen=True)
class HttpReply:
    """What a server answered: the status, the raw body, and the body parsed as JSON when it is JSON."""

    url: str
    status: int
    body: bytes
    headers: dict[str, str]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` naming the URL when it is not JSON."""
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"{self.url} answered HTTP {self.status} with a body that is not JSON "
                             f"({exc}): {self.text()[:200]!r}") from exc

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def message(self) -> str:
        """A short description of an error reply (the server's own message when it sent one)."""
        try:
            doc = self.json()
        except ValueError:
            return f"HTTP {self.status}: {self.text()[:300].strip()}"
        if isinstance(doc, dict):
            for key in ("message", "RemoteException", "reason"):
                value = doc.get(key)
                if isinstance(value, dict):
                    value = value.get("message")
                if value:
                    return f"HTTP {self.status}: {value}"
        return f"HTTP {self.status}: {str(doc)[:300]}"


class ClusterHttp:
    """Requests to one family of endpoints with shared TLS settings.

    :param timeout: seconds per request.
    :param hint: what to check when an endpoint does not answer (appended to every such error).
    :param ca_file: a CA bundle to verify the server with (default: the system's).
    :param verify_tls: ``False`` skips certificate verification (test clusters only).
    """

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, hint: str = "", ca_file: str | None = None,
                 verify_tls: bool = True):
        self.timeout = timeout
        self.hint = hint
        self.ca_file = ca_file
        self.verify_tls = verify_tls
        self._context: ssl.SSLContext | None = None

    def _ssl_context(self) -> ssl.SSLContext:
        if self._context is None:
            if not self.verify_tls:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            else:
                try:
                    context = ssl.create_default_context(cafile=self.ca_file)
                except (OSError, ssl.SSLError) as exc:
                    raise ValueError(f"the CA file {self.ca_file} cannot be used ({exc})") from exc
            self._context = context
        return self._context

    def request(self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
                content_type: str = "application/json", timeout: float | None = None) -> HttpReply:
        """Send one request; return the reply whatever its status; :class:`ClusterUnreachableError` when
        the server cannot be asked. ``body`` is JSON-encoded unless it is ``bytes``."""
        data = None
        all_headers = {"Accept": "application/json, text/plain, */*", **(headers or {})}
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
            all_headers["Content-Type"] = content_type
        request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
        context = self._ssl_context() if url.startswith("https:") else None
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout,  # noqa: S310 - operator-given URL
                                        context=context) as resp:
                return HttpReply(url, resp.status, resp.read(), dict(resp.headers.items()))
        except urllib.error.HTTPError as exc:
            try:
                payload = exc.read()
            except OSError:
                payload = b""
            return HttpReply(url, exc.code, payload, dict(exc.headers.items()) if exc.headers else {})
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, ssl.SSLError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ClusterUnreachableError(f"{method} {url}", str(reason) or type(exc).__name__, self.hint) from exc
        except OSError as exc:  # anything else below HTTP (reset mid-read...)
            raise ClusterUnreachableError(f"{method} {url}", f"{type(exc).__name__}: {exc}", self.hint) from exc

    def get_json(self, url: str) -> tuple[HttpReply, Any]:
        """GET and parse; the parsed body is ``None`` when the reply is not JSON (an error page)."""
        reply = self.request("GET", url)
        try:
            return reply, reply.json()
        except ValueError:
            return reply, None
