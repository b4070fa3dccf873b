"""A team's own script with its dependencies, deployed as a stream (README "Your job's dependencies").

``own_job_deploy``: deploy ``own_job/orders_dedup.py`` - a script that imports ``enrich`` (shipped with
``py_files``) and reads ``sites.csv`` (shipped with ``files``), with its own 30-second trigger - then wait
until it is healthy, judged by that trigger. ``own_job_stop``: stop it at a micro-batch boundary. Its input
directory is ``$AIRFLOW_STREAMING_DEMO_ROOT/orders-input`` (JSON events, e.g. from
``spark_jobs.event_generator``). ``tests/integration/test_own_job.py`` runs this shape end to end.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.operators.stop import SparkStreamStopOperator
from airflow_streaming.sensors.health import SparkStreamHealthSensor

ROOT = os.environ.get("AIRFLOW_STREAMING_DEMO_ROOT", "/tmp/airflow-streaming-demo")
TEAM = Path(__file__).resolve().parent / "own_job"  # the team's files (.airflowignore keeps them out of parsing)
SPEC: dict[str, Any] = {
    "name": "orders-dedup",
    "application": str(TEAM / "orders_dedup.py"),
    "version": "v1",
    "checkpoint_location": f"{ROOT}/checkpoints/orders-dedup",
    "control_location": f"{ROOT}/control",
    "master": "local[2]",
    "py_files": [str(TEAM / "lib" / "enrich.py")],
    "files": [str(TEAM / "data" / "sites.csv")],
    "application_args": ["--input", f"{ROOT}/orders-input", "--output", f"{ROOT}/orders-output",
                         "--checkpoint", f"{ROOT}/checkpoints/orders-dedup"],
    "spark_conf": {"spark.sql.shuffle.partitions": 2},
}

with DAG(dag_id="own_job_deploy", schedule=None, catchup=False, tags=["airflow-streaming", "example"],
         doc_md=__doc__) as deploy_dag:
    SparkStreamDeployOperator(task_id="deploy", spec=SPEC) >> SparkStreamHealthSensor(
        task_id="healthy", spec=SPEC, health_mode="wait_healthy", deferrable=True, poke_interval=10, timeout=600)

with DAG(dag_id="own_job_stop", schedule=None, catchup=False, tags=["airflow-streaming", "example"],
         doc_md=__doc__) as stop_dag:
    SparkStreamStopOperator(task_id="stop", spec=SPEC)
