"""Supervise the example stream every minute: restart a failed driver from its checkpoint per the
restart policy, give up once on a deterministic failure, notify on every state change.

It watches ``device-signals``, the stream that ``device_signals_deploy`` (``device_signals_stream.py``)
deploys, with the same spec (paths under ``$AIRFLOW_STREAMING_DEMO_ROOT``, default
``/tmp/airflow-streaming-demo``); list your own streams in ``specs`` (specs, dicts or YAML paths).

Notifications go to a webhook when ``AIRFLOW_STREAMING_WEBHOOK_URL`` is set (Slack-compatible
payload) and by e-mail through the ``smtp_default`` connection when ``AIRFLOW_STREAMING_ALERT_EMAIL`` is.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from airflow.sdk import DAG

from airflow_streaming.operators.supervise import SparkStreamSupervisorOperator

ROOT = os.environ.get("AIRFLOW_STREAMING_DEMO_ROOT", "/tmp/airflow-streaming-demo")
# The spec of device_signals_stream.py's stream (tests/unit/test_example_dags_agree.py keeps the two equal).
DEVICE_SIGNALS: dict[str, Any] = {
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
STREAMS = [DEVICE_SIGNALS]

notifiers = []
if os.environ.get("AIRFLOW_STREAMING_WEBHOOK_URL"):
    from airflow_streaming.notifications import StreamHttpNotifier

    notifiers.append(StreamHttpNotifier(url=os.environ["AIRFLOW_STREAMING_WEBHOOK_URL"], payload_format="slack"))
if os.environ.get("AIRFLOW_STREAMING_ALERT_EMAIL"):
    from airflow_streaming.notifications import StreamSmtpNotifier

    notifiers.append(StreamSmtpNotifier(to=[os.environ["AIRFLOW_STREAMING_ALERT_EMAIL"]]))

with DAG(dag_id="stream_supervisor", schedule="* * * * *", start_date=datetime(2026, 1, 1), catchup=False,
         max_active_runs=1, tags=["airflow-streaming", "example"], doc_md=__doc__) as dag:
    SparkStreamSupervisorOperator(
        task_id="supervise", specs=STREAMS, notifiers=notifiers,
        restart_policy={"max_attempts": 5, "validity_interval_s": 3600, "backoff_initial_s": 10,
                        "backoff_max_s": 300, "reset_after_healthy_s": 600},
    )
