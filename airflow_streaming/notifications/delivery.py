"""Sending a stream event: through the notification gate (if any), then to every notifier.

Notifiers are called the way Airflow calls a callback (:func:`call_notifier`); :func:`send_event` is
what the supervisor uses as its ``notify`` callable. No Airflow import: a notifier is any callable
that takes a context.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from airflow_streaming.notifications.events import StreamEvent
from airflow_streaming.notifications.gate import NotificationGate

log = logging.getLogger(__name__)


def call_notifier(notifier: Any, context: Mapping[str, Any]) -> None:
    """Deliver one event through an Airflow notifier the way Airflow calls a callback: ``notifier(context)``,
    which renders its templated fields against ``context`` before ``notify``. The call is made on a
    shallow copy, because rendering replaces the fields in place: the caller's notifier keeps its
    templates (``{{ stream_event.stream }}``...) for the next event."""
    copy.copy(notifier)(dict(context))


def send_event(event: StreamEvent | Mapping[str, Any], notifiers: list[Any],
               gate: NotificationGate | None = None, now: float | None = None) -> StreamEvent | None:
    """Pass ``event`` through ``gate`` (if any) and call each notifier with ``{"stream_event": event}``.

    Usable as the supervisor's ``notify`` callable (``functools.partial(send_event, notifiers=..., gate=...)``).
    Every notifier is tried; the first failure is raised after the others ran. Returns the event sent,
    or ``None`` when the gate suppressed it.
    """
    if not isinstance(event, StreamEvent):
        event = StreamEvent.from_dict(event)
    admitted = gate.admit(event, now) if gate is not None else event
    if admitted is None:
        return None
    first_error: BaseException | None = None
    for notifier in notifiers:
        try:
            call_notifier(notifier, {"stream_event": admitted})
        except Exception as exc:  # noqa: BLE001 - try the other notifiers, then raise
            log.warning("notifier %s failed for %s %s: %s", type(notifier).__name__, admitted.stream,
                        admitted.kind.value, exc)
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    return admitted
