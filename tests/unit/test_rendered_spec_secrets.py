"""A rendered spec's private values never reach Airflow's stored rendered fields nor an OpenLineage event.

After a task renders its templates, Airflow's task runner stores the rendered fields (the UI's "Rendered
Templates", readable by anyone who may read the DAG) through its secrets masker, which hides only values it
was told about and keys named like secrets. A private Spark setting is private because it is not on the
allowlist (docs/security.md), whatever its name: ``spark.myapp.opaque: "{{ params.token }}"`` was shown in
clear. The OpenLineage listener, with ``include_full_task_info``, copies the operator whole into its events,
through a redactor it made from the masker before the task rendered anything.

Real parts: Airflow's own ``render_template_fields`` on tasks of a real DAG, the task runner's own
``_serialize_rendered_fields`` (what it sends to the API server), and the OpenLineage provider's own listener,
adapter redactor and ``TaskInfoComplete`` (what it puts in the ``airflow`` run facet with full task info).
Each case uses its own secret value: the masker is process-wide, a value told once is masked for good.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.operators.lifecycle import SparkStreamUpgradeOperator
from airflow_streaming.operators.supervise import SparkStreamSupervisorOperator
from airflow_streaming.redaction import spec_secret_values
from airflow_streaming.sensors.health import SparkStreamHealthSensor


def _token() -> str:
    return f"tok-{uuid.uuid4().hex}"


def _spec(tmp_path: Path, name: str = "rendered") -> dict:
    return {"name": name, "application": "events_etl", "checkpoint_location": str(tmp_path / "ckpt" / name),
            "control_location": str(tmp_path / "control"), "master": "local[1]",
            "spark_conf": {"spark.myapp.opaque": "{{ params.token }}", "spark.sql.shuffle.partitions": "2"}}


def _rendered_fields(task) -> str:
    from airflow.sdk.execution_time.task_runner import _serialize_rendered_fields

    return json.dumps(_serialize_rendered_fields(task))


def _dag(name: str):
    from airflow.sdk import DAG

    return DAG(name, schedule=None)


def test_a_private_conf_value_is_masked_in_the_stored_rendered_fields(tmp_path):
    token = _token()
    with _dag("rendered_deploy"):
        deploy = SparkStreamDeployOperator(task_id="deploy", spec=_spec(tmp_path))
    deploy.render_template_fields({"params": {"token": token}})
    assert deploy.spec["spark_conf"]["spark.myapp.opaque"] == token  # the task itself gets the value
    stored = _rendered_fields(deploy)
    assert token not in stored and '"spark.myapp.opaque": "***"' in stored
    assert '"spark.sql.shuffle.partitions": "2"' in stored  # a public setting stays readable


def test_secret_arguments_and_a_spec_file_and_a_list_of_specs_are_masked(tmp_path):
    url, arg, other = _token(), _token(), _token()
    spec_file = tmp_path / "watched.yaml"
    spec_file.write_text(
        f"name: watched\napplication: events_etl\ncheckpoint_location: {tmp_path}/ckpt/w\n"
        f"control_location: {tmp_path}/control\nmaster: local[1]\n"
        "spark_conf:\n  spark.myapp.opaque: '{{ params.other }}'\n"
        "application_args: ['--db-url', 'jdbc:postgresql://etl:{{ params.arg }}@db/x']\n")
    supervised = [_spec(tmp_path, "one"), {**_spec(tmp_path, "two"), "spark_conf": {"spark.myapp.opaque": url}}]
    with _dag("rendered_many"):
        sensor = SparkStreamHealthSensor(task_id="health", spec=str(spec_file), mode="report")
        supervisor = SparkStreamSupervisorOperator(task_id="supervise", specs=supervised)
    context = {"params": {"token": _token(), "arg": arg, "other": other}}
    sensor.render_template_fields(context)
    supervisor.render_template_fields(context)
    assert isinstance(sensor.spec, str) and other in sensor.spec  # the YAML text, rendered
    stored = _rendered_fields(sensor) + _rendered_fields(supervisor)
    for secret in (url, arg, other, context["params"]["token"]):
        assert secret not in stored


def test_the_upgrade_operators_current_spec_is_masked_too(tmp_path):
    token, old = _token(), _token()
    with _dag("rendered_upgrade"):
        upgrade = SparkStreamUpgradeOperator(task_id="upgrade", spec=_spec(tmp_path),
                                             current={**_spec(tmp_path), "spark_conf": {"spark.myapp.opaque": old}})
    upgrade.render_template_fields({"params": {"token": token}})
    stored = _rendered_fields(upgrade)
    assert token not in stored and old not in stored


@pytest.fixture
def full_task_info(monkeypatch):
    """OpenLineage on (a console transport) with ``include_full_task_info``, as a deployment would set it."""
    pytest.importorskip("airflow.providers.openlineage")
    from airflow.providers.openlineage import conf as lineage_conf

    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", '{"type": "console"}')
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__INCLUDE_FULL_TASK_INFO", "true")
    cached = [f for f in vars(lineage_conf).values() if hasattr(f, "cache_clear")]
    for function in cached:
        function.cache_clear()
    yield
    for function in cached:
        function.cache_clear()


def test_the_openlineage_providers_redaction_misses_a_copied_operator(tmp_path):
    """Why a task refuses below: with ``include_full_task_info`` the listener's ``airflow`` run facet holds
    ``TaskInfoComplete(task)``, a dict whose redaction changes its attributes but not the items that are
    serialized - even a key named like a secret goes out in clear. If the provider fixes it, this fails, and
    the refusal can go."""
    pytest.importorskip("airflow.providers.openlineage")
    from airflow.providers.openlineage.plugins.listener import get_openlineage_listener
    from airflow.providers.openlineage.utils.utils import TaskInfoComplete
    from openlineage.client.serde import Serde

    password = _token()
    with _dag("lineage_copy"):
        deploy = SparkStreamDeployOperator(task_id="deploy", spec={
            **_spec(tmp_path), "spark_conf": {"spark.ssl.keyPassword": password}})
    from airflow.sdk.log import mask_secret

    mask_secret(password)  # told to the masker too: still sent
    redacted = get_openlineage_listener().adapter._redacter.redact(TaskInfoComplete(deploy), max_depth=20)
    assert password in Serde.to_json({"task": redacted})


def test_with_full_task_info_on_a_spec_with_a_private_value_fails_before_any_lineage_event(tmp_path, full_task_info):
    from airflow.providers.openlineage.utils.utils import TaskInfoComplete

    from airflow_streaming.exceptions import SpecError

    token, plain = _token(), _token()
    with _dag("lineage_refused"):
        deploy = SparkStreamDeployOperator(task_id="deploy", spec=_spec(tmp_path))
        supervisor = SparkStreamSupervisorOperator(task_id="supervise", specs=[
            {**_spec(tmp_path, "pub"), "spark_conf": {"spark.sql.shuffle.partitions": "2"}}, _spec(tmp_path, "priv")])
        public = SparkStreamDeployOperator(task_id="public", spec={
            **_spec(tmp_path, "pub"), "spark_conf": {"spark.sql.shuffle.partitions": "{{ params.plain }}"}})
    for task, field in ((deploy, "spec.spark_conf"), (supervisor, r"specs\[1\].spark_conf")):
        with pytest.raises(SpecError, match=field + r"\.spark\.myapp\.opaque.*include_full_task_info"):
            task.render_template_fields({"params": {"token": token, "plain": plain}})
        copied = json.dumps(TaskInfoComplete(task), default=str)  # what the failure event would carry
        assert token not in copied and "spark.myapp.opaque" in copied
    public.render_template_fields({"params": {"token": token, "plain": "3"}})  # nothing private: runs
    assert public.spec["spark_conf"]["spark.sql.shuffle.partitions"] == "3"


@pytest.mark.parametrize("spec, expected", [
    ({"spark_conf": {"spark.myapp.opaque": "abcdef", "spark.sql.shuffle.partitions": "2"}}, ["abcdef"]),
    ({"secret_args": {"--db-password": "hunter22"}}, ["hunter22"]),
    ({"application_args": ["--db-url", "jdbc:mysql://u:pw12@db/x", "--rows", "10"]}, ["jdbc:mysql://u:pw12@db/x"]),
    ({"env_vars": {"API_TOKEN": "t0ken-x", "REGION": "eu-west-1"}}, ["t0ken-x"]),
    ({"spark_conf": ["not", "a", "dict"]}, []),
    ({"name": "only-public", "master": "local[1]"}, []),
])
def test_what_a_spec_holds_privately_is_what_its_control_files_mask(spec, expected):
    assert spec_secret_values(spec) == expected
