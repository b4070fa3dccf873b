"""docker-compose.yaml is a valid Compose file (checked by docker-compose itself, no engine needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose (Debian package) not installed")
def test_compose_file_is_valid():
    out = subprocess.run(["docker-compose", "-f", str(REPO / "docker-compose.yaml"), "config", "--services"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert set(out.stdout.split()) == {"spark-master", "spark-worker", "airflow"}
