"""Run the bundled stateful job (device signal aggregation) as a long-lived stream.

``device_signals_deploy``: deploy the stream, wait until it makes progress (fails fast if it is
already running or its driver dies while starting) and until its health verdict is HEALTHY or IDLE. ``device_signals_stop``: stop it gracefully at a
micro-batch boundary; the report (last committed batch, clean checkpoint) is in the task's XCom.
Trigger them from the UI; paths default under ``$AIRFLOW_STREAMING_DEMO_ROOT``.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import DAG

from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.operators.stop import SparkStreamStopOperator
from airflow_streaming.sensors.health import SparkStreamHealthSensor
from airflow_streaming.sensors.progress import SparkStreamProgressSensor

ROOT = os.environ.get("AIRFLOW_STREAMING_DEMO_ROOT", "/tmp/airflow-streaming-demo")
SPEC: dict[str, Any] = {
    "name": "device-signals",
    "application": "device_signals",
    "version": "v1",
    "checkpoint_location": f"{ROOT}/checkpoints/device-signals",
    "control_location": f"{ROOT}/control",
    "master": "local[2]",
    "trigger_interval": "5 seconds",
    "application_args": ["--input", f"{ROOT}/signals-input", "--output", f"{ROOT}/signals-output",
                         "--window", "1 minute", "--watermark", "30 seconds"],
    "spark_conf": {"spark.sql.shuffle.partitions": 4},
}

with DAG(dag_id="device_signals_deploy", schedule=None, catchup=False, tags=["airflow-streaming", "example"],
         doc_md=__doc__) as deploy_dag:
    # Healthy (or idle) once it made progress; deferred to the triggerer while it waits (no worker slot).
    SparkStreamDeployOperator(task_id="deploy", spec=SPEC) >> SparkStreamProgressSensor(
        task_id="wait_for_progress", spec=SPEC, min_batches=1, poke_interval=5, timeout=900
    ) >> SparkStreamHealthSensor(task_id="healthy", spec=SPEC, health_mode="wait_healthy", deferrable=True,
                               poke_interval=10, timeout=600)

with DAG(dag_id="device_signals_stop", schedule=None, catchup=False, tags=["airflow-streaming", "example"],
         doc_md=__doc__) as stop_dag:
    SparkStreamStopOperator(task_id="stop", spec=SPEC)
