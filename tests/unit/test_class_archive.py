"""The class-data-sharing archive's name and option (building one is exercised by every Spark test
session: tests/conftest.py builds it before the first driver starts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_streaming import class_archive


def test_the_key_names_the_jdk_and_the_jars(tmp_path, monkeypatch):
    import pyspark

    key = class_archive.archive_key()
    assert len(key) == 16 and key == class_archive.archive_key()
    fake = tmp_path / "pyspark"
    (fake / "jars").mkdir(parents=True)
    (fake / "jars" / "a.jar").write_bytes(b"x")
    monkeypatch.setattr(pyspark, "__file__", str(fake / "__init__.py"))
    other = class_archive.archive_key()
    assert other != key
    (fake / "jars" / "a.jar").write_bytes(b"xy")  # another size: another archive
    assert class_archive.archive_key() != other


def test_the_option_names_an_existing_archive_only(tmp_path, monkeypatch):
    monkeypatch.setenv(class_archive.ENV_DIR, str(tmp_path))
    path = class_archive.default_path()
    assert path.parent == tmp_path and path.name.startswith("spark-") and path.suffix == ".jsa"
    assert class_archive.java_option() == ""
    path.write_bytes(b"archive")
    assert class_archive.java_option() == f"-XX:SharedArchiveFile={path}"
    assert class_archive.java_option(tmp_path / "missing.jsa") == ""


def test_an_existing_archive_is_not_rebuilt_and_a_failed_build_says_why(tmp_path, monkeypatch):
    existing = tmp_path / "spark-x.jsa"
    existing.write_bytes(b"archive")
    assert class_archive.build(existing) == existing  # no JVM started: it is already there
    monkeypatch.setattr(class_archive, "_WORKLOAD", "raise SystemExit('no JVM here')")
    with pytest.raises(RuntimeError, match=r"spark-y.jsa failed \(exit 1\).*no JVM here"):
        class_archive.build(tmp_path / "spark-y.jsa")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".build.lock", "spark-x.jsa"]  # no partial left


def test_the_cli_prints_the_option(tmp_path, monkeypatch, capsys):
    archive = tmp_path / "a.jsa"
    archive.write_bytes(b"archive")
    assert class_archive.main(["option", "--path", str(archive)]) == 0
    assert capsys.readouterr().out.strip() == f"-XX:SharedArchiveFile={archive}"
    assert os.path.isfile(Path(archive))


def test_a_failed_archive_build_stops_the_spark_tests_with_the_cause_and_the_way_out(tmp_path):
    """It used to be a warning: the Spark tests then ran ~6 s slower per driver start, unseen."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-jdk"), class_archive.ENV_DIR: str(tmp_path / "archives")}
    env.pop("AIRFLOW_STREAMING_TEST_CLASS_ARCHIVE", None)
    probe = root / "tests" / "unit" / "data" / "probes" / "spark_marked_probe.py"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", str(probe)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stdout[-2000:]
    assert "could not be built" in done.stdout and "AIRFLOW_STREAMING_TEST_CLASS_ARCHIVE=0" in done.stdout
    assert "1 passed" not in done.stdout
    off = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", str(probe)], cwd=root,
                         env={**env, "AIRFLOW_STREAMING_TEST_CLASS_ARCHIVE": "0"}, capture_output=True, text=True,
                         timeout=300)
    assert off.returncode == 0 and "1 passed" in off.stdout, off.stdout[-2000:]
