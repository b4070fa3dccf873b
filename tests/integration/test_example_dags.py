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


def test_provider_is_discovered_by_airflow():
    from airflow.providers_manager import ProvidersManager

    info = ProvidersManager().providers["airflow-streaming"].data
    assert "airflow_streaming.operators.deploy" in info["operators"][0]["python-modules"]
