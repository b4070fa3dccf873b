"""The progress sensor and the compatibility check can defer (issue 34): nothing waits in a worker slot.

On real control files: the progress sensor (no JVM) looks once in the worker, defers to
:class:`SparkStreamProgressTrigger` (the same check), whose ``run`` is driven here against files written as a
driver writes them; the compatibility check starts its detached child (a real process) and defers to the
lifecycle trigger's ``file`` wait, whose event ``execute_complete`` judges (``spark``: the check's child
starts a local Spark session).
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException, TaskDeferred

from airflow_streaming.control import contract
from airflow_streaming.exceptions import StreamFailedError, StreamingError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.operators.compat import SparkStreamCompatibilityCheckOperator
from airflow_streaming.sensors.progress import SparkStreamProgressSensor
from airflow_streaming.task_failures import original_error
from airflow_streaming.triggers.lifecycle import SparkStreamLifecycleTrigger
from airflow_streaming.triggers.progress import SparkStreamProgressTrigger
from control_fixtures import spec_under

RUN = "20261127T000000Z-0000prog"


def _running(hook: SparkStreamHook, state: str = contract.RUNNING, batches: int = 0, rows: int = 0) -> None:
    """driver.json and status.json of a run whose driver runs on another host (alive as far as this one can
    tell), as a driver writes them."""
    storage = hook.storage.unguarded
    record = contract.DriverRecord(run_id=RUN, stream=hook.spec.name, version="v1", application="device_signals",
                                   host="elsewhere", command="spark-submit ...", log_path="/dev/null",
                                   submitted_at=1.0, checkpoint_location=hook.spec.checkpoint_location)
    storage.write_atomic(hook.paths.driver, record.to_json())
    doc = contract.StatusDocument(stream=hook.spec.name, version="v1", run_id=RUN, state=state, pid=1,
                                  host="elsewhere", started_at=1.0, heartbeat_at=2.0, ready=True,
                                  totals={"batches": batches, "input_rows": rows, "quarantined_rows": 0},
                                  last_exception={"error_class": "BOOM", "message": "it broke"}
                                  if state == contract.FAILED else None)
    contract.write_status(storage, hook.paths, doc)


def _first_event(trigger, timeout: float = 20.0) -> dict:
    async def first():
        async for event in trigger.run():
            return event.payload
    return asyncio.run(asyncio.wait_for(first(), timeout))


def test_the_progress_sensor_defers_and_its_trigger_fires_on_the_progress(tmp_path):
    spec = spec_under(tmp_path)
    sensor = SparkStreamProgressSensor(task_id="p", spec=spec.to_dict(), min_batches=2, min_input_rows=5,
                                       deferrable=True, poke_interval="1s", timeout="10 minutes")
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})  # no run yet: one look, then the triggerer
    trigger = deferred.value.trigger
    assert isinstance(trigger, SparkStreamProgressTrigger)
    assert deferred.value.timeout == timedelta(minutes=10) and deferred.value.method_name == "execute_complete"
    classpath, kwargs = trigger.serialize()
    assert SparkStreamProgressTrigger(**kwargs).serialize() == (classpath, kwargs)

    hook = SparkStreamHook(spec)
    _running(hook, batches=2, rows=4)  # two batches but not yet the rows: not done
    with pytest.raises(asyncio.TimeoutError):
        _first_event(SparkStreamProgressTrigger(**kwargs), timeout=3.0)
    _running(hook, batches=3, rows=7)
    event = _first_event(SparkStreamProgressTrigger(**kwargs))
    assert event["status"] == "done" and event["xcom"]["batches"] == 3 and event["xcom"]["input_rows"] == 7
    assert sensor.execute_complete({}, event)["input_rows"] == 7


def test_a_progress_sensor_that_already_sees_the_progress_does_not_defer(tmp_path):
    spec = spec_under(tmp_path)
    _running(SparkStreamHook(spec), batches=1, rows=1)
    sensor = SparkStreamProgressSensor(task_id="p", spec=spec.to_dict(), deferrable=True)
    assert sensor.execute({})["batches"] == 1


def test_a_failed_run_ends_the_deferred_progress_sensor_without_retries(tmp_path):
    spec = spec_under(tmp_path)
    sensor = SparkStreamProgressSensor(task_id="p", spec=spec.to_dict(), deferrable=True, retries=3)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    _running(SparkStreamHook(spec), state=contract.FAILED)
    event = _first_event(deferred.value.trigger)
    assert event["status"] == "failed" and "BOOM" in event["message"]
    with pytest.raises(AirflowFailException, match="it broke") as failed:
        sensor.execute_complete({}, event)
    assert isinstance(original_error(failed.value), StreamFailedError)


def test_the_progress_sensor_still_pokes_when_not_deferrable(tmp_path):
    spec = spec_under(tmp_path)
    sensor = SparkStreamProgressSensor(task_id="p", spec=spec.to_dict(), min_batches=2)
    assert sensor.poke({}).is_done is False
    _running(SparkStreamHook(spec), batches=2)
    poked = sensor.poke({})
    assert poked.is_done is True and poked.xcom_value["batches"] == 2


@pytest.mark.spark
def test_the_compatibility_check_defers_to_the_report_of_its_detached_check(tmp_path):
    """A candidate whose checkpoint does not exist: the detached check (a real child process, with its local
    Spark session) answers that it could not run; the deferred task gets it from the trigger's file wait and fails it as retryable."""
    spec = spec_under(tmp_path)
    op = SparkStreamCompatibilityCheckOperator(task_id="gate", spec=spec.to_dict(), deferrable=True,
                                               dry_run=False, poll_interval="1s", check_timeout="2 minutes")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, SparkStreamLifecycleTrigger) and trigger.wait["kind"] == "file"
    token = deferred.value.kwargs["token"]
    event = _first_event(trigger, timeout=120.0)
    assert event["status"] == "over"
    hook = SparkStreamHook(spec)
    answer = json.loads(hook.storage.read_bytes(f"{hook.paths.root}/compat-check-report.json") or b"{}")
    assert answer.get("id") == token and "error" in answer
    with pytest.raises(StreamingError, match="could not run"):
        op.execute_complete({}, event, token=token)
    with pytest.raises(StreamingError, match="no report within 120s"):  # another check's answer is not this one's
        op.execute_complete({}, event, token="check-someone-else")
