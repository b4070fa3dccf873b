"""SparkStreamHealthSensor's Airflow idioms: Airflow's ``mode`` is Airflow's, deferrable by configuration,
one verdict before deferring, a deferral timeout; on real control files (no JVM)."""

from __future__ import annotations

import time
import warnings
from datetime import datetime, timedelta, timezone

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException, TaskDeferred

from airflow_streaming.exceptions import StreamFailedError
from airflow_streaming.sensors.health import SparkStreamHealthSensor
from airflow_streaming.triggers.health import SparkStreamHealthTrigger
from airflow_streaming.task_failures import original_error
from control_fixtures import deployed_stream, spec_under


def test_mode_is_airflows_sensor_mode_and_the_health_mode_has_its_own_argument(tmp_path):
    sensor = SparkStreamHealthSensor(task_id="h", spec=spec_under(tmp_path).to_dict(), mode="reschedule",
                                   health_mode="watch", watch_seconds=60)
    assert sensor.mode == "reschedule" and sensor.reschedule
    assert sensor.health_mode == "watch"
    assert SparkStreamHealthSensor(task_id="d", spec={}).health_mode == "wait_healthy"


def test_the_old_spelling_still_works_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="use health_mode='watch'"):
        sensor = SparkStreamHealthSensor(task_id="old", spec={}, mode="watch", watch_seconds=60)
    assert sensor.health_mode == "watch" and sensor.mode == "poke"


@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "watch", "health_mode": "report"}, "health mode is health_mode="),
    ({"health_mode": "reschedule"}, "health_mode: must be one of wait_healthy, watch, report"),
    ({"health_mode": "watch", "watch_seconds": 600, "timeout": 300}, "longer than the sensor's timeout"),
])
def test_confusing_arguments_are_refused(kwargs, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValueError, match=message):
            SparkStreamHealthSensor(task_id="bad", spec={}, **kwargs)


def test_an_unknown_airflow_mode_is_refused_by_airflow():
    from airflow.providers.common.compat.sdk import AirflowException

    # Airflow 3.1 raises AirflowException here, 3.2+ ValueError.
    with pytest.raises((ValueError, AirflowException), match="The mode must be one of"):
        SparkStreamHealthSensor(task_id="bad", spec={}, mode="poll")


def test_deferrable_follows_operators_default_deferrable(monkeypatch):
    monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", raising=False)
    assert SparkStreamHealthSensor(task_id="a", spec={}).deferrable is False
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert SparkStreamHealthSensor(task_id="b", spec={}).deferrable is True
    assert SparkStreamHealthSensor(task_id="c", spec={}, deferrable=False).deferrable is False


def test_poke_interval_default_comes_from_the_providers_config(monkeypatch):
    monkeypatch.delenv("AIRFLOW__AIRFLOW_STREAMING__HEALTH_POLL_INTERVAL", raising=False)
    assert SparkStreamHealthSensor(task_id="a", spec={}).poke_interval == 10
    monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__HEALTH_POLL_INTERVAL", "3.5")
    assert SparkStreamHealthSensor(task_id="b", spec={}).poke_interval == 3.5
    assert SparkStreamHealthSensor(task_id="c", spec={}, poke_interval=7).poke_interval == 7


def test_undecided_first_verdict_defers_with_the_sensors_timeout(tmp_path):
    spec = spec_under(tmp_path)  # never ran: no status document -> UNKNOWN, which does not decide
    sensor = SparkStreamHealthSensor(task_id="h", spec=spec.to_dict(), deferrable=True, poke_interval=4,
                                   timeout=900)
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, SparkStreamHealthTrigger)
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == timedelta(seconds=900)
    _, kwargs = trigger.serialize()
    assert kwargs["mode"] == "wait_healthy" and kwargs["poll_interval"] == 4.0
    assert kwargs["spec"]["name"] == spec.name
    assert before <= kwargs["started"] <= time.time()


def test_a_stopped_stream_fails_at_the_first_verdict_without_deferring_or_retrying(tmp_path):
    spec, _ = deployed_stream(tmp_path)  # its last run STOPPED
    sensor = SparkStreamHealthSensor(task_id="h", spec=spec.to_dict(), deferrable=True, retries=3)
    with pytest.raises(AirflowFailException, match="stream s1 is STOPPED") as failed:
        sensor.execute({})
    assert isinstance(original_error(failed.value), StreamFailedError)


def test_report_returns_the_first_verdict_without_deferring(tmp_path):
    spec, _ = deployed_stream(tmp_path)
    sensor = SparkStreamHealthSensor(task_id="h", spec=spec.to_dict(), health_mode="report", deferrable=True)
    verdict = sensor.execute({})
    assert verdict["stream"] == "s1" and verdict["state"] == "STOPPED"


class _RescheduledTI:
    """The one method a rescheduled sensor asks of its task instance."""

    def __init__(self, first: datetime | None):
        self.first = first

    def get_first_reschedule_date(self, context: object) -> datetime | None:
        return self.first


def test_a_rescheduled_watch_measures_its_window_from_the_first_reschedule(tmp_path):
    spec = spec_under(tmp_path)
    sensor = SparkStreamHealthSensor(task_id="w", spec=spec.to_dict(), mode="reschedule", health_mode="watch",
                                   watch_seconds=300)
    first_poke_now = sensor.poke({"ti": _RescheduledTI(None)})
    assert not first_poke_now.is_done
    window_over = sensor.poke({"ti": _RescheduledTI(datetime.now(timezone.utc) - timedelta(seconds=400))})
    assert window_over.is_done and window_over.xcom_value["state"] == "UNKNOWN"


def test_a_trigger_that_could_not_poll_is_retryable(tmp_path):
    sensor = SparkStreamHealthSensor(task_id="h", spec=spec_under(tmp_path).to_dict())
    with pytest.raises(RuntimeError, match="health watch failed: StorageError") as raised:
        sensor.execute_complete({}, {"status": "error", "message": "StorageError: cannot read status.json"})
    assert not isinstance(raised.value, AirflowFailException)
