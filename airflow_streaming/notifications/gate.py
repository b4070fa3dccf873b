"""The notification gate: flap protection, with its state in one small file.

:class:`NotificationGate` decides whether a :class:`~airflow_streaming.notifications.events.StreamEvent`
is worth a message: at most one per state change per stream, repeats within a window counted and
summarised in the next message that is sent. What it remembers lives in a JSON document on the
control storage, which it reads and replaces on every event; a state it cannot read or that holds
garbage never silences a notification (:class:`GateStateCorrupt`).

Plain Python: no Airflow, no Spark.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from airflow_streaming.control.contract import json_object_or_none
from airflow_streaming.control.storage import ControlStorage
from airflow_streaming.exceptions import StreamingError
from airflow_streaming.notifications.events import StreamEvent, iso_utc

log = logging.getLogger(__name__)


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
        doc = json_object_or_none(raw)
        reason = _gate_state_problem(doc, raw)
        if doc is not None and reason is None:
            return doc, True, None
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
                     event.kind.value, iso_utc(float(last["sent_at"])), last["suppressed"])
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


def _gate_state_problem(doc: dict[str, Any] | None, raw: bytes) -> str | None:
    """Why ``doc``, the JSON object in ``raw`` (``None``: there is none), is not a gate state document
    (``None``: it is one)."""
    if doc is None or not isinstance(doc.get("streams"), dict):
        shown = raw[:80] if doc is None else str(doc)[:80]
        return f"expected {{'version', 'streams': {{...}}}}, got {shown!r}"
    for stream, entry in doc["streams"].items():
        if not isinstance(entry, dict):
            return f"the entry of stream {stream!r} is not an object"
        sent_at, suppressed = entry.get("sent_at"), entry.get("suppressed", 0)
        if sent_at is not None and (isinstance(sent_at, bool) or not isinstance(sent_at, (int, float))):
            return f"sent_at of stream {stream!r} is not a number: {str(sent_at)[:40]!r}"
        if suppressed is not None and (isinstance(suppressed, bool) or not isinstance(suppressed, int)):
            return f"suppressed of stream {stream!r} is not a count: {str(suppressed)[:40]!r}"
    return None
