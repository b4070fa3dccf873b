"""A lifecycle refusal is printed once in the task log (issue 21: "the same refusal message is printed
four times in one task log").

A refused upgrade under real ``airflow dags test`` (no Spark: the stream is a control directory as
after a real run, whose checkpoint is missing - the upgrade refuses before any gate runs). Before,
its reason was printed four times: the runner's REFUSED step line, the operator re-logging every
step, and the task's exception twice (the provider's error chained under Airflow's fail exception).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from control_fixtures import deployed_stream

DAG_FILE = '''
from datetime import datetime
from airflow.sdk import DAG
from airflow_streaming.operators.lifecycle import SparkStreamUpgradeOperator

with DAG("upgrade_refused_once", schedule=None, start_date=datetime(2026, 1, 1)):
    SparkStreamUpgradeOperator(task_id="upgrade", spec={spec!r}, deferrable=False)
'''


@pytest.mark.airflow
def test_a_refused_upgrade_prints_its_reason_once_in_the_task_log(tmp_path, airflow_db):
    spec, _ = deployed_stream(tmp_path, with_checkpoint=False)
    target = spec.with_version("v2", application="device_signals_v2").to_dict()
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "upgrade_refused_once.py").write_text(textwrap.dedent(DAG_FILE.format(spec=target)))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "upgrade_refused_once"], env=env,
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    log = run.stdout + run.stderr
    assert run.returncode != 0, log[-4000:]
    reason = "does not exist, but the stream has run on it"
    assert log.count(reason) == 1, log[-6000:]
    # Still all there: the step as it happened, the outcome with its reason, where it was raised, and what.
    assert ": REFUSED" in log and "upgrade of s1 to v2 ended REFUSED: the checkpoint" in log
    assert "raise LifecycleOutcomeError(result)" in log
    assert "LifecycleOutcomeError: a permanent failure, not retried" in log
