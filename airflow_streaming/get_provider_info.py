"""Provider metadata read by Airflow's ProvidersManager through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-streaming",
        "name": "Spark Structured Streaming lifecycle",
        "description": "Deploy, watch, stop, restart and upgrade Spark Structured Streaming jobs from Airflow DAGs.",
        "versions": ["0.1.0"],
        "integrations": [
            {
                "integration-name": "Spark Structured Streaming",
                "external-doc-url": "https://spark.apache.org/docs/latest/streaming/index.html",
                "tags": ["apache"],
            }
        ],
        "operators": [
            {
                "integration-name": "Spark Structured Streaming",
                "python-modules": [
                    "airflow_streaming.operators.deploy",
                    "airflow_streaming.operators.stop",
                    "airflow_streaming.operators.compat",
                    "airflow_streaming.operators.supervise",
                    "airflow_streaming.operators.lifecycle",
                ],
            }
        ],
        "sensors": [
            {"integration-name": "Spark Structured Streaming", "python-modules": ["airflow_streaming.sensors.progress", "airflow_streaming.sensors.health"]}
        ],
        "hooks": [
            {"integration-name": "Spark Structured Streaming", "python-modules": ["airflow_streaming.hooks.streaming_job"]}
        ],
        "triggers": [
            {"integration-name": "Spark Structured Streaming", "python-modules": ["airflow_streaming.triggers.health"]}
        ],
        "extra-links": ["airflow_streaming.ui.links.SparkUILink", "airflow_streaming.ui.links.StreamDashboardLink"],
        "notifications": [
            "airflow_streaming.notifications.webhook.StreamWebhookNotifier",
            "airflow_streaming.notifications.email.StreamEmailNotifier",
        ],
    }
