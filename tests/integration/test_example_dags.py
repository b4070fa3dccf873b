"""The example DAGs import cleanly, and the lifecycle DAG passes under `airflow dags test`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_streaming.control.contract import DriverRecord

REPO = Path(__file__).resolve().parents[2]


def test_example_dags_import_without_errors():
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert {"streaming_lifecycle_demo", "device_signals_deploy", "device_signals_stop",
            "stream_supervisor", "stream_upgrade_window", "stream_operations"} <= set(bag.dag_ids)
    demo = bag.dags["streaming_lifecycle_demo"]
    assert [t.task_id for t in demo.topological_sort()][:3] == ["feed_phase1", "deploy", "wait_phase1"]


def test_provider_is_discovered_by_airflow():
    from airflow.providers_manager import ProvidersManager

    info = ProvidersManager().providers["airflow-streaming"].data
    assert "airflow_streaming.operators.deploy" in info["operators"][0]["python-modules"]


@pytest.mark.spark
@pytest.mark.airflow
def test_lifecycle_dag_passes_under_airflow_dags_test(tmp_path):
    root = tmp_path / "demo"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
        "AIRFLOW_STREAMING_DEMO_ROOT": str(root),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    airflow = [sys.executable, "-m", "airflow"]
    subprocess.run([*airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    try:
        run = subprocess.run([*airflow, "dags", "test", "streaming_lifecycle_demo"], env=env,
                             capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
        summary = json.loads((root / "summary.json").read_text())
        assert summary["exactly_once"] and summary["duplicates"] == summary["missing"] == 0
        assert [p["rows_out"] for p in summary["phases"]] == [p["valid_in"] for p in summary["phases"]] == [1500, 1000]
        assert summary["quarantined_total"] == 50
        assert all(s["graceful"] and s["clean"] for s in summary["stops"])
        assert summary["restart_continued_at_batch"] == summary["stops"][0]["last_committed_batch"] + 1
    finally:
        subprocess.run([sys.executable, "-m", "airflow_streaming.stop_all", str(root / "control")], timeout=120)
        record = root / "control" / "events-etl-demo" / "driver.json"
        if record.exists():  # the last driver is gone after stop_all (a zombie awaiting its reaper counts as gone)
            pid = DriverRecord.from_json(str(record), record.read_bytes()).submit_pid
            assert pid, record.read_text()
            assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
