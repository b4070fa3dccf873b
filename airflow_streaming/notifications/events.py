"""Stream events, their rendering (text, Slack, JSON), secret redaction and flap protection.

A :class:`StreamEvent` is what the supervisor, the upgrade operators or a task failure callback
report about one stream: it failed, is restarting, recovered, gave up, is unhealthy, was upgraded or
rolled back. :func:`render_text`, :func:`render_slack` and :func:`render_json` turn it into a
message; every string they produce goes through :func:`airflow_streaming.redaction.redact` (re-exported
here as :func:`redact`), so a password in an error message or a token in a link never reaches a chat
channel or a mailbox. :class:`NotificationGate` decides
whether an event is worth a message: at most one per state change per stream, repeats within a
window counted and summarised in the next message that is sent.

Plain Python: no Airflow, no Spark. The notifiers in :mod:`.webhook` and :mod:`.email` do the I/O.
"""

from __future__ import annotations

import copy
import dataclasses
import html
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from airflow_streaming.control.storage import ControlStorage
from airflow_streaming.exceptions import StreamingError
from airflow_streaming.redaction import MASK, redact  # noqa: F401 - re-exported: notifications.redact

log = logging.getLogger(__name__)

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
    :param suppressed_count: similar events the :class:`NotificationGate` suppressed before this one.
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


def _iso(epoch: float) -> str:
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
        ("Event", f"{event.kind.value} at {_iso(event.at)}"),
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


# --------------------------------------------------------------------------------------------------
# Flap protection


class GateStateCorrupt(StreamingError):
    """The notification gate's state file holds garbage (not JSON, or not the gate's document).

    Never raised out of :meth:`NotificationGate.admit`: the gate reports it (an ERROR log line and a
    note on the next event sent), keeps the bad file aside for inspection (:attr:`moved_to`) and starts
    its flap protection afresh - a broken state file never silences a notification, never crashes the
    supervisor and is never silently overwritten."""

    def __init__(self, path: str, reason: str, moved_to: str | None = None):
        self.path, self.reason, self.moved_to = path, reason, moved_to
        kept = (f"kept aside as {moved_to}" if moved_to else
                "it could not be moved aside, so it is left in place and not overwritten")
        super().__init__(f"notification gate state {path} is garbage ({reason}); {kept}. Flap protection starts "
                         "afresh: repeats are not suppressed until the next message is recorded. Inspect the "
                         "kept file (what wrote it?); delete it when done")


