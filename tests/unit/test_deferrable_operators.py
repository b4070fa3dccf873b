"""The deferrable glue of the lifecycle operators (deploy, stop, upgrade, operation), without Spark.

The lifecycle functions are replaced by fakes that raise ``WaitNeeded`` as a deferrable runner does;
the tests check what Airflow gets: ``TaskDeferred`` with the lifecycle trigger and ``execute_complete``,
the resume with the trigger's holders, and the unchanged blocking path when not deferrable.
"""

from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException, TaskDeferred

from airflow_streaming.lifecycle import operations
from airflow_streaming.lifecycle.operations import LifecycleOutcomeError
from airflow_streaming.lifecycle.waits import Wait, WaitNeeded
from airflow_streaming.operators.deferral import DEFERRAL_MARGIN_S
from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.operators.lifecycle import SparkStreamOperationOperator, SparkStreamUpgradeOperator
from airflow_streaming.operators.stop import SparkStreamStopOperator
from airflow_streaming.triggers.lifecycle import SparkStreamLifecycleTrigger
from control_fixtures import spec_under

HOLDERS = {"/ctl/s": "holder-1"}


def context() -> dict[str, Any]:
    return {"ti": SimpleNamespace(dag_id="d", task_id="t", run_id="manual__1", try_number=1)}


def wait_needed(spec, kind: str = "ready", in_s: float = 300.0) -> WaitNeeded:
    return WaitNeeded(Wait(kind=kind, spec=spec.to_dict(), run_id="run-1", deadline=time.time() + in_s), HOLDERS)


class FakeLifecycle:
    """Stands in for deploy_stream / stop_stream / operate: waits once (``waits`` times), then returns."""

    def __init__(self, spec, result: dict[str, Any], waits: int = 1, kind: str = "ready"):
        self.spec, self.result, self.waits, self.kind = spec, result, waits, kind
        self.calls: list[dict[str, Any]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        options = kwargs.get("options") or next((a for a in args if hasattr(a, "defer")), None)
        defer = kwargs.get("defer", getattr(options, "defer", None))
        resume = kwargs.get("resume", args[2] if len(args) > 2 and isinstance(args[2], dict) else None)
        self.calls.append({"defer": defer, "resume": resume, "options": options, "args": args, "kwargs": kwargs})
        if defer and len(self.calls) <= self.waits:
            raise wait_needed(self.spec, self.kind)
        return dict(self.result)


def test_deploy_defers_to_the_lifecycle_trigger_and_resumes_with_the_holders(tmp_path, monkeypatch):
    spec = spec_under(tmp_path)
    fake = FakeLifecycle(spec, {"stream": spec.name, "run_id": "run-1"})
    monkeypatch.setattr(operations, "deploy_stream", fake)
    op = SparkStreamDeployOperator(task_id="deploy", spec=spec.to_dict(), deferrable=True, poll_interval=3)

    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, SparkStreamLifecycleTrigger) and deferred.value.method_name == "execute_complete"
    assert trigger.holders == HOLDERS and trigger.poll_interval == 3 and trigger.wait["kind"] == "ready"
    assert trigger.wait["spec"]["name"] == spec.name
    # The deferral may last the wait's own deadline plus a margin, no less.
    assert timedelta(seconds=300 + DEFERRAL_MARGIN_S - 5) < deferred.value.timeout <= timedelta(
        seconds=300 + DEFERRAL_MARGIN_S)
    assert fake.calls[0]["defer"] is True and fake.calls[0]["resume"] is None
    assert fake.calls[0]["options"].owner == "d.t run manual__1 try 1"
    # The trigger serializes to what the triggerer re-creates (a triggerer restart loses nothing).
    path, kwargs = trigger.serialize()
    assert path == "airflow_streaming.triggers.lifecycle.SparkStreamLifecycleTrigger"
    assert SparkStreamLifecycleTrigger(**kwargs).serialize() == (path, kwargs)

    identity = op.execute_complete(context(), {"status": "over", "kind": "ready", "holders": HOLDERS})
    assert identity["run_id"] == "run-1" and fake.calls[1]["resume"] == HOLDERS and fake.calls[1]["defer"] is True


