"""Triggerer-side polling of a stream's health (no worker slot held while watching)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_streaming.deprecated_names import module_getattr
from airflow_streaming.triggers import poll_rounds

#: Sensor modes.
WAIT_HEALTHY, WATCH, REPORT = "wait_healthy", "watch", "report"
MODES = (WAIT_HEALTHY, WATCH, REPORT)


def poll_verdict(spec_dict: dict[str, Any], details: bool = True) -> Any:
    """One :class:`~airflow_streaming.health.verdict.HealthVerdict` for a spec (blocking file I/O: run it in a
    thread from async code); ``details=False``: its state and reasons only, without warnings and metrics
    (:func:`~airflow_streaming.health.verdict.evaluate`). The spec's hook is reused across polls
    (:func:`~airflow_streaming.spec_hooks.hook_for`)."""
    from airflow_streaming.spec_hooks import hook_for

    return hook_for(spec_dict).health(details=details)


def poll_once(spec_dict: dict[str, Any]) -> dict[str, Any]:
    """:func:`poll_verdict` as plain data (``HealthVerdict.to_dict``)."""
    return poll_verdict(spec_dict).to_dict()


def event_status(mode: str, state: str, started: float, now: float, watch_seconds: float,
                 fail_on: tuple[str, ...]) -> str | None:
    """The health sensor's event status for a verdict's ``state`` (its mode's condition met): ``report``,
    ``healthy``, ``unhealthy`` or ``watched``; ``None`` to keep polling. Pure."""
    if mode == REPORT:
        return "report"
    if mode == WAIT_HEALTHY:
        if state in ("HEALTHY", "IDLE"):
            return "healthy"
        if state in ("FAILED", "STOPPED"):
            return "unhealthy"
        return None
    if state in fail_on:
        return "unhealthy"
    if now - started >= watch_seconds:
        return "watched"
    return None


def health_event(mode: str, verdict: dict[str, Any], started: float, now: float, watch_seconds: float,
                 fail_on: tuple[str, ...]) -> dict[str, Any] | None:
    """The health sensor's event for this verdict (:func:`event_status`), or ``None`` to keep polling. Pure."""
    status = event_status(mode, verdict["state"], started, now, watch_seconds, fail_on)
    return None if status is None else {"status": status, "verdict": verdict}


class SparkStreamHealthTrigger(BaseTrigger):
    """Poll a stream's status document until the sensor's condition is met.

    :param spec: the stream spec as a dict (JSON-safe).
    :param mode: ``wait_healthy`` | ``watch`` | ``report``.
    :param poll_interval: seconds between polls (on the grid of the stream's name,
        :func:`~airflow_streaming.triggers.poll_rounds.next_delay`: its other watches poll in the same round).
    :param watch_seconds: ``watch`` mode: how long to watch.
    :param fail_on: ``watch`` mode: states that end the watch as unhealthy.
    """

    def __init__(self, spec: dict[str, Any], mode: str, poll_interval: float, watch_seconds: float = 0.0,
                 fail_on: tuple[str, ...] | list[str] = ("FALLING_BEHIND", "STALLED", "FAILED", "STOPPED"),
                 started: float | None = None) -> None:
        super().__init__()
        self.spec = spec
        self.mode = mode
        self.poll_interval = poll_interval
        self.watch_seconds = watch_seconds
        self.fail_on = tuple(fail_on)
        self.started = time.time() if started is None else started

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_streaming.triggers.health.SparkStreamHealthTrigger",
            {"spec": self.spec, "mode": self.mode, "poll_interval": self.poll_interval,
             "watch_seconds": self.watch_seconds, "fail_on": list(self.fail_on), "started": self.started},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        name = str(self.spec.get("name"))
        last_state = None
        while True:
            # A watch polls a thousand streams every few seconds and fires rarely: it polls for the state only
            # (no warnings, no metrics), and when that state meets its condition, polls the whole verdict -
            # what the event carries - and decides again on it (the state may have moved in between).
            status, found = None, None
            try:
                for details in (False, True):
                    found = await poll_rounds.call(poll_verdict, self.spec, details, group=name)
                    state = found.state.value
                    if state != last_state:
                        self.log.info("stream %s: %s", name, state)
                        last_state = state
                    status = event_status(self.mode, state, self.started, time.time(), self.watch_seconds,
                                          self.fail_on)
                    if status is None:
                        break
            except Exception as exc:  # noqa: BLE001 - report, do not kill the triggerer
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            if status is not None:
                yield TriggerEvent({"status": status, "verdict": found.to_dict()})
                return
            await poll_rounds.sleep_aligned(name, self.poll_interval)


__getattr__ = module_getattr(__name__, 'StreamingHealthTrigger')  # the old name, deprecated
