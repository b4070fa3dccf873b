"""Other Spark lines for tests: a runtime is a venv with one pyspark, at
``~/.cache/airflow-streaming/runtimes/pyspark-<version>/`` (``AIRFLOW_STREAMING_RUNTIMES_DIR`` overrides the
parent directory). One JVM per process: code runs in another line only in a child process of its python.

A test that needs a runtime skips, naming the missing directory and how to build it, unless
``AIRFLOW_STREAMING_REQUIRE_RUNTIMES=1`` (CI installs the runtimes): then it fails instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SPARK_35 = "3.5.7"
ARCHIVE_OPTIONS = ("-XX:SharedArchiveFile", "-Xshare")


def runtimes_dir() -> Path:
    return Path(os.environ.get("AIRFLOW_STREAMING_RUNTIMES_DIR")
                or Path.home() / ".cache" / "airflow-streaming" / "runtimes")


@dataclass(frozen=True)
class Runtime:
    version: str
    python: str

    @property
    def spark_home(self) -> str:
        return str(next(Path(self.python).parent.parent.glob("lib/python3*/site-packages/pyspark")))

    @property
    def spark_submit(self) -> str:
        return os.path.join(self.spark_home, "bin", "spark-submit")

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a child on this runtime: its own python for the driver and the workers, our
        repository first on the path, no SPARK_HOME of another line."""
        env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYSPARK_GATEWAY_PORT",
                                                               "PYSPARK_GATEWAY_SECRET")}
        if os.path.abspath(self.python) != os.path.abspath(sys.executable):  # venvs: never resolve the symlink
            # The tests' class-data-sharing archive holds this interpreter's Spark classes: another line's JVM
            # cannot map it and says so on stdout (which the gate's --json answer shares).
            opts = [o for o in env.get("SPARK_SUBMIT_OPTS", "").split() if not o.startswith(ARCHIVE_OPTIONS)]
            env["SPARK_SUBMIT_OPTS"] = " ".join(opts)
        env.update(PYSPARK_PYTHON=self.python, PYSPARK_DRIVER_PYTHON=self.python, PYTHONPATH=str(REPO),
                   SPARK_LOCAL_IP="127.0.0.1", **extra)
        return env

    def run(self, argv: list[str], timeout: float = 300, log: Path | None = None,
            **env: str) -> subprocess.CompletedProcess:
        """Run ``python argv...`` of this runtime; its output goes to ``log`` too."""
        started = time.monotonic()
        proc = subprocess.run([self.python, *argv], env=self.env(**env), capture_output=True, text=True,
                              timeout=timeout)
        if log is not None:
            log.write_text(f"$ {self.python} {' '.join(argv)}\n# {time.monotonic() - started:.1f}s, "
                           f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc


def current_runtime() -> Runtime:
    import pyspark

    return Runtime(pyspark.__version__, sys.executable)


def runtime(version: str) -> Runtime:
    """The runtime of pyspark ``version``, or skip (fail with AIRFLOW_STREAMING_REQUIRE_RUNTIMES=1)."""
    root = runtimes_dir() / f"pyspark-{version}"
    python = root / "bin" / "python"
    if not python.exists():
        reason = (f"Spark runtime pyspark {version} is not installed at {root} (build it: python3 -m venv "
                  f"{root}.tmp && {root}.tmp/bin/python -m pip install pyspark=={version} && mv {root}.tmp {root})")
        if os.environ.get("AIRFLOW_STREAMING_REQUIRE_RUNTIMES") == "1":
            pytest.fail(f"AIRFLOW_STREAMING_REQUIRE_RUNTIMES=1 but {reason}")
        pytest.skip(reason)
    return Runtime(version, str(python))


def run_gate(rt: Runtime, checkpoint: Path, application: Path, args: list[str], log: Path) -> dict:
    """``python -m airflow_streaming.compat --json`` (with its dry run) in ``rt``: the report, or the error."""
    proc = rt.run(["-m", "airflow_streaming.compat", "--json", "--master", "local[2]", "--checkpoint", str(checkpoint),
                   "--application", str(application), "--", *args], log=log)
    try:
        answer = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"the gate in Spark {rt.version} printed no JSON (exit {proc.returncode}): "
                             f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}") from None
    answer["exit_code"] = proc.returncode
    return answer
