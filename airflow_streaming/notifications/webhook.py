"""Post stream events to a webhook (generic JSON or a Slack incoming webhook) with the stdlib only."""

from __future__ import annotations

import asyncio
import logging
import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow.sdk import BaseNotifier

from airflow_streaming.notifications.events import (
    NotificationError,
    event_from_context,
    redact,
    render_json,
    render_slack,
)

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


class StreamWebhookNotifier(BaseNotifier):
    """Post a stream event to a webhook as JSON (:func:`render_json`) or as a Slack message (:func:`render_slack`).

    Sends ``context["stream_event"]`` (a :class:`StreamEvent` or its dict); without one, a FAILED event
    built from the task failure context (DAG, task, exception, log URL), so it also works as an
    ``on_failure_callback``. Only the endpoint's host is ever logged or put in an error: never its
    path, query string, token or headers. Redirects are refused. A non-2xx answer raises
    :class:`NotificationError` naming the status and host.

    :param url: the webhook URL (templated). Give ``url`` or ``http_conn_id``, not both.
    :param http_conn_id: an Airflow connection (templated) whose ``schema`` (http/https, default
        https), ``host`` and ``port`` make the base URL; its password, if any, is sent as
        ``Authorization: Bearer <password>``; ``extra`` may hold ``{"headers": {...}}``.
    :param endpoint: path (and query) appended to the connection's base URL (templated).
    :param payload_format: ``"json"`` (default) or ``"slack"``.
    :param timeout: seconds for the whole request.
    :param headers: extra HTTP headers (templated); never logged.
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

    def _target(self) -> tuple[str, dict[str, str], list[str]]:
        """URL, headers and the secrets to scrub from any error text."""
        headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "airflow-streaming-notifier"}
        secrets: list[str] = []
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
            extra_headers = (conn.extra_dejson or {}).get("headers") or {}
            if isinstance(extra_headers, Mapping):
                headers.update({str(k): str(v) for k, v in extra_headers.items()})
                secrets.extend(str(v) for v in extra_headers.values())
            if conn.password:
                headers["Authorization"] = f"Bearer {conn.password}"
                secrets.append(conn.password)
        if urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"webhook URL must be http(s), got scheme {urlsplit(url).scheme!r}")
        headers.update({str(k): str(v) for k, v in (self.headers or {}).items()})
        secrets.extend(str(v) for v in (self.headers or {}).values())
        parts = urlsplit(url)
        secrets.extend(s for s in (url, parts.query, parts.path, parts.password or "") if s and s != "/")
        return url, headers, secrets

    def notify(self, context: Any) -> None:
        """Post the event; raise :class:`NotificationError` on a non-2xx answer or no answer."""
        event = event_from_context(context)
        payload = render_slack(event) if self.payload_format == "slack" else render_json(event)
        url, headers, secrets = self._target()
        host = endpoint_host(url)
        log.info("Posting %s event of stream %s to webhook host %s (%s payload)", event.kind.value,
                      event.stream, host, self.payload_format)
        status = post_json(url, payload, headers, self.timeout, secrets)
        log.info("Webhook host %s accepted the %s event of stream %s (HTTP %s)", host, event.kind.value,
                      event.stream, status)

    async def async_notify(self, context: Any) -> None:
        """Same as :meth:`notify`, in a worker thread (for the triggerer)."""
        await asyncio.to_thread(self.notify, context)


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in sorted((s for s in secrets if s and len(s) >= 3), key=len, reverse=True):
        text = text.replace(secret, "***")
    return redact(text)


def post_json(url: str, payload: Mapping[str, Any], headers: Mapping[str, str], timeout: float,
              secrets: list[str] | None = None) -> int:
    """POST ``payload`` as JSON; return the 2xx status. Errors name the host and status only; the
    first 200 characters of an error answer are included with ``secrets`` and :func:`redact` applied."""
    host = endpoint_host(url)
    secrets = list(secrets or [])
    body = json.dumps(payload).encode("utf-8")
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    opener = urllib.request.build_opener(_NoRedirect)
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
        answer = _scrub(" ".join(answer.split()), secrets)
        error = NotificationError(f"webhook host {host} answered HTTP {exc.code}" + (f": {answer}" if answer else ""))
    except urllib.error.URLError as exc:
        error = NotificationError(f"webhook host {host} unreachable: {_scrub(str(exc.reason), secrets)}")
    except (OSError, ValueError) as exc:  # timeouts, resets, bad URLs
        error = NotificationError(f"webhook host {host}: {type(exc).__name__}: {_scrub(str(exc), secrets)}")
    if error is not None:
        # Raised outside the except blocks: the urllib exception (which holds the URL) is not chained.
        raise error
    if not 200 <= status < 300:
        raise NotificationError(f"webhook host {host} answered HTTP {status}")
    return status
