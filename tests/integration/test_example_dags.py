"""The example DAGs import cleanly and Airflow discovers the provider.

The lifecycle demo DAG runs under `airflow dags test` against the BUILT wheel, with the DAG taken from the
built sdist: tests/integration/test_built_package.py (it ran here against the checkout before; same checks).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_example_dags_import_without_errors():
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert {"streaming_lifecycle_demo", "device_signals_deploy", "device_signals_stop",
            "stream_supervisor", "stream_upgrade_window", "stream_operations", "own_job_deploy",
            "own_job_stop"} <= set(bag.dag_ids)
    demo = bag.dags["streaming_lifecycle_demo"]
    assert [t.task_id for t in demo.topological_sort()][:3] == ["feed_phase1", "deploy", "wait_phase1"]


def test_periods_report_dag_is_scheduled_on_the_demo_streams_completeness_asset():
    """The downstream DAG runs on the Asset whose watcher is the completeness trigger over the demo's stream (the
    spec its deploy task deploys), with an hourly rule: the stream runs events_etl with a watermark."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag
    from airflow.sdk import Asset

    from airflow_streaming.triggers.completeness import SparkStreamCompletenessTrigger

    bag = DagBag(dag_folder=str(REPO / "dags"))
    report = bag.dags["events_etl_demo_periods_report"]
    assets = list(report.timetable.asset_condition.objects)
    assert len(assets) == 1 and isinstance(assets[0], Asset)
    [watcher] = assets[0].watchers
    trigger = watcher.trigger
    assert isinstance(trigger, SparkStreamCompletenessTrigger)
    deploy = bag.dags["streaming_lifecycle_demo"].get_task("deploy")
    assert trigger.spec["name"] == deploy.spec["name"] == "events-etl-demo"
    assert trigger.spec["control_location"] == deploy.spec["control_location"]
    assert trigger.parsed_rule.period == "hourly" and not trigger.parsed_rule.by_batches
    args = deploy.spec["application_args"]
    assert args[args.index("--watermark") + 1] == "10 minutes"
    assert [t.task_id for t in report.tasks] == ["report_periods"]


def test_provider_is_discovered_by_airflow():
    from airflow.providers_manager import ProvidersManager

    info = ProvidersManager().providers["airflow-streaming"].data
    assert "airflow_streaming.operators.deploy" in info["operators"][0]["python-modules"]
