"""Issue 34: one precedence (connection -> spec -> operator), time parameters read as the spec reads them
and checked when the DAG is parsed, ``conn_id`` on every operator and sensor, YAML spec files rendered
by Jinja (``template_ext``).

No Spark: the connections are real Airflow connections (``AIRFLOW_CONN_*``, as Airflow reads them), the
DAGs are real DAG files parsed by a real ``DagBag``, and templates are rendered by Airflow's own
``render_template_fields`` on a task of a real DAG; nothing here starts a driver.
"""

from __future__ import annotations

import base64
import inspect
import json
import textwrap
from pathlib import Path

import pytest

from airflow_streaming.exceptions import SpecError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.operators.compat import SparkStreamCompatibilityCheckOperator
from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.operators.lifecycle import (
    SparkStreamOperationOperator,
    SparkStreamUpgradeOperator,
    state_with_conn_id,
)
from airflow_streaming.operators.parameters import OperatorParameterError
from airflow_streaming.operators.stop import SparkStreamStopOperator
from airflow_streaming.operators.supervise import SparkStreamSupervisorOperator
from airflow_streaming.sensors.health import SparkStreamHealthSensor
from airflow_streaming.sensors.progress import SparkStreamProgressSensor
from airflow_streaming.spec import StreamSpec

OPERATORS = (SparkStreamDeployOperator, SparkStreamStopOperator, SparkStreamUpgradeOperator,
             SparkStreamOperationOperator, SparkStreamCompatibilityCheckOperator, SparkStreamSupervisorOperator,
             SparkStreamHealthSensor, SparkStreamProgressSensor)
KEYTAB = base64.b64encode(b"\x05\x02 not a real keytab").decode()


def _spec(tmp_path: Path, **extra) -> StreamSpec:
    return StreamSpec(name="prec", application="events_etl", checkpoint_location=str(tmp_path / "ckpt"),
                      control_location=str(tmp_path / "control"), **extra)


def _connection(monkeypatch, conn_id: str, host: str, **extra) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "spark", "host": host,
                                                                      "extra": extra}))


@pytest.fixture
def keytab_dir(tmp_path, monkeypatch):
    directory = tmp_path / "keytabs"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv("AIRFLOW_STREAMING_KEYTAB_DIR", str(directory))
    return directory


# ------------------------------------------------------------------ connection -> spec


def test_a_spec_master_keeps_the_rest_of_the_connection(tmp_path, monkeypatch, keytab_dir):
    _connection(monkeypatch, "spark_kerb", "spark://conn-master:7077", queue="etl", principal="etl@EXAMPLE.COM",
                keytab=KEYTAB, **{"deploy-mode": "cluster", "spark-binary": "spark3-submit"})
    resolved = SparkStreamHook(_spec(tmp_path, conn_id="spark_kerb", master="yarn")).resolved_spec
    assert resolved.master == "yarn"  # the spec's master replaces only the master
    assert resolved.deploy_mode == "cluster"
    assert resolved.cluster["queue"] == "etl"
    assert resolved.cluster["principal"] == "etl@EXAMPLE.COM"
    assert resolved.cluster["spark_binary"] == "spark3-submit"
    assert Path(resolved.cluster["keytab"]).parent == keytab_dir


def test_the_specs_own_fields_win_field_by_field(tmp_path, monkeypatch, keytab_dir):
    _connection(monkeypatch, "spark_kerb", "yarn", queue="etl", principal="etl@EXAMPLE.COM", keytab=KEYTAB,
                **{"deploy-mode": "cluster"})
    spec = _spec(tmp_path, conn_id="spark_kerb", master="yarn", deploy_mode="client",
                 cluster={"queue": "mine"})
    resolved = SparkStreamHook(spec).resolved_spec
    assert (resolved.master, resolved.deploy_mode, resolved.cluster["queue"]) == ("yarn", "client", "mine")
    assert resolved.cluster["principal"] == "etl@EXAMPLE.COM"  # not set by the spec: the connection's


