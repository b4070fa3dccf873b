"""Retries under real Airflow (``airflow dags test``): permanent failures are not retried, transient ones are.

Every task has ``retries=3`` (no delay). What each task's last try number says:

- an invalid spec, a missing application, a job that cannot import its code (a deterministic start
  failure of a real driver): 1 try, failed;
- control storage that fails with EIO on every try: 4 tries, failed;
- control storage that fails once (a fault that fires on the first read only): 2 tries, success;
- a real driver that fails at start with an error a restart may fix: retried (``retries=1``: 2 tries).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

DAG_FILE = '''
from datetime import timedelta

from airflow.sdk import DAG

from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.operators.stop import SparkStreamStopOperator

SPECS = {specs!r}

with DAG("retry_policy_demo", schedule=None, default_args={{"retries": 3, "retry_delay": timedelta(0)}}):
    SparkStreamStopOperator(task_id="bad_spec", spec={{"name": "no-application", "checkpoint_location": "/tmp/x"}})
    SparkStreamDeployOperator(task_id="missing_app", spec=SPECS["missing_app"])
    SparkStreamStopOperator(task_id="storage_always_fails", spec=SPECS["storage_always_fails"])
    SparkStreamStopOperator(task_id="storage_fails_once", spec=SPECS["storage_fails_once"])
'''

SPARK_DAG_FILE = '''
from datetime import timedelta

from airflow.sdk import DAG

from airflow_streaming.operators.deploy import SparkStreamDeployOperator

SPECS = {specs!r}

with DAG("start_failures_demo", schedule=None, default_args={{"retry_delay": timedelta(0)}}):
    SparkStreamDeployOperator(task_id="cannot_import", spec=SPECS["cannot_import"], retries=3)
    SparkStreamDeployOperator(task_id="config_service_down", spec=SPECS["config_service_down"], retries=1)
'''


def dags_test(tmp_path: Path, dag_id: str, source: str, extra_env: dict[str, str]) -> str:
    dags = tmp_path / "dags"
    dags.mkdir(exist_ok=True)
    (dags / f"{dag_id}.py").write_text(textwrap.dedent(source))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags), **extra_env,
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", dag_id], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=900)
    return run.stdout + run.stderr


def final_tries(dag_id: str) -> dict[str, tuple[str, int]]:
    """task id -> (state, try number) of the DAG's latest run, read from the metadata DB."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).first()
        assert run is not None, f"no run of {dag_id}"
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id)
        return {ti.task_id: (str(ti.state), ti.try_number) for ti in tis}


@pytest.mark.airflow
def test_permanent_failures_are_not_retried_and_transient_ones_are(streams, airflow_db, tmp_path):
    specs = {
        "missing_app": streams.spec("ghost", streams.path("apps", "no_such_job.py"), []).to_dict(),
        "storage_always_fails": streams.spec("flaky-always", "events_etl", []).to_dict(),
        "storage_fails_once": streams.spec("flaky-once", "events_etl", []).to_dict(),
    }
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps([
        {"point": "storage.read", "match": "/flaky-always/history.json", "action": "error", "errno": "EIO"},
        {"point": "storage.read", "match": "/flaky-once/history.json", "action": "error", "errno": "EIO",
         "once": str(tmp_path / "fired-once")},
    ]))
    output = dags_test(tmp_path, "retry_policy_demo", DAG_FILE.format(specs=specs),
                       {"AIRFLOW_STREAMING_FAULTS": str(faults)})

    tries = final_tries("retry_policy_demo")
    assert tries["bad_spec"] == ("failed", 1), output[-5000:]
    assert tries["missing_app"] == ("failed", 1), output[-5000:]
    assert tries["storage_always_fails"] == ("failed", 4), output[-5000:]
    assert tries["storage_fails_once"] == ("success", 2), output[-5000:]
    # The original message is what the task log says (AirflowFailException keeps it).
    assert "application file" in output and "does not exist; nothing was submitted" in output
    assert "cannot read" in output and "Input/output error (injected at storage.read)" in output


CANNOT_IMPORT = "import pandas_calibration_tables  # not installed: the job cannot start, ever\n"
CONFIG_DOWN = ("from pyspark.sql import SparkSession\n"
               "spark = SparkSession.builder.getOrCreate()\n"
               "raise RuntimeError('cannot reach the config service at cfg.internal:8443')\n")


@pytest.mark.long(covered_by="tests/integration/test_task_retries.py::"
                           "test_permanent_failures_are_not_retried_and_transient_ones_are")
@pytest.mark.spark
@pytest.mark.airflow
def test_a_deterministic_start_failure_is_not_retried_a_transient_one_is(streams, airflow_db, tmp_path):
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "cannot_import.py").write_text(CANNOT_IMPORT)
    (apps / "config_down.py").write_text(CONFIG_DOWN)
    specs = {"cannot_import": streams.spec("cannot-import", str(apps / "cannot_import.py"), []).to_dict(),
             "config_service_down": streams.spec("config-down", str(apps / "config_down.py"), []).to_dict()}
    for spec in specs.values():  # so that the fixture kills any driver left behind
        streams.hook(streams.spec(spec["name"], spec["application"], []))
    output = dags_test(tmp_path, "start_failures_demo", SPARK_DAG_FILE.format(specs=specs), {})

    tries = final_tries("start_failures_demo")
    assert tries["cannot_import"] == ("failed", 1), output[-5000:]
    assert tries["config_service_down"] == ("failed", 2), output[-5000:]
    assert "No module named 'pandas_calibration_tables'" in output
    assert "cannot reach the config service at cfg.internal:8443" in output
