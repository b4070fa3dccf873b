"""A stop action's last line says what it did (issue 34): "stopped gracefully at batch N" after it stopped
a running stream at a batch boundary - not "not running" - and "not running" only when none ran."""

from __future__ import annotations

import pytest

from airflow_streaming.lifecycle.record import Action, LifecycleRecord, Step
from airflow_streaming.lifecycle.stop_steps import GRACEFUL, KILLED, NOT_RUNNING, StopSteps, how_stopped

SPEC = {"name": "s1", "version": "v1", "application": "events_etl"}


class _Steps(StopSteps):
    """The runner's STOPPED step, with the runner's ``_advance`` (the record's own transition)."""

    def _advance(self, record: LifecycleRecord, step: Step, detail: str) -> None:
        record.advance(step, detail)


def _stopped_stop(how: str, *, run_id: str | None = "run-1", killing: bool = False) -> LifecycleRecord:
    """A stop action at STOPPED, recorded as :meth:`StopSteps._stopping` records it."""
    record = LifecycleRecord(stream="s1", action=Action.STOP, from_spec=SPEC, to_spec=SPEC, stopping_run_id=run_id)
    record.advance(Step.STOPPING, "graceful stop requested")
    if killing:
        record.steps.append({"step": "KILLING", "at": 1.0, "detail": "run run-1 did not stop within 120s"})
    record.stop_batch = 7
    record.advance(Step.STOPPED, f"stopped at batch 7 ({how}, checkpoint clean)")
    return record


@pytest.mark.parametrize(("how", "run_id", "killing", "last"), [
    (GRACEFUL, "run-1", False, "stopped gracefully at batch 7"),
    (KILLED, "run-1", True, "stopped by a kill after the stop timeout; last committed batch 7"),
    (NOT_RUNNING, None, False, "not running; last committed batch 7"),
])
def test_the_last_step_says_how_the_stream_stopped(how, run_id, killing, last):
    record = _stopped_stop(how, run_id=run_id, killing=killing)
    assert how_stopped(record) == how
    _Steps()._stopped(record)
    assert record.step == Step.SUCCEEDED and record.steps[-1]["detail"] == last


def test_a_graceful_stop_never_reads_not_running():
    """The defect: a running stream stopped gracefully ended "SUCCEEDED (not running; ...)"."""
    record = _stopped_stop(GRACEFUL)
    _Steps()._stopped(record)
    assert "not running" not in record.steps[-1]["detail"]


def test_a_kill_is_told_even_if_the_stopped_detail_says_otherwise():
    """The KILLING step is written before the kill: it decides, also for a task that resumed at STOPPED."""
    assert how_stopped(_stopped_stop(GRACEFUL, killing=True)) == KILLED
