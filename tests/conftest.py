"""Shared test setup: an isolated Airflow home, Spark on loopback, and cleanup of every driver by pid."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile

# Before anything imports Airflow: an isolated AIRFLOW_HOME with a SQLite metadata DB, no examples.
_AIRFLOW_HOME = tempfile.mkdtemp(prefix="airflow-streaming-tests-")
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
atexit.register(shutil.rmtree, _AIRFLOW_HOME, True)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
# One deployment: this process and the Airflow services a test starts (tests/airflow_stack.py, another
# AIRFLOW_HOME) seal stored specs with the same key, as every host of a real deployment is told to.
os.environ["AIRFLOW__AIRFLOW_STREAMING__CONTROL_SEAL_KEY"] = "tests-" + os.urandom(16).hex()
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = os.path.join(os.path.dirname(os.path.dirname(__file__)), "dags")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")

import logging  # noqa: E402

import pytest  # noqa: E402

# py4j logs "Closing down clientserver connection" from __del__ after pytest closed its streams.
logging.getLogger("py4j").setLevel(logging.WARNING)

from streams import StreamRegistry  # noqa: E402

pytest_plugins = ["progress_log"]  # a line per test ended, for a run stopped at CI's time limit


@pytest.fixture
def streams(tmp_path):
    """Build specs under ``tmp_path`` and stop (by pid) every driver a test started, whatever happens."""
    registry = StreamRegistry(tmp_path)
    try:
        yield registry
    finally:
        registry.kill_all()


@pytest.fixture(scope="session")
def airflow_db():
    """Migrate the tests' Airflow metadata DB (SQLite in the temp AIRFLOW_HOME) once per session."""
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True, timeout=300)
    return os.environ["AIRFLOW_HOME"]


@pytest.fixture(autouse=True)
def _class_archive_for_spark_tests(request):
    if request.node.get_closest_marker("spark"):
        request.getfixturevalue("spark_class_archive")
        request.getfixturevalue("spark_test_jit")


@pytest.fixture(scope="session")
def spark_test_jit():
    """Every JVM that spark-submit starts in the suite compiles with C1 only (``-XX:TieredStopAtLevel=1``).
    A test's driver lives for seconds to a minute, and on 2 cores the C2 compiler's threads take CPU from
    the drivers, gates and Airflow processes beside them: with C1 only, a Spark test ran 15-20 % faster here
    (the supervisor's kill mid-batch 35.3 -> 29.8 s, two upgrade tests 103 -> 83 s). It changes how hot code
    is compiled, nothing that Spark or the product does; benchmarks run outside the suite keep the JVM's
    default. Off with AIRFLOW_STREAMING_TEST_JIT=full."""
    if os.environ.get("AIRFLOW_STREAMING_TEST_JIT", "c1") == "full":
        yield None
        return
    before = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [before, "-XX:TieredStopAtLevel=1"]))
    try:
        yield "-XX:TieredStopAtLevel=1"
    finally:
        if before is None:
            os.environ.pop("SPARK_SUBMIT_OPTS", None)
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = before


@pytest.fixture(scope="session")
def spark_class_archive():
    """Before the first Spark test: every JVM that spark-submit starts (drivers, gates, sessions) maps one
    class-data-sharing archive of pyspark's classes (airflow_streaming.class_archive), built once per
    JDK and jar set (~1 min) - about 6 s less per driver start on these machines (BENCHMARKS.md).

    It changes how the JVM loads classes, nothing that Spark or the product does. Off with
    AIRFLOW_STREAMING_TEST_CLASS_ARCHIVE=0."""
    if os.environ.get("AIRFLOW_STREAMING_TEST_CLASS_ARCHIVE", "1") == "0":
        yield None
        return
    from airflow_streaming import class_archive

    try:
        path = class_archive.build()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        # Not a warning: without the archive every driver start is ~6 s slower and the suite can overrun
        # its budget unseen. Say why, and how to run without it on purpose.
        pytest.exit(f"the class-data-sharing archive for this session's JVMs could not be built: {exc}. Fix the "
                    "cause (Java, pyspark's jars, disk), or run without it on purpose with "
                    "AIRFLOW_STREAMING_TEST_CLASS_ARCHIVE=0 (each driver start is ~6 s slower)", returncode=3)
    before = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [before, class_archive.java_option(path)]))
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("SPARK_SUBMIT_OPTS", None)
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = before


@pytest.fixture
def inject(tmp_path, monkeypatch):
    """Failpoints for this process (``airflow_streaming.faults``): ``inject([{...}])``; ``inject([])`` ends them."""
    import json
    import os
    import time

    from airflow_streaming import faults

    path = tmp_path / "faults.json"
    path.write_text("[]")
    monkeypatch.setenv(faults.ENV, str(path))

    def write(entries: list[dict]) -> None:
        path.write_text(json.dumps(entries))
        os.utime(path, ns=(time.time_ns(), time.time_ns()))

    return write


#: Run last in a session: the benchmarks' smokes. They start driver after driver back to back, the most CPU-dense
#: stretch of the Spark session; run first (alphabetical order) they met the session without Spark at its busiest
#: and took ~4x their time alone (cross_host_bench: 231 s against 60 s). Last, they mostly run alone; the tests
#: before them wait on their streams much of the time and suffer little from the session beside them.
RUN_LAST = ("tests/integration/test_bench_smoke.py::",)


def pytest_collection_modifyitems(session, config, items):
    last = [item for item in items if item.nodeid.startswith(RUN_LAST)]
    if last:
        items[:] = [item for item in items if not item.nodeid.startswith(RUN_LAST)] + last
