"""Provider metadata read by Airflow's ProvidersManager through the ``apache_airflow_provider`` entry point.

Validated against Airflow's own ``provider_info.schema.json`` by ``tests/unit/test_provider_info.py``.
"""

from __future__ import annotations

from typing import Any

from airflow_streaming import __version__
from airflow_streaming.config import provider_config


def get_provider_info() -> dict[str, Any]:
    """The provider's description: modules, notifications, its ``[airflow_streaming]`` config section.

    ``connection-types`` is empty on purpose: the provider defines none of its own. It uses the
    ``spark`` connection type of apache-airflow-providers-apache-spark (master, deploy mode, queue,
    namespace), ``webhdfs`` for HDFS control/checkpoint storage (the HDFS provider's form, optional),
    ``http`` / ``smtp`` / ``slackwebhook`` for notifications (docs/connections.md). Extra links are
    listed by the UI (``airflow_streaming.ui.links``); its plugin registers through the
    ``airflow.plugins`` entry point (listing it here too would register it twice).
    """
    return {
        "package-name": "airflow-streaming",
        "name": "Spark Structured Streaming lifecycle",
        "description": "Deploy, watch, stop, restart and upgrade Spark Structured Streaming jobs from Airflow DAGs.",
        "versions": [__version__],
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
                    "airflow_streaming.operators.deferral",
                ],
            }
        ],
        "sensors": [
            {"integration-name": "Spark Structured Streaming", "python-modules": ["airflow_streaming.sensors.progress", "airflow_streaming.sensors.health"]}
        ],
        "hooks": [
            {"integration-name": "Spark Structured Streaming",
             "python-modules": ["airflow_streaming.hooks.streaming_job", "airflow_streaming.hooks.submission",
                                "airflow_streaming.hooks.liveness", "airflow_streaming.hooks.stopping",
                                "airflow_streaming.hooks.spark_connection", "airflow_streaming.hooks.storage_retry"]}
        ],
        "triggers": [
            {"integration-name": "Spark Structured Streaming", "python-modules": ["airflow_streaming.triggers.completeness",
                                                                                   "airflow_streaming.triggers.health",
                                                                                   "airflow_streaming.triggers.lifecycle",
                                                                                   "airflow_streaming.triggers.progress"]}
        ],
        "extra-links": ["airflow_streaming.ui.links.SparkUILink", "airflow_streaming.ui.links.StreamDashboardLink"],
        "notifications": [
            "airflow_streaming.notifications.http_provider.StreamHttpNotifier",
            "airflow_streaming.notifications.smtp_provider.StreamSmtpNotifier",
            "airflow_streaming.notifications.slack_provider.StreamSlackWebhookNotifier",
        ],
        "connection-types": [],
        "plugins": [],
        "config": provider_config(),
    }
