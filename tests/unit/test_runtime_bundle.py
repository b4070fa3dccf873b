"""The driver runtime zip shipped to YARN/Kubernetes: deterministic, complete (the launcher and every
job import from it alone, in a fresh interpreter that cannot see this checkout), and without the
Airflow-side packages."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile

from airflow_streaming.targets.runtime_bundle import PROJECT_ROOT, _imports, build_bundle, bundle_path, runtime_files


def test_the_zip_is_byte_for_byte_deterministic_and_named_by_its_content(tmp_path):
    first, second = build_bundle(), build_bundle()
    assert first == second
    path = bundle_path(directory=str(tmp_path))
    assert path == bundle_path(directory=str(tmp_path))
    assert hashlib.sha256(first).hexdigest()[:16] in os.path.basename(path)
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    assert [i.filename for i in infos] == sorted(i.filename for i in infos)
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert not any("__pycache__" in i.filename for i in infos)


def test_the_zip_holds_the_runtime_and_what_it_imports_but_no_airflow_side_code():
    names = {p.relative_to(PROJECT_ROOT).as_posix() for p in runtime_files()}
    assert {"spark_jobs/launch.py", "spark_jobs/runtime/launcher.py", "spark_jobs/runtime/reporter.py",
            "spark_jobs/jobs/events_etl.py", "airflow_streaming/__init__.py", "airflow_streaming/control/contract.py",
            "airflow_streaming/control/storage.py", "airflow_streaming/control/local.py",
            "airflow_streaming/control/webhdfs.py", "airflow_streaming/faults.py"} <= names
    for airflow_side in ("hooks", "operators", "sensors", "triggers", "lifecycle", "targets"):
        assert not any(n.startswith(f"airflow_streaming/{airflow_side}/") for n in names), airflow_side


def test_the_runtime_imports_from_the_zip_alone(tmp_path):
    path = bundle_path(directory=str(tmp_path))
    import pyspark

    site_packages = os.path.dirname(os.path.dirname(pyspark.__file__))
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); sys.path.append(sys.argv[2]); "
             "import spark_jobs.runtime.launcher, spark_jobs.runtime.reporter, spark_jobs.jobs.events_etl, "
             "spark_jobs.jobs.device_signals_v2, airflow_streaming.control.contract as c; "
             "assert c.__file__.startswith(sys.argv[1]), c.__file__; print('ok', c.__file__)")
    # -I -S: no cwd, no PYTHONPATH, no site (so no editable-install finder of this checkout); site-packages
    # is added as a plain directory for pyspark and psutil.
    out = subprocess.run([sys.executable, "-I", "-S", "-c", probe, path, site_packages], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok ")


def test_imports_are_read_from_bytecode_at_any_depth_and_relative_ones_are_left_out(tmp_path):
    """The import scan compiles the file instead of building an AST (CPython 3.11.7's ast.parse fails
    now and then under the garbage collector, gh-106905); it must still see every kind of import,
    including one whose names sit behind an EXTENDED_ARG (a module with more than 255 constants)."""
    many_constants = "\n".join(f"C{i} = 'constant-{i}'" for i in range(300))
    source = tmp_path / "mod.py"
    source.write_text(
        "import os, json.decoder\n"
        "from airflow_streaming.control import contract as c\n"
        "from . import sibling\n"
        "from .pkg import thing\n"
        f"{many_constants}\n"
        "def f():\n"
        "    from airflow_streaming.faults import inject\n"
        "    class K:\n"
        "        def g(self):\n"
        "            import airflow_streaming.redaction\n"
        "from airflow_streaming.control.local import LocalStorage, other\n"
        "from typing import *\n",
        encoding="utf-8")
    assert _imports(source) == {
        "os", "json.decoder", "airflow_streaming.control", "airflow_streaming.control.contract",
        "airflow_streaming.faults", "airflow_streaming.faults.inject", "airflow_streaming.redaction",
        "airflow_streaming.control.local", "airflow_streaming.control.local.LocalStorage",
        "airflow_streaming.control.local.other", "typing"}
