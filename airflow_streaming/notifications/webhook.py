"""Post stream events to a webhook (generic JSON or a Slack incoming webhook) with the stdlib only.

Credentials - an ``Authorization`` header (the connection's bearer token, or one given in headers),
any other credential header (``X-Api-Key``, ``Cookie``...) and URL userinfo - are only sent over
``https://`` (certificate verified), unless explicitly allowed (``allow_insecure_auth``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from airflow.sdk import BaseNotifier

from airflow_streaming.log_masking import register_secrets
from airflow_streaming.notifications.events import (
    NotificationError,
    event_from_context,
    render_json,
    render_slack,
)
from airflow_streaming.redaction import is_sensitive_header, redact

# A stdlib logger: Airflow routes it to the task log, and tests can capture it (caplog).
log = logging.getLogger(__name__)

PAYLOAD_FORMATS = ("json", "slack")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: a POST must not be replayed as a GET, nor its token sent to another host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, D102
        return None


def endpoint_host(url: str) -> str:
    """``host[:port]`` of ``url``: the only part of a webhook URL that is ever logged."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        return f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return "?"


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


@dataclass
class WebhookTarget:
    """Where and how a webhook is called (no I/O): see :meth:`StreamWebhookNotifier.target`.

    :param url: the URL to POST to, without userinfo.
    :param headers: every header to send.
    :param secrets: the values to scrub from any error text (token, header values, URL parts).
    :param verify: ``True`` (system CAs), ``False`` (no certificate verification) or a CA bundle path.
    :param allow_insecure_auth: whether credentials may go over plain ``http://``.
    """

    url: str
    headers: dict[str, str]
    secrets: list[str] = field(default_factory=list)
    verify: bool | str = True
    allow_insecure_auth: bool = False

    @property
    def credential_headers(self) -> list[str]:
        """Names of the headers that carry a credential (``Authorization``, ``X-Api-Key``...)."""
        return [name for name in self.headers if is_sensitive_header(name)]

    def check_transport(self, where: str) -> None:
        """Refuse (:class:`NotificationError`) to send credentials over plain http unless allowed."""
        scheme = urlsplit(self.url).scheme
        if scheme == "https" or not self.credential_headers or self.allow_insecure_auth:
            return
        raise NotificationError(
            f"webhook host {endpoint_host(self.url)}: refusing to send credentials "
            f"({', '.join(sorted(self.credential_headers))}) over plain {scheme}://, where anyone on the network "
            f"path can read them. Use an https:// URL (connection schema https), or - on a trusted network only - "
            f"allow it with {where}. Nothing was sent.")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for an https URL: verification on (system CAs or the CA bundle), or explicitly off."""
        if urlsplit(self.url).scheme != "https":
            return None
        if self.verify is False:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        return ssl.create_default_context(cafile=self.verify if isinstance(self.verify, str) else None)


def _verify_setting(value: Any, where: str) -> bool | str:
    """``verify``: true/false, or the path of a CA bundle (PEM) to trust."""
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return _as_bool(value)
    if isinstance(value, str):
        if not os.path.isfile(value):
            raise ValueError(f"{where}: verify names the CA bundle {value!r}, which is not a readable file: give "
                             "the path of a PEM file with the CA certificate(s) to trust")
        return value
    return bool(value)


class StreamWebhookNotifier(BaseNotifier):
    """Post a stream event to a webhook as JSON (:func:`render_json`) or as a Slack message (:func:`render_slack`).

    Sends ``context["stream_event"]`` (a :class:`StreamEvent` or its dict); without one, a FAILED event
    built from the task failure context (DAG, task, exception, log URL), so it also works as an
    ``on_failure_callback``. Only the endpoint's host is ever logged or put in an error: never its
    path, query string, token or headers. Redirects are refused. A non-2xx answer raises
    :class:`NotificationError` naming the status and host.

    Credentials (an ``Authorization`` or other credential header, URL userinfo - sent as HTTP Basic
    auth) go only to ``https://`` URLs, whose certificate is verified, unless ``allow_insecure_auth``
    (or the connection's ``extra.allow_insecure_auth``) says otherwise; a refusal raises
    :class:`NotificationError` before anything is sent.

    :param url: the webhook URL (templated). Give ``url`` or ``http_conn_id``, not both.
    :param http_conn_id: an Airflow connection (templated) whose ``schema`` (http/https, default
        https), ``host`` and ``port`` make the base URL; its password, if any, is sent as
        ``Authorization: Bearer <password>``; ``extra`` may hold ``{"headers": {...}}``,
        ``{"verify": false | "/path/ca.pem"}`` and ``{"allow_insecure_auth": true}``.
    :param endpoint: path (and query) appended to the connection's base URL (templated).
    :param payload_format: ``"json"`` (default) or ``"slack"``.
    :param timeout: seconds for the whole request.
    :param headers: extra HTTP headers (templated); never logged.
    :param verify: certificate verification of an https URL: ``True`` (default, the system's CAs), the
        path of a CA bundle (PEM) to trust instead, or ``False`` (not recommended). The connection's
        ``extra.verify`` wins when set.
    :param allow_insecure_auth: send credentials over plain ``http://`` too (default ``False``; for a
        trusted network only). The connection's ``extra.allow_insecure_auth: true`` allows it as well.
    """

    template_fields: Sequence[str] = ("url", "http_conn_id", "endpoint", "headers")

    def __init__(
        self,
        *,
        url: str | None = None,
        http_conn_id: str | None = None,
        endpoint: str | None = None,
        payload_format: str = "json",
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        verify: bool | str = True,
        allow_insecure_auth: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if bool(url) == bool(http_conn_id):
            raise ValueError("StreamWebhookNotifier needs exactly one of url= or http_conn_id=")
        if endpoint and not http_conn_id:
            raise ValueError("endpoint= is appended to the http_conn_id connection's URL; with url= put it in the URL")
        if payload_format not in PAYLOAD_FORMATS:
            raise ValueError(f"payload_format must be one of {', '.join(PAYLOAD_FORMATS)}, got {payload_format!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        self.url = url
        self.http_conn_id = http_conn_id
        self.endpoint = endpoint
        self.payload_format = payload_format
        self.timeout = float(timeout)
        self.headers = dict(headers or {})
        self.verify = verify
        self.allow_insecure_auth = bool(allow_insecure_auth)

    def target(self) -> WebhookTarget:
        """URL, headers, the secrets to scrub from any error text, and the TLS/credential settings."""
        headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "airflow-streaming-notifier"}
        secrets: list[str] = []
        verify: Any = self.verify
        allow_insecure = self.allow_insecure_auth
        if self.url:
            url = str(self.url)
        else:
            from airflow.sdk import BaseHook

            conn = BaseHook.get_connection(str(self.http_conn_id))
            host = (conn.host or "").strip()
            if not host:
                raise ValueError(f"connection {self.http_conn_id!r} has no host")
            if "://" not in host:
                scheme = (conn.schema or "https").strip().rstrip(":/") or "https"
                host = f"{scheme}://{host}"
            parts = urlsplit(host.rstrip("/"))
            if conn.port and parts.port is None:
                parts = parts._replace(netloc=f"{parts.netloc}:{conn.port}")
            base = urlunsplit(parts)
            endpoint = str(self.endpoint or "")
            url = f"{base}/{endpoint.lstrip('/')}" if endpoint else base
            extra = conn.extra_dejson or {}
            extra_headers = extra.get("headers") or {}
            if isinstance(extra_headers, Mapping):
                headers.update({str(k): str(v) for k, v in extra_headers.items()})
                secrets.extend(str(v) for v in extra_headers.values())
            if conn.password:
                headers["Authorization"] = f"Bearer {conn.password}"
                secrets.append(conn.password)
            if "verify" in extra:
                verify = extra["verify"]
            allow_insecure = allow_insecure or _as_bool(extra.get("allow_insecure_auth", False))
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"webhook URL must be http(s), got scheme {parts.scheme!r}")
        headers.update({str(k): str(v) for k, v in (self.headers or {}).items()})
        secrets.extend(str(v) for v in (self.headers or {}).values())
        if parts.username is not None or parts.password is not None:
            # urllib does not send userinfo: send it as HTTP Basic auth, and keep it out of the URL.
            user, password = unquote(parts.username or ""), unquote(parts.password or "")
            basic = base64.b64encode(f"{user}:{password}".encode()).decode()
            if not any(name.lower() == "authorization" for name in headers):
                headers["Authorization"] = f"Basic {basic}"
            secrets.extend(s for s in (password, basic, parts.netloc) if s)
            parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
            url = urlunsplit(parts)
        secrets.extend(s for s in (url, parts.query, parts.path) if s and s != "/")
        # Airflow masks the credentials in every task log line from now on (not the URL parts: only our errors).
        register_secrets(v.split(" ", 1)[-1] for k, v in headers.items() if is_sensitive_header(k))
        return WebhookTarget(url=url, headers=headers, secrets=secrets,
                             verify=_verify_setting(verify, f"webhook connection {self.http_conn_id!r}"
                                                    if self.http_conn_id else "StreamWebhookNotifier"),
                             allow_insecure_auth=allow_insecure)

    def notify(self, context: Any) -> None:
        """Post the event; raise :class:`NotificationError` on a non-2xx answer, no answer, or credentials
        that would travel over plain http (refused before sending)."""
        event = event_from_context(context)
        payload = render_slack(event) if self.payload_format == "slack" else render_json(event)
        target = self.target()
        host = endpoint_host(target.url)
        target.check_transport(f"extra allow_insecure_auth: true on connection {self.http_conn_id!r}"
                               if self.http_conn_id else "StreamWebhookNotifier(allow_insecure_auth=True)")
        if urlsplit(target.url).scheme == "https" and target.verify is False:
            log.warning("webhook host %s: certificate verification is DISABLED (verify=False): anyone on the "
                        "network path can impersonate the server", host)
        if urlsplit(target.url).scheme == "http" and target.credential_headers:
            log.warning("webhook host %s: sending credentials over plain http (allow_insecure_auth)", host)
        log.info("Posting %s event of stream %s to webhook host %s (%s payload)", event.kind.value,
                 event.stream, host, self.payload_format)
        status = post_json(target.url, payload, target.headers, self.timeout, target.secrets, target.ssl_context())
        log.info("Webhook host %s accepted the %s event of stream %s (HTTP %s)", host, event.kind.value,
                 event.stream, status)

    async def async_notify(self, context: Any) -> None:
        """Same as :meth:`notify`, in a worker thread (for the triggerer)."""
        await asyncio.to_thread(self.notify, context)


def post_json(url: str, payload: Mapping[str, Any], headers: Mapping[str, str], timeout: float,
              secrets: list[str] | None = None, context: ssl.SSLContext | None = None) -> int:
    """POST ``payload`` as JSON; return the 2xx status. Errors name the host and status only; the
    first 200 characters of an error answer are included, redacted (``secrets`` and every pattern of
    :func:`airflow_streaming.redaction.redact`). ``context``: the TLS context of an https URL."""
    host = endpoint_host(url)
    secrets = list(secrets or [])
    body = json.dumps(payload).encode("utf-8")
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    handlers: list[Any] = [_NoRedirect]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    error: NotificationError | None = None
    try:
        with opener.open(request, timeout=timeout) as response:
            status = response.status
            response.read()
    except urllib.error.HTTPError as exc:
        try:
            answer = exc.read(200).decode("utf-8", "replace")
        except Exception:  # noqa: BLE001
            answer = ""
        finally:
            exc.close()
        answer = redact(" ".join(answer.split()), secrets)
        error = NotificationError(f"webhook host {host} answered HTTP {exc.code}" + (f": {answer}" if answer else ""))
    except urllib.error.URLError as exc:
        error = NotificationError(f"webhook host {host} unreachable: {redact(str(exc.reason), secrets)}"
                                  f"{_tls_hint(exc.reason)}")
    except (OSError, ValueError) as exc:  # timeouts, resets, bad URLs
        error = NotificationError(f"webhook host {host}: {type(exc).__name__}: {redact(str(exc), secrets)}"
                                  f"{_tls_hint(exc)}")
    if error is not None:
        # Raised outside the except blocks: the urllib exception (which holds the URL) is not chained.
        raise error
    if not 200 <= status < 300:
        raise NotificationError(f"webhook host {host} answered HTTP {status}")
    return status


def _tls_hint(reason: Any) -> str:
    if isinstance(reason, ssl.SSLCertVerificationError):
        return (". The server's certificate could not be verified: trust a private CA with verify='/path/ca.pem' "
                "(or the connection's extra verify), and check that the URL's host is a name the certificate is for")
    return ""
