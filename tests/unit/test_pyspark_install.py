"""Where only pyspark-client is installed (no Spark jars), what starts Spark says which extra to install.

A stand-in for a pyspark-client-only environment: a ``pyspark`` package without ``jars/`` placed first on
the child's PYTHONPATH. The real one (a fresh venv with the built wheel and no extra) is
tests/integration/test_built_package.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from airflow_streaming.pyspark_install import full_pyspark_missing, install_hint

REPO = Path(__file__).resolve().parents[2]


def _client_only_env(tmp_path: Path) -> dict[str, str]:
    shadow = tmp_path / "client-only"
    (shadow / "pyspark").mkdir(parents=True)
    (shadow / "pyspark" / "__init__.py").write_text("")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), str(REPO)])}


def test_the_suites_environment_has_the_full_pyspark():
    assert full_pyspark_missing() is None


def test_the_hint_names_the_extra_at_the_installed_client_version():
    assert install_hint() == f'pip install "airflow-streaming[pyspark]" "pyspark=={version("pyspark-client")}"'


def test_client_only_is_detected(tmp_path):
    out = subprocess.run([sys.executable, "-c", "from airflow_streaming.pyspark_install import full_pyspark_missing;"
                          "print(full_pyspark_missing())"], env=_client_only_env(tmp_path), capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert "has no Spark jars (only pyspark-client is installed" in out


def test_compatibility_check_without_spark_names_the_extra(tmp_path):
    answer = tmp_path / "answer.json"
    proc = subprocess.run([sys.executable, "-m", "airflow_streaming.compat", "--json", "--checkpoint",
                           str(tmp_path / "ckpt"), "--application", "events_etl", "--report-to", str(answer),
                           "--report-id", "r1"], env=_client_only_env(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert "the compatibility check starts Spark" in error and install_hint() in error
    # the detached check (a deferred upgrade waits for this file) gets the same answer
    assert json.loads(answer.read_text()) == {"id": "r1", "error": error}


def test_class_archive_without_spark_names_the_extra(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "airflow_streaming.class_archive", "build", "--path",
                           str(tmp_path / "a.jsa")], env=_client_only_env(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "airflow-streaming[pyspark]" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "a.jsa").exists()
