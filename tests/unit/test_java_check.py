"""A missing or too old Java is reported with what to install, by the setup script and by the deployer."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from airflow_streaming.exceptions import JavaNotFoundError
from airflow_streaming.hooks.streaming_job import check_java

REPO = Path(__file__).resolve().parents[2]


def _fake_java(tmp_path: Path, version_line: str) -> Path:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return home


def test_deployer_names_the_missing_java(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(JavaNotFoundError, match=r"JAVA_HOME=.*no-jdk has no bin/java; install Java 17 "
                                                r"\(Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless\)"):
        check_java()


def test_deployer_rejects_java_11(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, 'openjdk version "11.0.2" 2019-01-15')))
    with pytest.raises(JavaNotFoundError, match="needs Java 17 or newer, .* is version 11"):
        check_java()


def test_deployer_accepts_the_machines_java():
    assert os.access(check_java(), os.X_OK)


@pytest.mark.parametrize("version_line, expected", [
    (None, "was not found"),
    ('openjdk version "1.8.0_292"', "is version '1.8.0_292'"),
])
def test_setup_script_says_what_to_install(tmp_path, version_line, expected):
    home = tmp_path / "no-jdk" if version_line is None else _fake_java(tmp_path, version_line)
    out = subprocess.run(["bash", "-c", "source scripts/setup_env.sh"], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "JAVA_HOME": str(home)}, timeout=60)
    assert out.returncode == 1
    assert expected in out.stderr and "apt-get install -y openjdk-17-jre-headless" in out.stderr
