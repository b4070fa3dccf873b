"""Notifications about streams: events, rendering, flap protection (pure Python) and two Airflow notifiers.

The event side (:mod:`.events`) imports no Airflow; the notifiers (:class:`StreamWebhookNotifier`,
:class:`StreamEmailNotifier`) are imported lazily on first access, so ``airflow_streaming.notifications``
stays cheap for the supervisor and the driver side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_streaming.notifications.events import (
    EventKind,
    GateStateCorrupt,
    NotificationError,
    NotificationGate,
    StreamEvent,
    call_notifier,
    event_from_context,
    event_template_context,
    redact,
    render_html,
    render_json,
    render_slack,
    render_text,
    send_event,
    suppressed_summary,
)

if TYPE_CHECKING:
    from airflow_streaming.notifications.email import StreamEmailNotifier
    from airflow_streaming.notifications.webhook import StreamWebhookNotifier

_LAZY = {
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
