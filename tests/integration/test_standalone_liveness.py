"""Driver liveness cross-checked with a real Spark standalone master and worker (started from spark-class)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from airflow_streaming.hooks.spark_master import app_state
from spark_jobs.event_generator import generate_events
from standalone_cluster import class_archive_conf, class_archive_option
from streams import wait_for
import stream_actions

pytestmark = pytest.mark.spark


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def standalone(tmp_path):
    """A standalone master and a 1-core worker on loopback; both stopped by pid at the end."""
    spark_class = os.path.join(os.path.dirname(sys.executable), "spark-class")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp_path),
           "SPARK_DAEMON_JAVA_OPTS": class_archive_option()}
    procs = [subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env, start_new_session=True,
                              stdout=open(tmp_path / "master.log", "wb"), stderr=subprocess.STDOUT)]
    try:
        url = f"http://127.0.0.1:{ui}"
        wait_for(lambda: _json(url) is not None, 60, "the master's web UI")
        procs.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker",
                                       f"spark://127.0.0.1:{port}", "--cores", "1", "--memory", "1g",
                                       "--webui-port", str(worker_ui)], env=env, start_new_session=True,
                                      stdout=open(tmp_path / "worker.log", "wb"), stderr=subprocess.STDOUT))
        wait_for(lambda: (_json(url) or {}).get("aliveworkers") == 1, 60, "the worker to register")
        yield {"master": f"spark://127.0.0.1:{port}", "ui": url}
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)


def _json(url: str):
    try:
        with urllib.request.urlopen(f"{url}/json/", timeout=2) as resp:
            return json.load(resp)
    except OSError:
        return None


def test_liveness_comes_from_the_master_and_a_killed_driver_is_failed(streams, standalone):
    generate_events(streams.path("input", "etl"), count=100, run="sa")
    spec = streams.etl_spec(master=standalone["master"], master_ui_url=standalone["ui"],
                            spark_conf={"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "false",
                                        "spark.cores.max": "1", "spark.executor.memory": "512m",
                                        **class_archive_conf()})
    hook = streams.hook(spec)
    record = stream_actions.submit(hook)
    doc = hook.wait_until_ready(record)
    assert doc.app_id.startswith("app-"), doc.app_id  # a standalone application, not local-*
    cluster = app_state(standalone["ui"], doc.app_id)
    assert cluster.active is True and cluster.state == "RUNNING"
    verdict = hook.health()
    assert verdict.state.value in ("HEALTHY", "IDLE"), verdict.summary()
    assert verdict.metrics["cluster"] == f"standalone master reports app {doc.app_id} RUNNING"

    os.killpg(record.submit_pid, signal.SIGKILL)
    wait_for(lambda: app_state(standalone["ui"], doc.app_id).active is False, 60, "the master to end the app")
    verdict = hook.health()
    assert verdict.state.value == "FAILED" and verdict.reasons[0].code == "DRIVER_GONE"
    assert "standalone master reports app" in verdict.reasons[0].message
