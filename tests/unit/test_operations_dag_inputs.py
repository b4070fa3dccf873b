"""Trust boundary (issue 25, item 5): whoever may trigger the operations DAG chooses among the streams
of the deployment's desired-state file; the file itself (which specs run, with which application and
conf) is never a form field or a templated Param."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from airflow_streaming.operators.lifecycle import SparkStreamOperationOperator

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def operations_dag():
    spec = importlib.util.spec_from_file_location("stream_operations_dag", REPO / "dags" / "stream_operations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_trigger_form_offers_no_desired_state_file(operations_dag):
    dag = operations_dag.stream_operations()
    assert "desired_state" not in dag.params and {"stream", "action", "version"} <= set(dag.params)


def test_a_desired_state_in_the_run_conf_does_not_reach_the_task(operations_dag, tmp_path):
    """The attack: trigger with conf {"desired_state": "<a spec file I wrote>"} (and a template in it)."""
    evil = tmp_path / "evil.yaml"
    evil.write_text("streams: {}\n")
    dag = operations_dag.stream_operations()
    task = dag.get_task("operate")
    assert "desired_state" not in SparkStreamOperationOperator.template_fields
    params = {**{k: v for k, v in dag.params.items()}, "desired_state": str(evil), "stream": "etl", "action": "status"}
    task.render_template_fields({"params": params, "dag_run": None})
    assert task.desired_state == operations_dag.DESIRED_STATE != str(evil)
    assert task.stream == "etl" and task.action == "status"  # the form's own fields still render


def test_a_templated_desired_state_stays_a_literal():
    op = SparkStreamOperationOperator(task_id="t", stream="s", action="status", desired_state="{{ params.evil }}")
    op.render_template_fields({"params": {"evil": "/tmp/evil.yaml"}})
    assert op.desired_state == "{{ params.evil }}"


def test_the_upgrade_window_reads_only_its_authors_desired_state_file():
    """The same attack on the upgrade-window DAG: it had a `desired_state` Param (whoever could trigger
    it picked the spec file the apply tasks ran)."""
    spec = importlib.util.spec_from_file_location("stream_upgrade_window_dag", REPO / "dags" / "stream_upgrade_window.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = module.stream_upgrade_window()
    assert "desired_state" not in dag.params
    assert dag.get_task("apply").partial_kwargs["desired_state"] == module.DESIRED_STATE
