"""Stream events to a webhook through the HTTP provider's notifier - the one webhook path.

:class:`StreamHttpNotifier` is ``airflow.providers.http.notifications.HttpNotifier``: the HTTP
provider's ``http`` connection (base URL from schema, host and port; ``login``/``password`` as its
auth; headers and ``verify``, ``proxies``, ``cert``, ``timeout`` in its extras) and its ``requests``
session - whose JSON body defaults to the stream event (:func:`render_json`, schema
``airflow-streaming.event/v1``, or :func:`render_slack` with ``payload_format="slack"``). A plain
``url=`` works without a connection.

What the provider's notifier does not do, and this one adds in :meth:`StreamHttpNotifier.notify`
(the properties ``tests/integration/test_notifiers.py`` proves):

- credentials (the connection's auth, a credential header, URL userinfo) go only over ``https://``
  unless ``allow_insecure_auth`` (or the connection's extra ``allow_insecure_auth: true``) says
  otherwise; a refusal raises :class:`NotificationError` before anything is sent;
- redirects are refused (never followed: a POST is not replayed elsewhere with its token), and only a
  2xx answer is a success;
- only the endpoint's host is ever logged or put in an error - never its path, query, headers or
  token (the provider's ``run`` logs the full URL and an error answer's body, urllib3 the request line
  at DEBUG: silenced for our requests); an error answer's first
  200 characters are included, redacted; errors are not chained to the ``requests`` exception (which
  holds the URL);
- a certificate that is not verified (``verify: false``) is logged as a warning;
- ``async_notify`` runs the same checks (in a worker thread), instead of the provider's aiohttp path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import requests
from airflow.providers.http.notifications.http import HttpNotifier

from airflow_streaming.log_masking import register_secrets
from airflow_streaming.notifications.events import (
    SUBJECT_PREFIX,
    NotificationError,
    event_template_context,
    render_slack,
)
from airflow_streaming.redaction import is_sensitive_header, redact

# A stdlib logger: Airflow routes it to the task log, and tests can capture it (caplog).
log = logging.getLogger(__name__)

PAYLOAD_FORMATS = ("json", "slack")
DEFAULT_TIMEOUT = 10.0
_TRUE = ("1", "true", "yes", "on")


class _WhileSending(logging.Filter):
    """Drops urllib3's records of this thread while it sends a notification: urllib3 logs every request line
    (path and query - a webhook's token often is one) at DEBUG."""

    def __init__(self) -> None:
        super().__init__()
        self.sending = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(self.sending, "on", False)

    @contextlib.contextmanager
    def active(self):  # noqa: ANN201 - a context manager
        self.sending.on = True
        try:
            yield
        finally:
            self.sending.on = False


_QUIET_URLLIB3 = _WhileSending()
logging.getLogger("urllib3.connectionpool").addFilter(_QUIET_URLLIB3)


def endpoint_host(url: str) -> str:
    """``host[:port]`` of ``url``: the only part of a webhook URL that is ever logged."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        return f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return "?"


def _as_bool(value: Any) -> bool:
    return value.strip().lower() in _TRUE if isinstance(value, str) else bool(value)


class StreamHttpNotifier(HttpNotifier):
    """POST a stream event as JSON with the HTTP provider's notifier, safely (see the module docstring).

    A task or DAG callback (a FAILED event from the failure context) or an operator's ``notifiers=``
    entry (``context["stream_event"]``). Templated fields (``url``, ``endpoint``, ``json``, ``data``,
    ``headers``, ``http_conn_id``, ``extra_options``) are rendered with the task context plus
    ``stream_event``, ``stream_event_subject``, ``stream_event_text``, ``stream_event_html`` and
    ``stream_event_json``.

    :param url: a full URL to POST to without a connection (templated); give ``url`` or
        ``http_conn_id``. Its userinfo (``https://user:pass@host``) is sent as HTTP Basic auth.
    :param json: the JSON body (templated); default: the event as :func:`render_json` renders it.
    :param payload_format: the default body: ``"json"`` (:func:`render_json`) or ``"slack"``
        (:func:`render_slack`, for a Slack-compatible incoming webhook).
    :param subject_prefix: prefix of the subject in the default body (``None``: none).
    :param allow_insecure_auth: send credentials over plain ``http://`` too (default ``False``; for a
        trusted network only). The connection's extra ``allow_insecure_auth: true`` allows it as well.
    :param verify: with ``url=``: ``True`` (the system's CAs), a CA bundle path, or ``False`` (not
        recommended). With a connection: its extra ``verify`` (the provider's).
    :param timeout: seconds for the request, unless the connection's extra or ``extra_options`` set one.
    :param kwargs: everything else ``HttpNotifier`` takes (``http_conn_id``, ``endpoint``, ``method``,
        ``headers``, ``extra_options``...).
    """

    template_fields = (*HttpNotifier.template_fields, "url")

    def __init__(self, *, url: str | None = None, json: dict[str, Any] | str | None = None,
                 payload_format: str = "json", subject_prefix: str | None = SUBJECT_PREFIX,
                 allow_insecure_auth: bool = False, verify: bool | str = True, timeout: float = DEFAULT_TIMEOUT,
                 **kwargs: Any) -> None:
        if url and kwargs.get("http_conn_id"):
            raise ValueError(f"{type(self).__name__} needs exactly one of url= or http_conn_id=")
        if url and kwargs.get("endpoint"):
            raise ValueError("endpoint= is appended to the http_conn_id connection's URL; with url= put it in the URL")
        if payload_format not in PAYLOAD_FORMATS:
            raise ValueError(f"payload_format must be one of {', '.join(PAYLOAD_FORMATS)}, got {payload_format!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        super().__init__(json=json, **kwargs)
        self.url = url
        self.payload_format = payload_format
        self.subject_prefix = subject_prefix
        self.allow_insecure_auth = bool(allow_insecure_auth)
        self.verify = verify
        self.timeout = float(timeout)
        self._default_json = json is None and kwargs.get("data") is None

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Add the event to ``context``, render the templated fields, then fill the event's default body."""
        event_context = event_template_context(context, self.subject_prefix)
        context.update(event_context)
        super().render_template_fields(context, jinja_env)
        if self._default_json:
            self.json = (render_slack(event_context["stream_event"], self.subject_prefix)
                         if self.payload_format == "slack" else event_context["stream_event_json"])

    # ------------------------------------------------------------------ the request
    def _session(self) -> tuple[requests.Session, str, bool, float]:
        """The provider's session for the connection (or a plain one for ``url=``), the URL, whether
        credentials may go over http, and the timeout."""
        if self.url:
            session = requests.Session()
            session.verify = self.verify
            return session, str(self.url), self.allow_insecure_auth, self.timeout
        hook = self.hook
        session = hook.get_conn(self.headers, self.extra_options)
        # The provider turns every unknown extra into a header: ours are settings, and a "headers" mapping
        # is headers.
        allow_insecure = _as_bool(session.headers.pop("allow_insecure_auth", False)) or self.allow_insecure_auth
        nested = session.headers.pop("headers", None)
        if isinstance(nested, Mapping):
            session.headers.update({str(k): str(v) for k, v in nested.items()})
        timeout = hook.merged_extra.get("timeout") or self.timeout
        return session, hook.url_from_endpoint(self.endpoint), allow_insecure, float(timeout)

    def notify(self, context: Any) -> None:
        """POST the event; :class:`NotificationError` on a non-2xx answer, no answer, a redirect, or
        credentials that would travel over plain http (refused before sending)."""
        session, url, allow_insecure, timeout = self._session()
        with session:
            request = session.prepare_request(requests.Request(
                self.method, url, json=self.json, data=self.data, headers=self.headers or None))
            host = endpoint_host(request.url or url)
            secrets = _secrets_of(request, session)
            register_secrets(s for s in secrets if not s.startswith(("/", "http")))
            credentials = sorted(name for name in request.headers if is_sensitive_header(name))
            scheme = urlsplit(request.url or "").scheme
            if credentials and scheme != "https" and not allow_insecure:
                raise NotificationError(
                    f"webhook host {host}: refusing to send credentials ({', '.join(credentials)}) over plain "
                    f"{scheme}://, where anyone on the network path can read them. Use an https:// URL (connection "
                    "schema https), or - on a trusted network only - allow it with allow_insecure_auth=True or the "
                    "connection's extra allow_insecure_auth: true. Nothing was sent.")
            if credentials and scheme != "https":
                log.warning("webhook host %s: sending credentials over plain http (allow_insecure_auth)", host)
            if scheme == "https" and session.verify is False:
                log.warning("webhook host %s: certificate verification is DISABLED (verify=False): anyone on the "
                            "network path can impersonate the server", host)
            log.info("Posting a stream event to webhook host %s (%s payload)", host, self.payload_format)
            error: NotificationError | None = None
            try:
                settings = session.merge_environment_settings(request.url, session.proxies, None, session.verify,
                                                              session.cert)
                with _QUIET_URLLIB3.active():
                    response = session.send(request, allow_redirects=False, timeout=timeout, **settings)
            except (requests.RequestException, OSError, ValueError) as exc:
                error = NotificationError(f"webhook host {host} unreachable: {redact(str(exc), secrets)}"
                                          f"{_tls_hint(exc)}")
            if error is not None:
                raise error  # outside the except block: the requests exception (it holds the URL) is not chained
            with response:
                if not 200 <= response.status_code < 300:
                    answer = redact(" ".join(response.text[:200].split()), secrets)
                    raise NotificationError(f"webhook host {host} answered HTTP {response.status_code}"
                                            + (f": {answer}" if answer else ""))
            log.info("Webhook host %s accepted the stream event (HTTP %s)", host, response.status_code)

    async def async_notify(self, context: Any) -> None:
        """Same as :meth:`notify`, in a worker thread (for the triggerer)."""
        await asyncio.to_thread(self.notify, context)


def _secrets_of(request: requests.PreparedRequest, session: requests.Session) -> list[str]:
    """What must never appear in an error or a log line: credential header values (and their token part),
    basic-auth passwords, URL userinfo, path and query."""
    secrets: list[str] = []
    for name, value in request.headers.items():
        if is_sensitive_header(name):  # the token, not its scheme ("Bearer ***" says which kind was refused)
            secrets.append(str(value).split(" ", 1)[-1])
    auth = session.auth
    if isinstance(auth, tuple) and len(auth) == 2:
        secrets.append(str(auth[1]))
    elif getattr(auth, "password", None):
        secrets.append(str(auth.password))
    parts = urlsplit(request.url or "")
    if parts.password:
        secrets.append(unquote(parts.password))
    if "@" in parts.netloc:
        secrets.append(parts.netloc.rpartition("@")[0])
    secrets += [s for s in (parts.query, parts.path, urlunsplit(parts._replace(fragment=""))) if s and s != "/"]
    return [s for s in secrets if s]


def _tls_hint(exc: BaseException) -> str:
    if "CERTIFICATE_VERIFY_FAILED" in str(exc) or "certificate verify failed" in str(exc):
        return (". The server's certificate could not be verified: trust a private CA with verify='/path/ca.pem' "
                "(or the connection's extra verify), and check that the URL's host is a name the certificate is for")
    return ""