def test_a_spec_master_without_a_defined_connection_is_used_as_it_is(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    spec = _spec(tmp_path, master="local[2]")  # conn_id spark_default, not defined
    hook = SparkStreamHook(spec)
    assert hook.resolved_spec is spec
    assert hook.target.kind == "local"


def test_no_master_and_no_connection_still_says_how_to_define_it(tmp_path, monkeypatch):
    spec = _spec(tmp_path, conn_id="spark_nowhere")
    with pytest.raises(ValueError, match="spark_nowhere.*set `master: local\\[2\\]`"):
        SparkStreamHook(spec).resolved_spec  # noqa: B018


def test_a_local_spec_master_refuses_the_connections_cluster_deploy_mode_clearly(tmp_path, monkeypatch):
    _connection(monkeypatch, "spark_cluster", "spark://m:7077", **{"deploy-mode": "cluster"})
    with pytest.raises(SpecError, match="deploy-mode cluster.*local\\[2\\].*deploy_mode: client") as err:
        SparkStreamHook(_spec(tmp_path, conn_id="spark_cluster", master="local[2]")).resolved_spec  # noqa: B018
    assert err.value.field == "deploy_mode"
    resolved = SparkStreamHook(_spec(tmp_path, conn_id="spark_cluster", master="local[2]",
                                     deploy_mode="client")).resolved_spec
    assert (resolved.master, resolved.deploy_mode) == ("local[2]", "client")


def test_the_kept_connection_settings_reach_the_spark_submit_command(tmp_path, monkeypatch, keytab_dir):
    """Not only the resolved spec: the spark-submit of a spec that sets ``master: local[1]`` carries the
    connection's principal and keytab, and runs the spec's master."""
    _connection(monkeypatch, "spark_principal", "yarn", principal="etl@EXAMPLE.COM", keytab=KEYTAB,
                **{"spark-binary": "spark3-submit"})
    hook = SparkStreamHook(_spec(tmp_path, conn_id="spark_principal", master="local[1]"))
    argv, line = hook.command_for("20261127T000000Z-0000prec")
    assert hook.target.kind == "local"
    assert argv[argv.index("--master") + 1] == "local[1]"
    assert argv[argv.index("--principal") + 1] == "etl@EXAMPLE.COM"
    assert Path(argv[argv.index("--keytab") + 1]).parent == keytab_dir
    assert Path(argv[0]).name == "spark3-submit"
    assert KEYTAB not in line


# ------------------------------------------------------------------ spec -> operator: conn_id


@pytest.mark.parametrize("operator", OPERATORS, ids=lambda c: c.__name__)
def test_every_operator_and_sensor_takes_a_conn_id(operator):
    assert "conn_id" in inspect.signature(operator.__init__).parameters


def test_the_operators_conn_id_wins_over_the_specs(tmp_path, monkeypatch):
    """A deploy whose spec names one connection and whose operator names another is submitted through the
    operator's: with neither defined and no master, the refusal (before anything is submitted) names it."""
    spec = _spec(tmp_path, conn_id="spark_from_spec").to_dict()
    op = SparkStreamDeployOperator(task_id="deploy", spec=spec, conn_id="spark_from_operator")

    class Ti:
        dag_id, task_id, run_id, try_number, map_index = "d", "deploy", "manual__1", 1, -1

    with pytest.raises(Exception) as err:
        op.execute({"ti": Ti()})
    assert "spark_from_operator" in str(err.value) and "spark_from_spec" not in str(err.value)
    assert not (tmp_path / "control" / "prec" / "driver.json").exists()


@pytest.mark.parametrize("operator, kwargs", [
    (SparkStreamHealthSensor, {}), (SparkStreamProgressSensor, {}), (SparkStreamStopOperator, {}),
    (SparkStreamCompatibilityCheckOperator, {}), (SparkStreamUpgradeOperator, {}),
], ids=lambda v: getattr(v, "__name__", ""))
def test_the_spec_each_operator_acts_on_has_the_operators_conn_id(tmp_path, operator, kwargs):
    from airflow_streaming.operators.parameters import spec_with_conn_id

    op = operator(task_id="t", spec=_spec(tmp_path, conn_id="spark_from_spec").to_dict(), conn_id="spark_op",
                  **kwargs)
    assert spec_with_conn_id(op.spec, op.conn_id).conn_id == "spark_op"
    op = operator(task_id="t2", spec=_spec(tmp_path, conn_id="spark_from_spec").to_dict(), **kwargs)
    assert spec_with_conn_id(op.spec, op.conn_id).conn_id == "spark_from_spec"  # no operator conn_id


def test_the_operation_operators_conn_id_reaches_every_version_of_the_desired_state(tmp_path):
    from airflow_streaming.lifecycle.desired_state import load_desired_state

    state = load_desired_state({"streams": {"prec": {
        "version": "v2", "spec": {"application": "events_etl", "checkpoint_location": str(tmp_path / "ckpt"),
                                  "control_location": str(tmp_path / "control"), "conn_id": "spark_file"},
        "versions": {"v1": {}, "v2": {}}}}})
    moved = state_with_conn_id(state, "spark_op").target("prec")
    assert moved.spec.conn_id == "spark_op"
    assert {moved.spec_for(v).conn_id for v in moved.versions} == {"spark_op"}
    assert state_with_conn_id(state, None) is state


# ------------------------------------------------------------------ time parameters


@pytest.mark.parametrize("operator, parameter", [
    (SparkStreamDeployOperator, "startup_timeout"), (SparkStreamStopOperator, "stop_timeout"),
    (SparkStreamUpgradeOperator, "probation_window"), (SparkStreamDeployOperator, "poll_interval"),
    (SparkStreamHealthSensor, "watch_seconds"), (SparkStreamProgressSensor, "poke_interval"),
    (SparkStreamHealthSensor, "timeout"), (SparkStreamSupervisorOperator, "max_wait_s"),
    (SparkStreamSupervisorOperator, "repeat_window_s"),
], ids=lambda v: getattr(v, "__name__", v))
def test_a_bad_time_parameter_fails_when_the_operator_is_built(tmp_path, operator, parameter):
    spec_arg = {"specs": [_spec(tmp_path).to_dict()]} if operator is SparkStreamSupervisorOperator else \
        {"spec": _spec(tmp_path).to_dict()}
    with pytest.raises(OperatorParameterError) as err:
        operator(task_id="bad_task", **spec_arg, **{parameter: "soon"})
    assert parameter in str(err.value) and "bad_task" in str(err.value) and operator.__name__ in str(err.value)
    with pytest.raises(OperatorParameterError, match=f"{parameter}: must be"):
        operator(task_id="bad_task", **spec_arg, **{parameter: -5})


def test_time_parameters_take_what_the_spec_takes(tmp_path):
    spec = _spec(tmp_path).to_dict()
    assert SparkStreamDeployOperator(task_id="d", spec=spec, startup_timeout="5 minutes").startup_timeout == \
        "5 minutes"
    assert SparkStreamDeployOperator(task_id="d2", spec=spec, poll_interval="30s").poll_interval == 30.0
    sensor = SparkStreamHealthSensor(task_id="h", spec=spec, health_mode="watch", watch_seconds="2 minutes",
                                     timeout="1h", poke_interval="10s")
    assert (sensor.watch_seconds, sensor.timeout, sensor.poke_interval) == (120.0, 3600.0, 10.0)
    assert SparkStreamProgressSensor(task_id="p", spec=spec, poke_interval="2s").poke_interval == 2.0
    assert SparkStreamSupervisorOperator(task_id="s", specs=[spec], max_wait_s="1m").max_wait_s == 60.0
    with pytest.raises(ValueError, match="longer than the sensor's timeout"):
        SparkStreamHealthSensor(task_id="h2", spec=spec, health_mode="watch", watch_seconds="10 minutes",
                                timeout="5 minutes")


def _dag_file(folder: Path, body: str) -> Path:
    path = folder / "prec_dag.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_dag_file_with_a_bad_duration_fails_to_parse_and_a_good_one_parses(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    dags = tmp_path / "dags"
    dags.mkdir()
    body = """
        import pendulum
        from airflow.sdk import DAG
        from airflow_streaming.operators.deploy import SparkStreamDeployOperator

        with DAG("prec_dag", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
            SparkStreamDeployOperator(task_id="deploy", startup_timeout=STARTUP, spec={
                "name": "prec", "application": "events_etl", "checkpoint_location": "/tmp/prec-ckpt",
                "control_location": "/tmp/prec-control", "master": "local[1]"})
        """
    path = _dag_file(dags, body.replace("STARTUP", repr("five minutes")))
    bag = DagBag(dag_folder=str(dags))
    assert "prec_dag" not in bag.dags
    error = bag.import_errors[str(path)]
    assert "startup_timeout" in error and "'deploy'" in error and "five minutes" in error
    _dag_file(dags, body.replace("STARTUP", repr("5 minutes")))
    bag = DagBag(dag_folder=str(dags))
    assert not bag.import_errors
    assert bag.dags["prec_dag"].get_task("deploy").startup_timeout == "5 minutes"


def _render(task, **context):
    """Render a task's templated fields as the task runner does (``render_template_fields`` of a task of a
    real DAG, the DAG's Jinja environment)."""
    task.render_template_fields(context)
    return task


def test_a_templated_duration_is_checked_at_execute_before_anything_is_submitted(tmp_path):
    from airflow.sdk import DAG

    with DAG("prec_tpl", schedule=None):
        op = SparkStreamDeployOperator(task_id="deploy", spec=_spec(tmp_path, master="local[1]").to_dict(),
                                       startup_timeout="{{ params.startup }}")
    assert op.startup_timeout == "{{ params.startup }}"  # kept for rendering
    _render(op, params={"startup": "later"})

    class Ti:
        dag_id, task_id, run_id, try_number, map_index = "prec_tpl", "deploy", "manual__1", 1, -1

    from airflow_streaming.task_failures import original_error

    with pytest.raises(Exception, match="startup_timeout: invalid duration 'later'") as err:
        op.execute({"ti": Ti()})
    assert isinstance(original_error(err.value), OperatorParameterError)  # permanent: the task is not retried
    assert not (tmp_path / "control").exists()  # nothing recorded, nothing submitted


# ------------------------------------------------------------------ template_ext


def _spec_file(folder: Path, name: str = "spec.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent("""\
        name: prec_{{ params.suffix }}
        version: "{{ ds_nodash }}"
        application: events_etl
        checkpoint_location: {{ params.root }}/ckpt
        control_location: {{ params.root }}/control
        master: local[1]
        application_args: ["--config", "/etc/app.yaml"]
        """))
    return path


@pytest.mark.parametrize("operator", [SparkStreamDeployOperator, SparkStreamStopOperator,
                                      SparkStreamUpgradeOperator, SparkStreamCompatibilityCheckOperator,
                                      SparkStreamHealthSensor, SparkStreamProgressSensor],
                         ids=lambda c: c.__name__)
def test_a_yaml_spec_file_is_rendered_with_jinja(tmp_path, operator):
    from airflow.sdk import DAG

    from airflow_streaming.spec import as_spec

    assert operator.template_ext == (".yaml", ".yml")
    folder = tmp_path / "dags"
    folder.mkdir()
    _spec_file(folder)
    with DAG("prec_yaml", schedule=None, template_searchpath=[str(folder)]):
        relative = operator(task_id="relative", spec="spec.yaml")
        absolute = operator(task_id="absolute", spec=str(folder / "spec.yaml"))
    for task in (relative, absolute):
        _render(task, params={"suffix": "x", "root": str(tmp_path)}, ds_nodash="20261127")
        spec = as_spec(task.spec)
        assert (spec.name, spec.version, spec.control_location) == ("prec_x", "20261127", f"{tmp_path}/control")
        assert spec.application_args == ("--config", "/etc/app.yaml")


def test_a_yaml_path_inside_a_dict_spec_is_a_string_not_a_file(tmp_path):
    from airflow.sdk import DAG

    (tmp_path / "app.yaml").write_text("not: the spec\n")
    spec = {**_spec(tmp_path).to_dict(), "application_args": ["--config", str(tmp_path / "app.yaml")],
            "version": "{{ params.v }}"}
    with DAG("prec_dict", schedule=None, template_searchpath=[str(tmp_path)]):
        op = SparkStreamDeployOperator(task_id="deploy", spec=spec)
    _render(op, params={"v": "v7"})
    assert op.spec["application_args"] == ["--config", str(tmp_path / "app.yaml")]
    assert op.spec["version"] == "v7"


def test_the_supervisors_spec_files_are_rendered(tmp_path):
    from airflow.sdk import DAG

    from airflow_streaming.spec import as_spec

    _spec_file(tmp_path, "a.yml")
    with DAG("prec_sup", schedule=None):
        op = SparkStreamSupervisorOperator(task_id="sup", specs=[str(tmp_path / "a.yml")])
    _render(op, params={"suffix": "s", "root": str(tmp_path)}, ds_nodash="20261127")
    assert as_spec(op.specs[0]).name == "prec_s"


def test_a_dag_bag_renders_a_yaml_spec_of_a_parsed_dag(tmp_path):
    """Parsed by a real DagBag (which reads template files: ``resolve_template_files``) and rendered."""
    from airflow.dag_processing.dagbag import DagBag

    from airflow_streaming.spec import as_spec

    dags = tmp_path / "dags"
    dags.mkdir()
    _spec_file(dags)
    _dag_file(dags, """
        import pendulum
        from airflow.sdk import DAG
        from airflow_streaming.sensors.progress import SparkStreamProgressSensor

        with DAG("prec_bag", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
            SparkStreamProgressSensor(task_id="progress", spec="spec.yaml", poke_interval="5s", timeout="10 minutes")
        """)
    bag = DagBag(dag_folder=str(dags))
    assert not bag.import_errors
    task = bag.dags["prec_bag"].get_task("progress")
    assert "{{ params.suffix }}" in task.spec  # the file's text, read when the DAG was parsed
    assert (task.poke_interval, task.timeout) == (5.0, 600.0)
    _render(task, params={"suffix": "bag", "root": str(tmp_path)}, ds_nodash="20261127")
    assert as_spec(task.spec).name == "prec_bag"


def test_a_missing_spec_file_is_left_for_the_operator_to_name_not_a_render_failure(tmp_path):
    """A supervisor over three streams, one of whose spec files is missing: rendering keeps the path (the pass
    reports that stream by name and supervises the others; test_supervisor.py's isolation test runs it under
    `airflow dags test`), and the present file is still rendered."""
    from airflow.sdk import DAG

    from airflow_streaming.spec import as_spec

    _spec_file(tmp_path, "a.yml")
    missing = str(tmp_path / "gone.yaml")
    with DAG("prec_missing", schedule=None):
        op = SparkStreamSupervisorOperator(task_id="sup", specs=[missing, str(tmp_path / "a.yml")])
        deploy = SparkStreamDeployOperator(task_id="deploy", spec=missing)
    _render(op, params={"suffix": "s", "root": str(tmp_path)}, ds_nodash="20261127")
    _render(deploy)
    assert op.specs[0] == missing and as_spec(op.specs[1]).name == "prec_s"
    assert deploy.spec == missing
