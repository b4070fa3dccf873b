"""Deprecated: :class:`StreamEmailNotifier` is :class:`~airflow_streaming.notifications.smtp_provider.StreamSmtpNotifier`.

The hand-written ``smtplib`` email notifier is gone: email goes through the SMTP provider's notifier
(installed with Airflow), with the same security properties (no AUTH over a connection without TLS
unless allowed, verified certificates, no password in errors). The connection's extras are the SMTP
provider's now: ``disable_ssl: true`` for STARTTLS (port 587), ``disable_tls: true`` for implicit TLS
(port 465), ``ssl_context: none`` to skip certificate checks; the old ``ssl``, ``starttls`` and
``verify`` extras are refused with what to set instead. This alias keeps old DAGs working and warns.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from airflow_streaming.notifications.events import SUBJECT_PREFIX
from airflow_streaming.notifications.smtp_provider import StreamSmtpNotifier

__all__ = ["StreamEmailNotifier"]


class StreamEmailNotifier(StreamSmtpNotifier):
    """Deprecated alias of :class:`StreamSmtpNotifier` (same arguments as before: ``to``,
    ``smtp_conn_id``, ``from_email``, ``subject_prefix``; ``timeout`` is the connection's extra now)."""

    def __init__(self, *, to: str | Iterable[str], smtp_conn_id: str = "smtp_default", from_email: str | None = None,
                 subject_prefix: str | None = SUBJECT_PREFIX, timeout: float | None = None, **kwargs: Any) -> None:
        warnings.warn("StreamEmailNotifier is deprecated: use airflow_streaming.notifications.StreamSmtpNotifier (the "
                      "SMTP provider's notifier, same security checks; its connection extras); see "
                      "docs/notifications.md", DeprecationWarning, stacklevel=2)
        if not smtp_conn_id:
            raise ValueError("StreamEmailNotifier needs an smtp_conn_id")
        super().__init__(to=to, smtp_conn_id=smtp_conn_id, from_email=from_email, subject_prefix=subject_prefix,
                         **kwargs)
