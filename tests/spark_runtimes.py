"""Other Spark lines for tests: a runtime is a venv with one pyspark, resolved (and built once per host) by
``airflow_streaming.spark_runtime`` as for a stream version that names it (``$AIRFLOW_STREAMING_RUNTIMES``,
default ``~/.cache/airflow-streaming/runtimes/pyspark-<version>/``). One JVM per process: code runs in
another line only in a child process of its python.
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

from airflow_streaming.spark_runtime import without_class_archive

REPO = Path(__file__).resolve().parent.parent
SPARK_35 = "3.5.7"


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
            env["SPARK_SUBMIT_OPTS"] = without_class_archive(env.get("SPARK_SUBMIT_OPTS", ""))
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
    """The runtime of pyspark ``version``, resolved as the product resolves a stream version's runtime
    (``airflow_streaming.spark_runtime``: built once on this host, then cached). A host that cannot build it
    (no package index) skips the test with what to install."""
    from airflow_streaming.spark_runtime import RuntimeUnavailableError, resolve_runtime

    try:
        found = resolve_runtime({"version": version})
    except RuntimeUnavailableError as exc:
        pytest.skip(str(exc))
    return current_runtime() if found is None else Runtime(version, found.python)


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
