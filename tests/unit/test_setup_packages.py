"""What ``scripts/setup_env.sh`` installs with apt-get (issue 34): the test command installs the test suite's
Chromium and docker-compose when missing, the demo (``AIRFLOW_STREAMING_SETUP_TEST_PACKAGES=0``, set by
``scripts/demo.sh``) installs none of them.

The real script runs with a PATH that holds only the tools it uses (so Chromium and docker-compose are
"missing" even on a machine that has them) and an ``apt-get`` that records its arguments; the venv is
marked installed (the stamp the script itself checks), so nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("bash", "ls", "sed", "head", "cut", "id", "cat", "sha256sum", "rm", "touch", "grep")


@pytest.fixture
def sandbox(tmp_path):
    """A copy of the files the script reads, its venv stamped as installed, and a PATH of plain tools."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("scripts/setup_env.sh", "scripts/demo.sh", "pyproject.toml", "constraints.txt"):
        shutil.copy(REPO / name, repo / name)
    stamp = hashlib.sha256((repo / "pyproject.toml").read_bytes() + (repo / "constraints.txt").read_bytes())
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / f".installed-{stamp.hexdigest()[:16]}").touch()
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (tools / tool).symlink_to(found)
    (tools / "python3").symlink_to(sys.executable)
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH (the script checks it first)")
    (tools / "java").symlink_to(java)
    log = tmp_path / "apt-get.log"
    (tools / "apt-get").write_text(f"#!{shutil.which('bash')}\necho \"$*\" >> {log}\n")
    (tools / "apt-get").chmod(0o755)
    return repo, tools, log


def _source(sandbox, prelude: str) -> tuple[subprocess.CompletedProcess, str]:
    repo, tools, log = sandbox
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "AIRFLOW_STREAMING_SETUP_TEST_PACKAGES")}
    env["PATH"] = str(tools)
    run = subprocess.run([str(tools / "bash"), "-c", f"{prelude}source scripts/setup_env.sh && echo sourced"],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    return run, log.read_text() if log.exists() else ""


def test_the_test_command_installs_the_test_packages(sandbox):
    if os.geteuid() != 0:
        pytest.skip("the script installs with apt-get only as root or with passwordless sudo")
    run, installs = _source(sandbox, "")
    assert run.returncode == 0 and "sourced" in run.stdout, run.stderr
    assert "install" in installs and "chromium" in installs and "docker-compose" in installs
    assert "docker-compose is missing" in run.stderr


def test_the_demo_installs_none_of_them(sandbox):
    run, installs = _source(sandbox, "AIRFLOW_STREAMING_SETUP_TEST_PACKAGES=0\n")
    assert run.returncode == 0 and "sourced" in run.stdout, run.stderr
    assert installs == "" and "docker-compose" not in run.stderr


def test_demo_sh_sets_it_before_it_sources_the_setup():
    text = (REPO / "scripts" / "demo.sh").read_text()
    assert 0 <= text.index("AIRFLOW_STREAMING_SETUP_TEST_PACKAGES=0\n") < text.index("source scripts/setup_env.sh")
