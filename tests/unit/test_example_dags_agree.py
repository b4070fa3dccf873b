"""The example DAGs agree with each other and with the demo root (issue 34): the example supervisor watches
a stream an example deploys (it watched one no example deployed), with the same spec; every path of an
example DAG's specs is under ``$AIRFLOW_STREAMING_DEMO_ROOT``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.operators.supervise import SparkStreamSupervisorOperator
from airflow_streaming.spec import as_spec

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = ("device_signals_stream", "stream_supervisor", "streaming_lifecycle_demo", "own_job_stream")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", REPO / "dags" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tasks(module, kind):
    from airflow.sdk import DAG

    return [t for dag in vars(module).values() if isinstance(dag, DAG) for t in dag.tasks if isinstance(t, kind)]


@pytest.fixture
def examples(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_STREAMING_DEMO_ROOT", str(tmp_path / "demo-root"))
    return {name: _load(name) for name in EXAMPLES}


def test_the_supervisor_watches_the_stream_an_example_deploys(examples):
    deployed = {as_spec(t.spec) for m in examples.values() for t in _tasks(m, SparkStreamDeployOperator)}
    [supervise] = _tasks(examples["stream_supervisor"], SparkStreamSupervisorOperator)
    watched = [as_spec(s) for s in supervise.specs]
    assert watched and all(spec in deployed for spec in watched), (watched, deployed)
    assert {s.name for s in watched} == {"device-signals"}


def test_every_example_path_is_under_the_demo_root(examples, tmp_path):
    root = str(tmp_path / "demo-root")
    specs = [as_spec(t.spec) for m in examples.values() for t in _tasks(m, SparkStreamDeployOperator)]
    specs += [as_spec(s) for s in _tasks(examples["stream_supervisor"], SparkStreamSupervisorOperator)[0].specs]
    assert len(specs) >= 3
    for spec in specs:
        paths = [spec.checkpoint_location, spec.control_location, *(a for a in spec.application_args if "/" in a)]
        assert all(p.startswith(root + "/") for p in paths), (spec.name, paths)


def test_the_own_job_example_ships_files_that_exist_and_a_script_that_compiles(examples):
    """The example of a team's own script: its application, py_files and files exist beside the DAG, the
    script and its helper compile, and the script names no provider module (a team's job imports none).
    It runs for real, copied out of the repository, in tests/integration/test_own_job.py."""
    [deploy] = _tasks(examples["own_job_stream"], SparkStreamDeployOperator)
    spec = as_spec(deploy.spec)
    shipped = [spec.application, *spec.py_files, *spec.files]
    assert all(Path(p).is_file() for p in shipped), shipped
    for source in (spec.application, *spec.py_files):
        text = Path(source).read_text()
        compile(text, source, "exec")
        assert "airflow" not in text.lower(), source
