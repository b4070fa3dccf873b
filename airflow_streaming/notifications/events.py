"""Stream events and their rendering (text, Slack, JSON, HTML), with secret redaction.

A :class:`StreamEvent` is what the supervisor, the upgrade operators or a task failure callback
report about one stream: it failed, is restarting, recovered, gave up, is unhealthy, was upgraded or
rolled back. :func:`render_text`, :func:`render_slack` and :func:`render_json` turn it into a
message; every string they produce goes through :func:`airflow_streaming.redaction.redact` (re-exported
here as :func:`redact`), so a password in an error message or a token in a link never reaches a chat
channel or a mailbox.

Plain Python: no Airflow, no Spark, no state. Whether an event is worth a message (flap protection)
is :mod:`.gate`'s; sending it through the notifiers is :mod:`.delivery`'s, and the notifiers in
:mod:`.http_provider`, :mod:`.smtp_provider` and :mod:`.slack_provider` do the I/O.
"""

from __future__ import annotations

import dataclasses
import html
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from airflow_streaming.exceptions import StreamingError
from airflow_streaming.redaction import MASK, redact  # noqa: F401 - re-exported: notifications.redact

#: Default subject prefix of every rendered message.
SUBJECT_PREFIX = "[airflow-streaming]"
#: ``schema`` value of :func:`render_json` payloads; bumped on incompatible changes.
JSON_SCHEMA = "airflow-streaming.event/v1"
_SUBJECT_MAX = 200


class NotificationError(StreamingError):
    """A notification could not be delivered; the message names the endpoint's host, never a secret."""


class EventKind(str, Enum):
    """What happened to a stream."""

    FAILED = "FAILED"
    RESTARTING = "RESTARTING"
    RECOVERED = "RECOVERED"
    GAVE_UP = "GAVE_UP"
    UNHEALTHY = "UNHEALTHY"
    UPGRADE_SUCCEEDED = "UPGRADE_SUCCEEDED"
    UPGRADE_ROLLED_BACK = "UPGRADE_ROLLED_BACK"
    FAILED_OVER = "FAILED_OVER"
    """The stream's hot standby took over from a crashed driver (``StreamSpec.hot_standby``)."""


@dataclass(frozen=True)
class StreamEvent:
    """One thing that happened to one stream, with what an on-call engineer needs to act on it.

    :param kind: the :class:`EventKind` (a plain string such as ``"FAILED"`` is accepted).
    :param stream: the stream's name (for a plain Airflow task failure: ``<dag_id>.<task_id>``).
    :param version: the stream version that ran (or was deployed by an upgrade).
    :param run_id: the stream run id (or the Airflow DAG run id for a task failure).
    :param app_id: Spark application id, when known.
    :param driver_id: the driver's pid (local/client mode) or the cluster's driver id.
    :param last_committed_batch: the last batch id committed in the checkpoint.
    :param error_first_line: the first line of the error message (Spark's or the task's).
    :param error_class: Spark's error class (``STREAM_FAILED``...) or the exception type.
    :param attempt: restart attempt number (1-based), for FAILED/RESTARTING/GAVE_UP.
    :param max_attempts: the restart policy's maximum attempts.
    :param next_attempt_in_s: seconds until the next restart attempt (0: now).
    :param health_reasons: the health verdict's reason messages (or why the supervisor gave up).
    :param links: name -> URL, e.g. ``{"spark_ui": ..., "airflow_log": ...}``.
    :param at: when it happened, epoch seconds.
    :param dag_id: the Airflow DAG the event comes from, if any.
    :param task_id: the Airflow task the event comes from, if any.
    :param suppressed_count: similar events the notification gate (:mod:`.gate`) suppressed before this one.
    :param suppressed_since: epoch seconds since which they were suppressed (the last message sent).
    """

    kind: EventKind
    stream: str
    version: str | None = None
    run_id: str | None = None
    app_id: str | None = None
    driver_id: str | None = None
    last_committed_batch: int | None = None
    error_first_line: str | None = None
    error_class: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    next_attempt_in_s: float | None = None
    health_reasons: list[str] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)
    at: float = field(default_factory=time.time)
    dag_id: str | None = None
    task_id: str | None = None
    suppressed_count: int = 0
    suppressed_since: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, EventKind):
            try:
                object.__setattr__(self, "kind", EventKind(str(self.kind).upper()))
            except ValueError:
                known = ", ".join(k.value for k in EventKind)
                raise ValueError(f"unknown event kind {self.kind!r} (known: {known})") from None
        if not self.stream:
            raise ValueError("a StreamEvent needs the stream's name")
        if self.driver_id is not None and not isinstance(self.driver_id, str):
            object.__setattr__(self, "driver_id", str(self.driver_id))
        if self.version is not None and not isinstance(self.version, str):
            object.__setattr__(self, "version", str(self.version))
        object.__setattr__(self, "health_reasons", [str(r) for r in self.health_reasons or ()])
        object.__setattr__(self, "links", {str(k): str(v) for k, v in (self.links or {}).items() if v})

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (the kind as its string value)."""
        d = dataclasses.asdict(self)
        d["kind"] = self.kind.value
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StreamEvent:
        """Build from :meth:`to_dict` output or a supervisor event dict; unknown keys are ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        if values.get("at") is None:
            values.pop("at", None)
        for key in ("health_reasons", "links"):
            if values.get(key) is None:
                values.pop(key, None)
        if values.get("suppressed_count") is None:
            values.pop("suppressed_count", None)
        return cls(**values)


