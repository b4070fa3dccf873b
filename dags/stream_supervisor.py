"""Supervise the example streams every minute: restart failed drivers from their checkpoints per the
restart policy, give up once on deterministic failures, notify on every state change.

Notifications go to a webhook when ``AIRFLOW_STREAMING_WEBHOOK_URL`` is set (Slack-compatible
payload) and by e-mail through the ``smtp_default`` connection when ``AIRFLOW_STREAMING_ALERT_EMAIL`` is.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_streaming.operators.supervise import SparkStreamSupervisorOperator

ROOT = os.environ.get("AIRFLOW_STREAMING_DEMO_ROOT", "/tmp/airflow-streaming-demo")
STREAMS = [f"{os.path.dirname(__file__)}/specs/device_signals.yaml"]

notifiers = []
if os.environ.get("AIRFLOW_STREAMING_WEBHOOK_URL"):
    from airflow_streaming.notifications import StreamHttpNotifier

    notifiers.append(StreamHttpNotifier(url=os.environ["AIRFLOW_STREAMING_WEBHOOK_URL"], payload_format="slack"))
if os.environ.get("AIRFLOW_STREAMING_ALERT_EMAIL"):
    from airflow_streaming.notifications import StreamSmtpNotifier

    notifiers.append(StreamSmtpNotifier(to=[os.environ["AIRFLOW_STREAMING_ALERT_EMAIL"]]))

with DAG(dag_id="stream_supervisor", schedule="* * * * *", start_date=datetime(2026, 1, 1), catchup=False,
         max_active_runs=1, tags=["airflow-streaming", "example"], doc_md=__doc__):
    SparkStreamSupervisorOperator(
        task_id="supervise", specs=STREAMS, notifiers=notifiers,
        restart_policy={"max_attempts": 5, "validity_interval_s": 3600, "backoff_initial_s": 10,
                        "backoff_max_s": 300, "reset_after_healthy_s": 600},
    )
