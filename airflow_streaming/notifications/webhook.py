"""Deprecated: :class:`StreamWebhookNotifier` is :class:`~airflow_streaming.notifications.http_provider.StreamHttpNotifier`.

The hand-written ``urllib`` webhook notifier is gone: webhooks go through the HTTP provider's
notifier, with the same security properties (credentials only over https unless allowed, verified
certificates, no redirects, only the host in logs and errors). This alias keeps old DAGs working and
warns; it keeps two behaviours of the old notifier the provider does not have: a connection's
password without a login is sent as ``Authorization: Bearer <password>``, and a connection without a
schema means https.
"""

from __future__ import annotations

import warnings
from typing import Any

from airflow_streaming.notifications.http_provider import StreamHttpNotifier, endpoint_host

__all__ = ["StreamWebhookNotifier", "endpoint_host"]


class StreamWebhookNotifier(StreamHttpNotifier):
    """Deprecated alias of :class:`StreamHttpNotifier` (same arguments as before: ``url`` or
    ``http_conn_id``, ``endpoint``, ``payload_format``, ``timeout``, ``headers``, ``verify``,
    ``allow_insecure_auth``). Use ``StreamHttpNotifier``; with a connection, put the token in its extra
    ``headers`` (``{"Authorization": "Bearer ..."}``) or its login/password (HTTP Basic)."""

    def __init__(self, *, url: str | None = None, http_conn_id: str | None = None, **kwargs: Any) -> None:
        warnings.warn("StreamWebhookNotifier is deprecated: use airflow_streaming.notifications.StreamHttpNotifier "
                      "(the HTTP provider's notifier, same security checks); see docs/notifications.md",
                      DeprecationWarning, stacklevel=2)
        if bool(url) == bool(http_conn_id):
            raise ValueError("StreamWebhookNotifier needs exactly one of url= or http_conn_id=")
        super().__init__(url=url, **({"http_conn_id": http_conn_id} if http_conn_id else {}), **kwargs)

    def _session(self) -> Any:
        session, url, allow_insecure, timeout = super()._session()
        if not self.url:
            conn = self.hook.get_connection(self.http_conn_id)
            if not conn.schema and "://" not in (conn.host or "") and url.startswith("http://"):
                url = "https://" + url.removeprefix("http://")  # the old notifier's default
            if conn.password and not conn.login and "Authorization" not in session.headers:
                session.headers["Authorization"] = f"Bearer {conn.password}"
        return session, url, allow_insecure, timeout