class NotificationGate:
    """Flap protection: at most one message per state change per stream.

    An event of the same kind and error class as the last one *sent* for its stream, within
    ``repeat_window_s`` of it, is not sent but counted; the next event that is sent (a different
    kind or error class, or a repeat after the window) carries ``suppressed_count`` and
    ``suppressed_since`` (the time of the last message), rendered as
    ``"(N similar events suppressed since HH:MM)"``.

    The state is one small JSON document at ``path``, read and replaced whole through
    :meth:`ControlStorage.write_atomic` on every :meth:`admit`. Read-modify-write is not locked:
    give each concurrently running sender (e.g. one supervisor per stream) its own path.

    The gate fails open - the event is sent - and never loses what it found:

    - the state cannot be read (a storage error): the event is sent, logged, and the file is left
      untouched (not overwritten with a fresh state);
    - the state is garbage: :class:`GateStateCorrupt` is reported (an ERROR log line, and a note in the
      event's ``health_reasons``), the bad file is moved aside to ``<path>.corrupt-<UTC time>``, and the
      gate starts afresh (:attr:`last_problem` holds the report);
    - the state cannot be saved: logged; the event is still sent.

    :param storage: the control storage the state lives in.
    :param path: the state document's path in ``storage``.
    :param repeat_window_s: seconds during which a repeat of the last message is suppressed.
    """

    VERSION = 1

    def __init__(self, storage: ControlStorage, path: str, repeat_window_s: float = 900.0) -> None:
        if repeat_window_s < 0:
            raise ValueError(f"repeat_window_s must be >= 0, got {repeat_window_s!r}")
        self.storage = storage
        self.path = path
        self.repeat_window_s = float(repeat_window_s)
        self.last_problem: GateStateCorrupt | None = None
        """The last garbage state this gate found and moved aside (``None``: none)."""

    def _fresh(self) -> dict[str, Any]:
        return {"version": self.VERSION, "streams": {}}

    def _load(self) -> tuple[dict[str, Any], bool, GateStateCorrupt | None]:
        """``(state, may_save, problem)``: ``may_save`` is False when the file could not be read (it must
        not be overwritten); ``problem`` is set when it held garbage (then moved aside)."""
        try:
            raw = self.storage.read_bytes(self.path)
        except OSError as exc:
            log.warning("notification gate state %s cannot be read (%s): sending without flap protection, "
                        "leaving the file as it is", self.path, exc)
            return self._fresh(), False, None
        if raw is None:
            return self._fresh(), True, None
        reason = _gate_state_problem(raw)
        if reason is None:
            return json.loads(raw), True, None
        moved_to = self._move_aside()
        problem = GateStateCorrupt(self.path, reason, moved_to)
        self.last_problem = problem
        log.error("%s", problem)
        return self._fresh(), moved_to is not None, problem

    def _move_aside(self) -> str | None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        aside = f"{self.path}.corrupt-{stamp}"
        try:
            self.storage.move(self.path, aside)
            return aside
        except OSError as exc:
            log.warning("cannot move the notification gate state %s aside to %s: %s", self.path, aside, exc)
            return None

    def _save(self, doc: dict[str, Any]) -> None:
        try:
            self.storage.write_atomic(self.path, json.dumps(doc, sort_keys=True, indent=1).encode("utf-8"))
        except OSError as exc:
            log.warning("notification gate state %s not saved (%s)", self.path, exc)

    def state(self, stream: str) -> dict[str, Any] | None:
        """What the gate remembers about ``stream`` (last kind, error class, sent at, suppressed count)."""
        return self._load()[0]["streams"].get(stream)

    def admit(self, event: StreamEvent | Mapping[str, Any], now: float | None = None) -> StreamEvent | None:
        """The event to send (with ``suppressed_count``/``suppressed_since`` filled when repeats were
        suppressed before it), or ``None`` when it repeats the last message within the window."""
        if not isinstance(event, StreamEvent):
            event = StreamEvent.from_dict(event)
        now = time.time() if now is None else float(now)
        doc, may_save, problem = self._load()
        last = doc["streams"].get(event.stream) or {}
        repeat = (
            last.get("kind") == event.kind.value
            and last.get("error_class") == event.error_class
            and last.get("sent_at") is not None
            and 0 <= now - float(last["sent_at"]) < self.repeat_window_s
        )
        if repeat:
            last["suppressed"] = int(last.get("suppressed") or 0) + 1
            doc["streams"][event.stream] = last
            self._save(doc)
            log.info("%s %s suppressed: repeats the message sent at %s (%d suppressed)", event.stream,
                     event.kind.value, _iso(float(last["sent_at"])), last["suppressed"])
            return None
        suppressed = int(last.get("suppressed") or 0)
        if suppressed:
            event = dataclasses.replace(event, suppressed_count=suppressed, suppressed_since=last.get("sent_at"))
        if problem is not None:
            event = dataclasses.replace(event, health_reasons=[*event.health_reasons, f"airflow-streaming: {problem}"])
        doc["streams"][event.stream] = {"kind": event.kind.value, "error_class": event.error_class,
                                        "sent_at": now, "suppressed": 0}
        doc["version"] = self.VERSION
        if may_save:
            self._save(doc)
        return event


def _gate_state_problem(raw: bytes) -> str | None:
    """Why ``raw`` is not a gate state document (``None``: it is one)."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"not JSON: {exc}"
    if not isinstance(doc, dict) or not isinstance(doc.get("streams"), dict):
        return f"expected {{'version', 'streams': {{...}}}}, got {str(doc)[:80]!r}"
    for stream, entry in doc["streams"].items():
        if not isinstance(entry, dict):
            return f"the entry of stream {stream!r} is not an object"
        sent_at, suppressed = entry.get("sent_at"), entry.get("suppressed", 0)
        if sent_at is not None and (isinstance(sent_at, bool) or not isinstance(sent_at, (int, float))):
            return f"sent_at of stream {stream!r} is not a number: {str(sent_at)[:40]!r}"
        if suppressed is not None and (isinstance(suppressed, bool) or not isinstance(suppressed, int)):
            return f"suppressed of stream {stream!r} is not a count: {str(suppressed)[:40]!r}"
    return None


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
