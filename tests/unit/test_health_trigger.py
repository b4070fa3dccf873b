"""The health watch's trigger (:class:`~airflow_streaming.triggers.health.SparkStreamHealthTrigger`): it polls a
stream's state only (no warnings, no metrics: ``details=False``) and, when that state meets its condition, polls the
whole verdict and decides again on it - the event carries that whole verdict, and a state that moved on between the
two polls fires nothing. On real control files (no JVM), and with scripted verdicts for the race between the polls."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from airflow_streaming.health.verdict import HealthState, HealthVerdict, Reason
from airflow_streaming.triggers import health as health_module
from airflow_streaming.triggers.health import SparkStreamHealthTrigger
from control_fixtures import deployed_stream


def events_of(trigger: SparkStreamHealthTrigger, timeout: float = 30.0) -> list[dict[str, Any]]:
    async def drain() -> list[dict[str, Any]]:
        return [event.payload async for event in trigger.run()]

    return asyncio.run(asyncio.wait_for(drain(), timeout))


def counting_polls(monkeypatch, answers: list[HealthVerdict] | None = None) -> list[bool]:
    """Record the ``details`` of each poll; answer with ``answers`` in turn (the real poll when none)."""
    seen: list[bool] = []
    real = health_module.poll_verdict

    def poll(spec_dict: dict[str, Any], details: bool = True) -> Any:
        seen.append(details)
        return answers.pop(0) if answers is not None else real(spec_dict, details)

    monkeypatch.setattr(health_module, "poll_verdict", poll)
    return seen


def verdict(state: HealthState, **metrics: Any) -> HealthVerdict:
    return HealthVerdict("s1", state, (Reason(state.value, state.value.lower()),), metrics=metrics, at=time.time())


def test_the_event_carries_the_whole_verdict_of_a_real_stream(tmp_path, monkeypatch) -> None:
    spec, hook = deployed_stream(tmp_path)  # stopped gracefully: a watch that fails on STOPPED fires at once
    polls = counting_polls(monkeypatch)
    [event] = events_of(SparkStreamHealthTrigger(spec.to_dict(), "watch", 0.2, watch_seconds=3600))
    assert polls == [False, True]  # the state, then the whole verdict
    assert event["status"] == "unhealthy" and event["verdict"]["state"] == "STOPPED"
    # The whole verdict: its metrics are there (a state-only one has none), and it is what the hook says.
    whole = hook.health().to_dict()
    assert event["verdict"]["metrics"]["trigger_interval_s"] == whole["metrics"]["trigger_interval_s"]
    assert "heartbeat_age_s" in event["verdict"]["metrics"]
    assert event["verdict"]["reasons"] == whole["reasons"]
    json.dumps(event)  # an event's payload goes to the database


def test_a_state_only_poll_has_no_warnings_or_metrics_and_the_same_state(tmp_path) -> None:
    spec, hook = deployed_stream(tmp_path)
    brief, whole = health_module.poll_verdict(spec.to_dict(), False), health_module.poll_verdict(spec.to_dict())
    assert (brief.state, brief.reasons) == (whole.state, whole.reasons)
    assert brief.metrics == {} and brief.warnings == () and whole.metrics


def test_a_state_that_moved_on_between_the_two_polls_fires_nothing(monkeypatch) -> None:
    answers = [verdict(HealthState.FAILED),  # the state-only poll says FAILED ...
               verdict(HealthState.HEALTHY, batches=3),  # ... the whole verdict, read next, says HEALTHY: no event
               verdict(HealthState.HEALTHY),
               verdict(HealthState.STALLED),  # this time the whole verdict agrees: the event carries it
               verdict(HealthState.STALLED, seconds_since_last_batch=99)]
    polls = counting_polls(monkeypatch, answers)
    [event] = events_of(SparkStreamHealthTrigger({"name": "s1"}, "watch", 0.05, watch_seconds=3600))
    assert polls == [False, True, False, False, True] and not answers
    assert event["status"] == "unhealthy" and event["verdict"]["state"] == "STALLED"
    assert event["verdict"]["metrics"] == {"seconds_since_last_batch": 99}


def test_wait_healthy_and_report_fire_on_the_whole_verdict_too(monkeypatch) -> None:
    for mode, first in (("wait_healthy", HealthState.IDLE), ("report", HealthState.UNKNOWN)):
        answers = [verdict(first), verdict(first, heartbeat_age_s=1.5)]
        polls = counting_polls(monkeypatch, answers)
        [event] = events_of(SparkStreamHealthTrigger({"name": "s1"}, mode, 0.05))
        assert polls == [False, True]
        assert event["verdict"]["metrics"] == {"heartbeat_age_s": 1.5}, mode


def test_a_poll_that_raises_ends_the_watch_with_an_error_event(monkeypatch) -> None:
    def broken(spec_dict: dict[str, Any], details: bool = True) -> Any:
        if details:
            raise OSError("storage gone")
        return verdict(HealthState.FAILED)

    monkeypatch.setattr(health_module, "poll_verdict", broken)
    [event] = events_of(SparkStreamHealthTrigger({"name": "s1"}, "watch", 0.05, watch_seconds=3600))
    assert event == {"status": "error", "message": "OSError: storage gone"}