def test_not_deferrable_runs_the_action_once_in_the_worker_as_before(tmp_path, monkeypatch):
    spec = spec_under(tmp_path)
    fake = FakeLifecycle(spec, {"stream": spec.name, "run_id": "run-1"})
    monkeypatch.setattr(operations, "deploy_stream", fake)
    op = SparkStreamDeployOperator(task_id="deploy", spec=spec.to_dict(), deferrable=False)
    assert op.execute(context())["run_id"] == "run-1"
    assert len(fake.calls) == 1 and fake.calls[0]["defer"] is False and fake.calls[0]["resume"] is None


def test_a_second_wait_after_resuming_defers_again(tmp_path, monkeypatch):
    spec = spec_under(tmp_path)
    fake = FakeLifecycle(spec, {"stream": spec.name, "graceful": True, "was_running": True}, waits=2, kind="gone")
    monkeypatch.setattr(operations, "stop_stream", fake)
    op = SparkStreamStopOperator(task_id="stop", spec=spec.to_dict(), deferrable=True, fail_if_not_graceful=True)
    with pytest.raises(TaskDeferred):
        op.execute(context())
    with pytest.raises(TaskDeferred) as again:
        op.execute_complete(context(), {"status": "over", "holders": HOLDERS})
    assert again.value.trigger.wait["kind"] == "gone" and fake.calls[1]["resume"] == HOLDERS
    assert op.execute_complete(context(), {"status": "over", "holders": HOLDERS})["graceful"] is True
    assert [c["resume"] for c in fake.calls] == [None, HOLDERS, HOLDERS]


def test_a_lost_lock_fails_the_task_without_touching_the_stream(tmp_path, monkeypatch):
    spec = spec_under(tmp_path)
    fake = FakeLifecycle(spec, {})
    monkeypatch.setattr(operations, "stop_stream", fake)
    op = SparkStreamStopOperator(task_id="stop", spec=spec.to_dict(), deferrable=True)
    with pytest.raises(AirflowFailException, match="taken over"):
        op.execute_complete(context(), {"status": "lock_lost", "holders": HOLDERS,
                                        "message": "the lifecycle lock of /ctl/s was taken over"})
    assert fake.calls == []


