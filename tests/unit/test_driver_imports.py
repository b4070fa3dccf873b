"""The driver side imports only pure modules.

Two worlds share this repository: the code that runs on Airflow (hooks, operators, sensors,
triggers, the lifecycle, the targets, the UI) and the code that runs inside the Spark driver
(``spark_jobs/`` and the few ``airflow_streaming`` modules it imports: see docs/architecture.md).
The driver side ships to hosts that have neither Airflow nor this provider installed (the runtime
zip of cluster mode), so it may import only the standard library, pyspark (and what pyspark itself
loads), and the pure modules of this package.

The set of driver-side modules is not written down here: it is what
:func:`~airflow_streaming.targets.runtime_bundle.runtime_files` finds by following the imports of
every ``spark_jobs`` module, including imports inside functions - the same closure the cluster
runtime zip carries.
"""

from __future__ import annotations

import dis
import json
import subprocess
import sys

from airflow_streaming.targets.runtime_bundle import PROJECT_ROOT, _imports, runtime_files

#: The folders and modules of ``airflow_streaming`` that the driver side may use: plain Python with
#: no Airflow import (the spec, the control contract and storages, checkpoint reading and the
#: compatibility rules, redaction, fault points, failure classification, health thresholds).
DRIVER_SIDE = ("airflow_streaming", "airflow_streaming.checkpoint", "airflow_streaming.compat",
               "airflow_streaming.control", "airflow_streaming.health", "airflow_streaming.supervision",
               "airflow_streaming.exceptions", "airflow_streaming.faults", "airflow_streaming.properties_file",
               "airflow_streaming.private_dir", "airflow_streaming.redaction", "airflow_streaming.public_conf",
               "airflow_streaming.spec",
               "airflow_streaming.location",
               # who holds a lifecycle lock (a task instance's owner string): a hot standby takes the lock for
               # its takeover (control/lifecycle_lock.py, control/takeover.py)
               "airflow_streaming.task_owner",
               # which PySpark is installed (importlib.metadata only): the gate's command line, run from the
               # runtime tree in a stream version's own Spark runtime (runtime_bundle.EXTRA_ROOTS), reports it
               "airflow_streaming.pyspark_install",
               # the spec's check of spark_runtime (the lines and releases a version may name)
               "airflow_streaming.spark_lines",
               # the spec's SparkSubmitOperator fields (py_files, files, ... : their check)
               "airflow_streaming.submit_fields",
               # where a user script comes from (a path, or a URI the driver's SparkContext fetches)
               "airflow_streaming.application_source",
               # a bundled job's query as the runtime runs it (the driver starts it, the gate plans it)
               "airflow_streaming.bundled_job",
               # the spec's check of its assets (Airflow's Asset URI rule, reproduced without Airflow)
               "airflow_streaming.stream_assets")
#: Never on the driver side: Airflow, HTTP client libraries, pydantic and msgspec, ORMs, cloud SDKs.
FORBIDDEN = ("airflow", "pydantic", "msgspec", "requests", "httpx", "urllib3", "aiohttp", "sqlalchemy", "hdfs",
             "kubernetes", "psutil", "tenacity", "flask", "fastapi", "starlette")

_PROBE = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def _module_name(path) -> str:
    parts = list(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_levels_after_importing(modules: list[str]) -> set[str]:
    """The top-level packages in ``sys.modules`` of a fresh interpreter after importing ``modules``."""
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(modules)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout))


#: In ``spark_jobs/`` but not driver code: it reads the bundled jobs' output files with pyarrow for
#: the demo's summary and the exactly-once checks of the tests, beside Spark, never inside it.
NOT_DRIVER_CODE = ("spark_jobs.outputs",)


def _driver_modules() -> list[str]:
    return [name for name in map(_module_name, runtime_files()) if name not in NOT_DRIVER_CODE]


def test_no_driver_module_imports_the_output_reader():
    importers = [path.relative_to(PROJECT_ROOT).as_posix() for path in runtime_files()
                 if _module_name(path) not in NOT_DRIVER_CODE and set(NOT_DRIVER_CODE) & _imports(path)]
    assert importers == []


def test_the_driver_side_is_spark_jobs_and_pure_modules_only():
    modules = _driver_modules()
    ours = [m for m in modules if m.startswith("airflow_streaming")]
    assert "spark_jobs.runtime.launcher" in modules and "airflow_streaming.control.contract" in ours
    outside = [m for m in ours if not any(m == allowed or m.startswith(allowed + ".") and allowed != "airflow_streaming"
                                          for allowed in DRIVER_SIDE)]
    assert outside == [], f"driver-side code imports Airflow-side modules: {outside}"


def _module_level_imports(path) -> set[str]:
    """The modules ``path`` imports when it is imported (its top-level code, not its functions)."""
    code = compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    return {i.argval for i in dis.get_instructions(code) if i.opname == "IMPORT_NAME"}


def _forbidden(names: set[str]) -> list[str]:
    return sorted({n.split(".")[0] for n in names if n.split(".")[0] in FORBIDDEN})


def test_no_driver_side_module_imports_a_forbidden_package():
    at_import = {path.relative_to(PROJECT_ROOT).as_posix(): _forbidden(_module_level_imports(path))
                 for path in runtime_files() if _module_name(path) not in NOT_DRIVER_CODE}
    assert {file: names for file, names in at_import.items() if names} == {}


def test_the_only_forbidden_imports_inside_functions_are_the_webhdfs_backend_of_the_airflow_side():
    """A ratchet: the driver side reaches them only through code it never runs (the WebHDFS backend:
    HTTP clients and the Airflow connection of a ``webhdfs://`` location; the driver reads HDFS through
    the JVM). A new one fails here: move it to the Airflow side instead."""
    inside = {path.relative_to(PROJECT_ROOT).as_posix(): _forbidden(_imports(path)) for path in runtime_files()
              if _module_name(path) not in NOT_DRIVER_CODE}
    assert {file: names for file, names in inside.items() if names} == {
        "airflow_streaming/control/webhdfs.py": ["hdfs", "requests"],
        "airflow_streaming/control/webhdfs_connection.py": ["airflow", "hdfs", "requests"]}


def test_importing_the_driver_runtime_in_a_fresh_interpreter_loads_nothing_beyond_pyspark():
    """Everything the driver side imports, against a baseline measured in the same run: a fresh
    interpreter that imports only what the driver needs from pyspark."""
    baseline = _top_levels_after_importing(["pyspark.sql", "pyspark.sql.functions", "pyspark.sql.streaming",
                                            "pyspark.sql.types"])
    loaded = _top_levels_after_importing(_driver_modules())
    extra = loaded - baseline - set(sys.stdlib_module_names) - {"airflow_streaming", "spark_jobs"}
    assert not loaded & set(FORBIDDEN), sorted(loaded & set(FORBIDDEN))
    assert extra == set(), f"the driver side loads packages pyspark does not: {sorted(extra)}"
