"""Notifications about streams: events, rendering, flap protection (pure Python) and the Airflow notifiers.

The event side - the events and their rendering (:mod:`.events`), flap protection (:mod:`.gate`) and
sending through the notifiers (:mod:`.delivery`) - imports no Airflow; the notifiers -
:class:`StreamHttpNotifier` (the HTTP provider's), :class:`StreamSmtpNotifier` (the SMTP provider's),
:class:`StreamSlackWebhookNotifier` (the Slack provider's), and the deprecated aliases
:class:`StreamWebhookNotifier` and :class:`StreamEmailNotifier` - are imported lazily on first access, so ``airflow_streaming.notifications``
stays cheap for the supervisor and the driver side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_streaming.notifications.delivery import call_notifier, send_event
from airflow_streaming.notifications.events import (
    EventKind,
    NotificationError,
    StreamEvent,
    event_from_context,
    event_template_context,
    redact,
    render_html,
    render_json,
    render_slack,
    render_text,
    suppressed_summary,
)
from airflow_streaming.notifications.gate import GateStateCorrupt, NotificationGate

if TYPE_CHECKING:
    from airflow_streaming.notifications.email import StreamEmailNotifier
    from airflow_streaming.notifications.http_provider import StreamHttpNotifier
    from airflow_streaming.notifications.slack_provider import StreamSlackWebhookNotifier
    from airflow_streaming.notifications.smtp_provider import StreamSmtpNotifier
    from airflow_streaming.notifications.webhook import StreamWebhookNotifier

_LAZY = {
    "StreamHttpNotifier": "airflow_streaming.notifications.http_provider",
    "StreamSmtpNotifier": "airflow_streaming.notifications.smtp_provider",
    "StreamSlackWebhookNotifier": "airflow_streaming.notifications.slack_provider",
    "StreamWebhookNotifier": "airflow_streaming.notifications.webhook",
    "StreamEmailNotifier": "airflow_streaming.notifications.email",
}

__all__ = [
    "EventKind",
    "GateStateCorrupt",
    "NotificationError",
    "NotificationGate",
    "StreamEmailNotifier",
    "StreamEvent",
    "StreamHttpNotifier",
    "StreamSlackWebhookNotifier",
    "StreamSmtpNotifier",
    "StreamWebhookNotifier",
    "call_notifier",
    "event_from_context",
    "event_template_context",
    "redact",
    "render_html",
    "render_json",
    "render_slack",
    "render_text",
    "send_event",
    "suppressed_summary",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