def test_a_permanent_failure_after_resuming_fails_without_retries(tmp_path, monkeypatch):
    spec = spec_under(tmp_path)

    def refused(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise LifecycleOutcomeError({"action": "stop", "stream": spec.name, "to_version": "v1",
                                     "outcome": "FAILED", "error": "boom"})

    monkeypatch.setattr(operations, "stop_stream", refused)
    op = SparkStreamStopOperator(task_id="stop", spec=spec.to_dict(), deferrable=True)
    with pytest.raises(AirflowFailException, match="ended FAILED: boom"):
        op.execute_complete(context(), {"status": "over", "holders": HOLDERS})


def test_upgrade_defers_at_each_wait_and_hands_the_holders_to_the_runner(tmp_path, monkeypatch):
    from airflow_streaming.lifecycle import runner as runner_module

    spec = spec_under(tmp_path)
    made: list[dict[str, Any]] = []
    kinds = iter(["file", "gone", "probation"])

    class FakeRunner:
        def __init__(self, target, action, options, current=None, notify=None, resume=None):
            made.append({"target": target, "action": action.value, "defer": options.defer, "resume": resume})

        def run(self):
            kind = next(kinds, None)
            if kind is not None:
                raise wait_needed(spec, kind)
            return SimpleNamespace(step=SimpleNamespace(value="SUCCEEDED"))

    monkeypatch.setattr(runner_module, "LifecycleRunner", FakeRunner)
    monkeypatch.setattr(operations, "result_of", lambda record: {"outcome": "SUCCEEDED", "steps": ["PLANNED"]})
    op = SparkStreamUpgradeOperator(task_id="up", spec=spec.with_version("v2").to_dict(), deferrable=True,
                                    probation_window="1 minute")
    seen = []
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    seen.append(deferred.value.trigger.wait["kind"])
    for _ in range(2):
        with pytest.raises(TaskDeferred) as deferred:
            op.execute_complete(context(), {"status": "over", "holders": HOLDERS})
        seen.append(deferred.value.trigger.wait["kind"])
    assert op.execute_complete(context(), {"status": "over", "holders": HOLDERS})["outcome"] == "SUCCEEDED"
    assert seen == ["file", "gone", "probation"]
    assert [m["resume"] for m in made] == [None, HOLDERS, HOLDERS, HOLDERS]
    assert all(m["defer"] and m["action"] == "upgrade" and m["target"].version == "v2" for m in made)


def test_operation_operator_passes_defer_and_resume_to_operate(tmp_path, monkeypatch):
    spec = spec_under(tmp_path)
    fake = FakeLifecycle(spec, {"stream": spec.name, "run_id": "r"})
    monkeypatch.setattr(operations, "operate", fake)
    monkeypatch.setattr("airflow_streaming.lifecycle.desired_state.load_desired_state", lambda path: f"state:{path}")
    op = SparkStreamOperationOperator(task_id="operate", stream="s", action="deploy", version="",
                                      allow_warnings="False", desired_state="/x.yaml", deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    assert deferred.value.method_name == "execute_complete"
    result = op.execute_complete(context(), {"status": "over", "holders": HOLDERS})
    assert result["outcome"] == "DEPLOYED"
    first, second = fake.calls
    assert first["args"] == ("state:/x.yaml", "s", "deploy", None)
    assert first["kwargs"]["allow_warnings"] is False and first["kwargs"]["owner"] == "d.t run manual__1 try 1"
    assert (first["kwargs"]["defer"], first["kwargs"]["resume"]) == (True, None)
    assert (second["kwargs"]["defer"], second["kwargs"]["resume"]) == (True, HOLDERS)


def test_operation_operator_returns_the_outcome_when_asked_and_fails_otherwise(monkeypatch):
    outcome = {"action": "upgrade", "stream": "s", "to_version": "v2", "outcome": "ROLLED_BACK", "error": "probation",
               "steps": ["PLANNED", "ROLLED_BACK: probation"]}

    def rolled_back(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise LifecycleOutcomeError(outcome)

    monkeypatch.setattr(operations, "operate", rolled_back)
    monkeypatch.setattr("airflow_streaming.lifecycle.desired_state.load_desired_state", lambda path: None)
    common = {"stream": "s", "action": "upgrade", "desired_state": "/x.yaml", "deferrable": False}
    reported = SparkStreamOperationOperator(task_id="a", fail_on_outcome=False, **common).execute(context())
    assert reported["outcome"] == "ROLLED_BACK" and reported["error"] == "probation"
    with pytest.raises(AirflowFailException, match="ended ROLLED_BACK"):
        SparkStreamOperationOperator(task_id="b", **common).execute(context())

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise OSError("storage down")  # not an outcome: raised (and retryable) even with fail_on_outcome=False

    monkeypatch.setattr(operations, "operate", broken)
    with pytest.raises(OSError, match="storage down"):
        SparkStreamOperationOperator(task_id="c", fail_on_outcome=False, **common).execute(context())


@pytest.mark.parametrize("value, expected", [("True", True), ("false", False), ("", None), (None, None), (True, True)])
def test_templated_allow_warnings(value, expected, monkeypatch):
    seen = {}

    def record(*args: Any, **kwargs: Any) -> dict[str, Any]:
        seen.update(kwargs)
        return {"outcome": "UNCHANGED"}

    monkeypatch.setattr(operations, "operate", record)
    monkeypatch.setattr("airflow_streaming.lifecycle.desired_state.load_desired_state", lambda path: None)
    SparkStreamOperationOperator(task_id="o", stream="s", action="upgrade", allow_warnings=value,
                                 desired_state="/x.yaml", deferrable=False).execute(context())
    assert seen["allow_warnings"] is expected


def test_deferrable_follows_operators_default_deferrable_and_poll_interval_the_provider_option(monkeypatch):
    monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", raising=False)
    monkeypatch.delenv("AIRFLOW__AIRFLOW_STREAMING__LIFECYCLE_POLL_INTERVAL", raising=False)
    ops = lambda: [SparkStreamDeployOperator(task_id="a", spec={}), SparkStreamStopOperator(task_id="b", spec={}),  # noqa: E731
                   SparkStreamUpgradeOperator(task_id="c", spec={}),
                   SparkStreamOperationOperator(task_id="d", stream="s", desired_state="/x")]
    assert [(o.deferrable, o.poll_interval) for o in ops()] == [(False, 2.0)] * 4
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__LIFECYCLE_POLL_INTERVAL", "7")
    assert [(o.deferrable, o.poll_interval) for o in ops()] == [(True, 7.0)] * 4
    assert SparkStreamStopOperator(task_id="e", spec={}, deferrable=False).deferrable is False
    with pytest.raises(ValueError, match="poll_interval"):
        SparkStreamStopOperator(task_id="f", spec={}, poll_interval=0)


def _retry_settings(op) -> tuple[int, timedelta]:
    return op.retries, op.retry_delay


def test_a_deferrable_task_that_sets_no_retries_gets_two_and_its_own_or_its_dags_always_win(monkeypatch):
    """Airflow 3.3 fails a deferred task whose deferring process reported its exit after the task was queued
    again (apache/airflow#72716): a deferrable lifecycle task must have a retry, which resumes its action (a
    deferrable health sensor's retry watches again)."""
    from airflow_streaming.sensors.health import SparkStreamHealthSensor

    from airflow.sdk import DAG

    from airflow_streaming.defer_race import DEFERRED_RETRIES, DEFERRED_RETRY_DELAY

    classes = [lambda **kw: SparkStreamDeployOperator(spec={}, **kw), lambda **kw: SparkStreamStopOperator(spec={}, **kw),
               lambda **kw: SparkStreamUpgradeOperator(spec={}, **kw),
               lambda **kw: SparkStreamOperationOperator(stream="s", desired_state="/x", **kw),
               lambda **kw: SparkStreamHealthSensor(spec={}, **kw)]
    for i, make in enumerate(classes):
        default = _retry_settings(make(task_id=f"z{i}", deferrable=False))
        assert default == (0, timedelta(seconds=300))
        assert _retry_settings(make(task_id=f"a{i}", deferrable=True)) == (DEFERRED_RETRIES, DEFERRED_RETRY_DELAY)
        assert _retry_settings(make(task_id=f"b{i}", deferrable=False)) == default  # a blocking task: unchanged
        assert _retry_settings(make(task_id=f"c{i}", deferrable=True, retries=0)) == default  # the task's own word
        assert _retry_settings(make(task_id=f"d{i}", deferrable=True, retries=5)) == (5, timedelta(seconds=300))
        assert _retry_settings(make(task_id=f"e{i}", deferrable=True, retry_delay=timedelta(seconds=40))) == \
            (DEFERRED_RETRIES, timedelta(seconds=40))
        with DAG(f"dag{i}", schedule=None, default_args={"retries": 0}):
            assert _retry_settings(make(task_id="f", deferrable=True)) == default  # the DAG's default_args
        with DAG(f"dag_delay{i}", schedule=None, default_args={"retry_delay": timedelta(seconds=60)}):
            assert _retry_settings(make(task_id="g", deferrable=True)) == (DEFERRED_RETRIES, timedelta(seconds=60))
    # The deployment's ``[core] default_task_retries`` (Airflow reads it when it loads its operator class) wins too.
    from airflow.sdk.bases.operator import BaseOperator

    init_defaults = BaseOperator.__init__.__wrapped__.__kwdefaults__
    monkeypatch.setitem(init_defaults, "retries", 4)
    assert SparkStreamStopOperator(task_id="h", spec={}, deferrable=True).retries == 4


def test_a_killed_deploy_asks_its_driver_to_stop_only_when_it_waits_in_the_worker(monkeypatch):
    """Blocking: a kill while waiting for the start stops the half-started driver. Deferrable: a kill of the
    worker is a kill of a short step (Airflow's defer race fails resumed tries): the stream is left starting."""
    stopped: list[str] = []
    for deferrable in (False, True):
        op = SparkStreamDeployOperator(task_id=f"k{deferrable}", spec={}, deferrable=deferrable)
        op._started(SimpleNamespace(abandon_start=lambda reason, d=deferrable: stopped.append(f"spec-{d}")))
        op.on_kill()
    assert stopped == ["spec-False"]
