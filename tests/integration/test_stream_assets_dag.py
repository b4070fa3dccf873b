"""A stream's declared sinks are Airflow Assets: a real deploy under ``airflow dags test`` records an asset
event for each sink, naming the stream, version and run (issue 37, "the stream as an Asset").

Real Airflow (the suite's metadata DB, the DAGs folder parsed and serialized by ``airflow dags test``), a real
local Spark driver started by the deploy task and stopped by the DAG's stop task.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from signals import Feeder

pytestmark = [pytest.mark.spark, pytest.mark.airflow]

DAG_FILE = """
from airflow.sdk import DAG, Asset

from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.operators.stop import SparkStreamStopOperator

SPEC = {spec}

with DAG("stream_assets_deploy", schedule=None):
    deploy = SparkStreamDeployOperator(task_id="deploy", spec=SPEC,
                                       outlets=[Asset(name="kept", uri="x-team://kept")])
    stop = SparkStreamStopOperator(task_id="stop", spec=SPEC)
    deploy >> stop
"""


def test_a_deploy_records_an_asset_event_for_each_sink(streams, airflow_db, tmp_path):
    sinks = [Path(streams.path("output", "assets")).as_uri(), "s3://lake/assets/"]
    spec = streams.etl_spec("assets", assets={"sources": [Path(streams.path("input", "assets")).as_uri()],
                                              "sinks": sinks})
    streams.hook(spec)  # cleanup by pid, whatever happens
    Feeder(streams.path("input", "assets")).feed(20)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "stream_assets_deploy.py").write_text(DAG_FILE.format(spec=repr(spec.to_dict())))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "stream_assets_deploy"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]

    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(select(AssetModel.uri, AssetEvent.source_task_id, AssetEvent.source_dag_id,
                                      AssetEvent.extra)
                               .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                               .where(AssetEvent.source_dag_id == "stream_assets_deploy")).all()
    events = {uri: (task_id, extra) for uri, task_id, _, extra in rows}
    # one event per sink (normalised as Airflow normalises it), and the author's own outlet, from the deploy
    assert sorted(events) == sorted([spec.assets["sinks"][0], "s3://lake/assets", "x-team://kept"]), rows
    assert len(rows) == 3, rows
    for uri in spec.assets["sinks"]:
        task_id, extra = events[uri]
        assert task_id == "deploy"
        assert extra["stream"] == "assets" and extra["version"] == "v1" and extra["run_id"], extra
    assert "stream" not in events["x-team://kept"][1]  # an outlet the spec does not declare keeps its own extra
    # the stop task stopped the driver
    hook = streams.hook(spec)
    record = hook.driver_record()
    assert record is None or not hook.alive(record)