# --------------------------------------------------------------------------------------------------
# Rendering

_LINK_LABELS = {"spark_ui": "Spark UI", "airflow_log": "Airflow task log", "airflow_task_log": "Airflow task log"}


def _link_label(name: str) -> str:
    return _LINK_LABELS.get(name, name.replace("_", " "))


def _seconds(value: float) -> str:
    value = float(value)
    if value >= 120:
        return f"{value / 60:.0f}m" if value % 60 == 0 or value >= 600 else f"{value / 60:.1f}m"
    return f"{value:.0f}s"


def _hhmm(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%H:%M")


def iso_utc(epoch: float) -> str:
    """``epoch`` as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC)."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _error(event: StreamEvent) -> str | None:
    if not event.error_first_line and not event.error_class:
        return None
    line = event.error_first_line or ""
    if event.error_class and not line.startswith(f"[{event.error_class}]"):
        return f"[{event.error_class}] {line}".rstrip()
    return line


def _attempts(event: StreamEvent) -> str | None:
    if event.attempt is None:
        return None
    text = f"attempt {event.attempt}" + (f" of {event.max_attempts}" if event.max_attempts else "")
    if event.next_attempt_in_s is not None:
        text += ", next now" if event.next_attempt_in_s <= 0 else f", next in {_seconds(event.next_attempt_in_s)}"
    return text


def suppressed_summary(event: StreamEvent) -> str | None:
    """``"(N similar events suppressed since HH:MM)"`` (UTC) when the gate suppressed events, else ``None``."""
    if not event.suppressed_count:
        return None
    since = f" since {_hhmm(event.suppressed_since)}" if event.suppressed_since is not None else ""
    noun = "event" if event.suppressed_count == 1 else "events"
    return f"({event.suppressed_count} similar {noun} suppressed{since})"


def _headline(event: StreamEvent) -> str:
    """The subject without prefix: ``orders-etl FAILED: [STREAM_FAILED] ...``."""
    s, k, err, attempts = event.stream, event.kind, _error(event), _attempts(event)
    if k == EventKind.FAILED:
        text = f"{s} FAILED" + (f": {err}" if err else "")
        return text + (f" ({attempts})" if attempts else "")
    if k == EventKind.RESTARTING:
        return f"{s} restarting" + (f" ({attempts})" if attempts else "")
    if k == EventKind.RECOVERED:
        return f"{s} RECOVERED" + (f" (version {event.version})" if event.version else "")
    if k == EventKind.GAVE_UP:
        tried = f" after {event.attempt} attempt{'s' if event.attempt != 1 else ''}" if event.attempt else ""
        return f"{s} GAVE UP{tried}" + (f": {err}" if err else "")
    if k == EventKind.UNHEALTHY:
        return f"{s} UNHEALTHY" + (f": {event.health_reasons[0]}" if event.health_reasons else "")
    if k == EventKind.FAILED_OVER:
        return f"{s} FAILED OVER to its hot standby" + (f" (run {event.run_id})" if event.run_id else "")
    if k == EventKind.UPGRADE_SUCCEEDED:
        return f"{s} upgraded" + (f" to {event.version}" if event.version else "")
    # UPGRADE_ROLLED_BACK
    return f"{s} upgrade ROLLED BACK" + (f" (running {event.version})" if event.version else "") + (
        f": {err}" if err else "")


def _subject(event: StreamEvent, prefix: str | None) -> str:
    text = " ".join(_headline(event).split())  # one line, whatever the error contained
    if prefix:
        text = f"{prefix} {text}"
    if len(text) > _SUBJECT_MAX:
        text = text[: _SUBJECT_MAX - 3].rstrip() + "..."
    return redact(text)


def _facts(event: StreamEvent) -> list[tuple[str, str]]:
    """(label, value) pairs of the body, in display order; unknown values shown as ``-``."""
    facts = [
        ("Stream", event.stream),
        ("Version", event.version or "-"),
        ("Event", f"{event.kind.value} at {iso_utc(event.at)}"),
        ("Run", event.run_id or "-"),
        ("Application", event.app_id or "-"),
        ("Driver", event.driver_id or "-"),
        ("Last committed batch", "-" if event.last_committed_batch is None else str(event.last_committed_batch)),
    ]
    if event.dag_id or event.task_id:
        facts.append(("Airflow task", ".".join(p for p in (event.dag_id, event.task_id) if p)))
    if event.error_first_line or event.error_class:
        facts.append(("Error", event.error_first_line or "-"))
        facts.append(("Error class", event.error_class or "-"))
    attempts = _attempts(event)
    if attempts:
        facts.append(("Restart", attempts))
    return facts


def render_text(event: StreamEvent, prefix: str | None = SUBJECT_PREFIX) -> tuple[str, str]:
    """``(subject, body)`` as plain text, redacted. ``prefix`` starts the subject (``None``: none)."""
    width = max(len(label) for label, _ in _facts(event)) + 1
    lines = [f"{label + ':':<{width}} {value}" for label, value in _facts(event)]
    if event.health_reasons:
        lines.append("Health:")
        lines.extend(f"  - {reason}" for reason in event.health_reasons)
    if event.links:
        lines.append("Links:")
        lines.extend(f"  {_link_label(name)}: {url}" for name, url in event.links.items())
    summary = suppressed_summary(event)
    if summary:
        lines.extend(["", summary])
    return _subject(event, prefix), redact("\n".join(lines) + "\n")


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_slack(event: StreamEvent, prefix: str | None = SUBJECT_PREFIX) -> dict[str, Any]:
    """A Slack incoming-webhook payload: ``{"text": subject, "blocks": [...]}`` (Block Kit), redacted."""
    subject = _subject(event, prefix)
    esc = _slack_escape
    fields = [{"type": "mrkdwn", "text": redact(f"*{esc(label)}*\n{esc(value)}")}
              for label, value in _facts(event) if label not in ("Error", "Error class")][:10]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _subject(event, None)[:150], "emoji": False}},
        {"type": "section", "fields": fields},
    ]
    if event.error_first_line or event.error_class:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": redact(
            f"*Error* (`{esc(event.error_class or '-')}`)\n```{esc(event.error_first_line or '-')}```")}})
    if event.health_reasons:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": redact(
            "*Health*\n" + "\n".join(f"• {esc(r)}" for r in event.health_reasons))[:3000]}})
    if event.links:
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": f"<{esc(redact(url))}|{esc(_link_label(name))}>"}
            for name, url in event.links.items()
        ][:10]})
    summary = suppressed_summary(event)
    if summary:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": redact(summary)}]})
    return {"text": subject, "blocks": blocks}


def render_json(event: StreamEvent, prefix: str | None = SUBJECT_PREFIX) -> dict[str, Any]:
    """A flat JSON document: every :class:`StreamEvent` field (redacted) plus ``schema``, ``subject``,
    ``text`` (the plain-text body) and ``suppressed_summary``. :meth:`StreamEvent.from_dict` reads it back."""
    subject, body = render_text(event, prefix)
    return {"schema": JSON_SCHEMA, **redact(event.to_dict()), "subject": subject, "text": body,
            "suppressed_summary": suppressed_summary(event)}


# --------------------------------------------------------------------------------------------------
# Events from an Airflow task context (duck-typed: no Airflow import)

_LEADING_ERROR_CLASS = re.compile(r"^\s*\[(?P<cls>[A-Za-z][A-Za-z0-9_.]*)\]")


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def _task_stream(spec: Any) -> tuple[str | None, str | None]:
    """(name, version) of a task's stream spec (object, dict or YAML path), or ``(None, None)``."""
    if spec is None:
        return None, None
    try:
        from airflow_streaming.spec import as_spec

        parsed = as_spec(spec)
        return parsed.name, parsed.version
    except Exception:  # noqa: BLE001 - an unreadable spec must not stop the failure notification
        if isinstance(spec, Mapping):
            return spec.get("name"), spec.get("version")
        return getattr(spec, "name", None), getattr(spec, "version", None)


def event_from_context(context: Mapping[str, Any]) -> StreamEvent:
    """The event to send for a notifier's ``context``.

    ``context["stream_event"]`` (a :class:`StreamEvent` or its dict) wins. Otherwise the context is a
    task failure callback's: a FAILED event for ``<dag_id>.<task_id>`` (or the task's stream spec, when
    the task carries one) with the exception's first line and type and the task's log URL.
    """
    given = context.get("stream_event")
    if isinstance(given, StreamEvent):
        return given
    if isinstance(given, Mapping):
        return StreamEvent.from_dict(given)
    if given is not None:
        raise ValueError(f"context['stream_event'] must be a StreamEvent or a dict, got {type(given).__name__}")

    ti = context.get("ti") or context.get("task_instance")
    task = context.get("task") or getattr(ti, "task", None)
    dag = context.get("dag")
    dag_id = getattr(ti, "dag_id", None) or getattr(dag, "dag_id", None)
    task_id = getattr(ti, "task_id", None) or getattr(task, "task_id", None)
    run_id = context.get("run_id") or getattr(ti, "run_id", None)

    stream, version = _task_stream(getattr(task, "spec", None))
    stream = stream or ".".join(str(p) for p in (dag_id, task_id) if p) or "unknown"

    exc = context.get("exception")
    error_line, error_class = None, None
    if isinstance(exc, BaseException):
        error_line = _first_line(str(exc)) or type(exc).__name__
        error_class = type(exc).__name__
    elif exc:
        error_line = _first_line(str(exc))
    if error_line:
        m = _LEADING_ERROR_CLASS.match(error_line)
        if m:
            error_class = m.group("cls")
    links: dict[str, str] = {}
    try:
        log_url = getattr(ti, "log_url", None)
    except Exception:  # noqa: BLE001 - a missing config must not stop the notification
        log_url = None
    if isinstance(log_url, str) and log_url:
        links["airflow_log"] = log_url
    return StreamEvent(kind=EventKind.FAILED, stream=str(stream), version=version, run_id=run_id,
                       error_first_line=error_line, error_class=error_class, links=links,
                       dag_id=dag_id, task_id=task_id)


def render_html(event: StreamEvent, prefix: str | None = SUBJECT_PREFIX) -> str:
    """The plain-text body of :func:`render_text` as a small HTML document (escaped, redacted)."""
    subject, body = render_text(event, prefix)
    return (f"<html><body><h3>{html.escape(subject)}</h3>"
            f"<pre style=\"font-family: monospace\">{html.escape(body)}</pre></body></html>")


def event_template_context(context: Mapping[str, Any], prefix: str | None = SUBJECT_PREFIX) -> dict[str, Any]:
    """What a notifier's templates may use about the event of ``context`` (see :func:`event_from_context`):
    ``stream_event`` (the :class:`StreamEvent`), ``stream_event_subject``, ``stream_event_text`` (the
    plain-text body), ``stream_event_html`` and ``stream_event_json`` (:func:`render_json`). All redacted."""
    event = event_from_context(context)
    subject, body = render_text(event, prefix)
    return {"stream_event": event, "stream_event_subject": subject, "stream_event_text": body,
            "stream_event_html": render_html(event, prefix), "stream_event_json": render_json(event, prefix)}
