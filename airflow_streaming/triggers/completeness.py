"""The completeness event trigger: an Asset event per period complete in a stream's sink (``AssetWatcher``).

Use it as the trigger of an :class:`airflow.sdk.AssetWatcher` (event-driven scheduling, docs/assets.md)::

    Asset("stream://events/hourly", watchers=[AssetWatcher(
        name="events_hourly", trigger=SparkStreamCompletenessTrigger(spec=spec_dict, rule={"period": "hourly"}))])

Each poll reads the stream's checkpoint (:func:`airflow_streaming.hooks.completeness.look`) and yields one
:class:`TriggerEvent` per period closed after the **cursor**, oldest first. Airflow's triggerer turns a
watcher's event into an Asset event whose ``extra`` is ``{"from_trigger": true, "payload": <the event's
payload>}`` (``airflow.models.trigger.Trigger.submit_event``); the payload is
:meth:`PeriodEvent.extra() <airflow_streaming.completeness.PeriodEvent.extra>` plus ``stream`` and
``version`` (``identity``, the period's ``<start>/<end>``, comes from the checkpoint: the same period has
the same identity on every triggerer, after any restart, upgrade or rollback). A period is emitted only
once a committed batch proves it (:mod:`airflow_streaming.completeness`): never for an uncommitted one.

The cursor (``<control_dir>/completeness/<rule digest>.json``) is the last period emitted. Order of one
emission: yield the event; wait ``persist_delay`` seconds; write the cursor. The yield only hands the event
to the triggerer's outbound queue: Airflow stores it in its database at the triggerer's next state sync
(about a second), with no confirmation to the trigger; the wait lets that happen before the cursor says
"emitted". So across a triggerer crash or restart (or this trigger moving to another triggerer):

- stopped after the yield and before the cursor write (the ``persist_delay`` window): the period is
  emitted again after the restart: **one possible duplicate**, with the same ``identity`` in its payload
  (a downstream task that keys its output by ``identity`` is idempotent);
- stopped after the cursor write: nothing is repeated. The event is lost only if Airflow had not stored it
  within ``persist_delay`` (a supervisor stuck longer than that): raise ``persist_delay`` on a slow
  metadata database.

Errors never become events (every event of a watcher is an Asset event: a DAG run): an unreadable status
or checkpoint is logged and looked at again at the next poll; a cursor that is garbage (or another rule's)
is logged as an error naming the file and the trigger **emits nothing** until it is fixed or deleted (it
cannot know which periods the garbage hid, and emitting from the checkpoint's oldest period could repeat
every one of them). A cursor that cannot be written is retried at every poll; until then the trigger goes
on from its in-memory position (a restart in between repeats the unsaved periods).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_streaming.completeness import CompletenessRule, PeriodEvent, PeriodKey, parse_rule
from airflow_streaming.control.contract import ControlFileError
from airflow_streaming.triggers import poll_rounds

__all__ = ["SparkStreamCompletenessTrigger"]

#: Seconds between the yield of an event and the write of the cursor (see the module's note).
PERSIST_DELAY = 2.0


def _canonical(value: Any) -> Any:
    """``value`` as JSON with sorted keys, back to Python: the same kwargs give the same serialized trigger
    (and so the same ``BaseEventTrigger.hash``) whatever order a DAG file built its dicts in."""
    return json.loads(json.dumps(value, sort_keys=True))


def _load_cursor(spec: dict[str, Any], rule: CompletenessRule) -> PeriodKey | None:
    from airflow_streaming.hooks.completeness import cursor_path, read_cursor
    from airflow_streaming.spec_hooks import hook_for

    hook = hook_for(spec)
    return read_cursor(hook.storage, cursor_path(hook.paths, rule), rule)


def _save_cursor(spec: dict[str, Any], rule: CompletenessRule, event: PeriodEvent) -> None:
    from airflow_streaming.hooks.completeness import cursor_path, write_cursor
    from airflow_streaming.spec_hooks import hook_for

    hook = hook_for(spec)
    write_cursor(hook.storage, cursor_path(hook.paths, rule), rule, event)


def _look(spec: dict[str, Any], rule: CompletenessRule, after: PeriodKey | None,
          seen: tuple[str, int | None] | None, memory: dict[Any, Any] | None = None) -> Any:
    from airflow_streaming.hooks.completeness import look
    from airflow_streaming.spec_hooks import hook_for

    return look(hook_for(spec), rule, after, seen, memory)


class SparkStreamCompletenessTrigger(BaseEventTrigger):
    """Emit an event per period of ``rule`` complete in the sink of the stream ``spec`` (see the module).

    :param spec: the stream spec as a dict (JSON-safe), as the other triggers take it.
    :param rule: the completeness rule (:func:`airflow_streaming.completeness.parse_rule`):
        ``{"period": "hourly" | "daily" | "every:<N>m" | "batches:<N>", "origin": ..., "max_events": ...}``;
        a bad rule raises ``SpecError`` when the trigger is built (at DAG parse time).
    :param poll_interval: seconds between polls (on the grid of the stream's name,
        :func:`~airflow_streaming.triggers.poll_rounds.next_delay`: its health watch polls in the same round).
    :param persist_delay: seconds between an event's yield and its cursor write.
    """

    def __init__(self, spec: dict[str, Any], rule: dict[str, Any], poll_interval: float = 10.0,
                 persist_delay: float = PERSIST_DELAY) -> None:
        super().__init__()
        self.parsed_rule = parse_rule(rule)
        #: What :meth:`serialize` returns, in its canonical form.
        self.trigger_kwargs: dict[str, Any] = _canonical({
            "spec": spec, "rule": self.parsed_rule.to_dict(), "poll_interval": float(poll_interval),
            "persist_delay": float(persist_delay)})
        self.spec: dict[str, Any] = self.trigger_kwargs["spec"]
        self.poll_interval, self.persist_delay = self.trigger_kwargs["poll_interval"], self.trigger_kwargs["persist_delay"]

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{__name__}.SparkStreamCompletenessTrigger", dict(self.trigger_kwargs)

    @property
    def stream(self) -> str:
        return str(self.spec.get("name"))

    def _note(self, last: list[str | None], level: str, message: str) -> None:
        """Log ``message`` once while it stays the same (a poll every few seconds must not flood the log)."""
        if last[0] != message:
            getattr(self.log, level)("%s", message)
            last[0] = message

    async def run(self) -> AsyncIterator[TriggerEvent]:
        rule = self.parsed_rule
        after: PeriodKey | None = None
        loaded = False
        unsaved: PeriodEvent | None = None
        seen: tuple[str, int | None] | None = None
        last: list[str | None] = [None]
        memory: dict[Any, Any] = {}  # progress reports seen, across driver runs (the status keeps the current run's)
        waited: set[str] = set()  # periods held back one poll for their last batch's report
        while True:
            try:
                if not loaded:
                    after = await poll_rounds.call(_load_cursor, self.spec, rule)
                    loaded = True
                if unsaved is not None:
                    await poll_rounds.call(_save_cursor, self.spec, rule, unsaved)
                    unsaved = None
                found = await poll_rounds.call(_look, self.spec, rule, after, seen, memory, group=self.stream)
            except ControlFileError as exc:
                self._note(last, "error", f"stream {self.stream}: completeness ({rule.period}) emits nothing: {exc}")
                await poll_rounds.sleep_aligned(self.stream, self.poll_interval)
                continue
            except Exception as exc:  # noqa: BLE001 - a watch never dies of a read; look again
                self._note(last, "warning", f"stream {self.stream}: completeness ({rule.period}) could not look "
                                            f"(will look again): {type(exc).__name__}: {exc}")
                await poll_rounds.sleep_aligned(self.stream, self.poll_interval)
                continue
            if not found.unchanged:
                self._note(last, "info", f"stream {self.stream}: completeness ({rule.period}) after "
                                         f"{after}: {len(found.events)} closed period(s) up to commit "
                                         f"{found.newest_commit} of {found.checkpoint}"
                                         + (f"; left out: {found.skipped}" if found.skipped else ""))
            held = False
            for event in found.events:
                if event.input_rows is None and event.batch_id == found.newest_commit and event.identity not in waited:
                    # The commit is seen; the driver's report of that batch may reach the status a moment later.
                    waited.add(event.identity)
                    held = True
                    break
                payload = {**event.extra(), "stream": self.stream, "version": found.version,
                           "identity": event.identity}
                yield TriggerEvent(payload)
                await asyncio.sleep(self.persist_delay)
                after = event.key
                try:
                    await poll_rounds.call(_save_cursor, self.spec, rule, event)
                    unsaved = None
                except Exception as exc:  # noqa: BLE001 - keep the position in memory, write it at the next poll
                    unsaved = event
                    self._note(last, "error", f"stream {self.stream}: completeness cursor not written (retried at "
                                              f"the next poll; a restart before then repeats {event.identity}): "
                                              f"{type(exc).__name__}: {exc}")
            # Capped at max_events: look again at once from the new cursor, whatever the commits.
            seen = None if held or len(found.events) >= rule.max_events else (found.checkpoint, found.newest_commit)
            await poll_rounds.sleep_aligned(self.stream, self.poll_interval)
