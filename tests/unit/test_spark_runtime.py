"""A stream version's Spark runtime: the spec field, resolving it on this host, and where it reaches.

Resolution is tested against real files (a runtime folder as the builder leaves it, a Spark home with a
RELEASE file) and, for the build itself, a real ``python -m venv`` + ``pip install`` (from the package
index this host's pip is configured with): two processes race to build one release, one builds and the
other waits and uses it; a release that does not exist fails with what to install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from airflow_streaming.exceptions import SpecError
from airflow_streaming.spark_runtime import (
    RuntimeUnavailableError,
    describe,
    installed_version,
    resolve_runtime,
)
from airflow_streaming.spec import StreamSpec

PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


def spec(tmp_path, **overrides) -> StreamSpec:
    return StreamSpec(name="s", application="events_etl", checkpoint_location=str(tmp_path / "ckpt"),
                      control_location=str(tmp_path / "control"), master="local[2]", **overrides)


# ------------------------------------------------------------------ the spec field
@pytest.mark.parametrize("value,field,words", [
    ("3.5", "spark_runtime.version", "exact Spark release"),
    ("3.4.4", "spark_runtime.version", "older than the oldest supported line 3.5"),
    ({"version": 357}, "spark_runtime.version", "exact Spark release"),
    ({"spark_home": "opt/spark", "python": "/usr/bin/python3"}, "spark_runtime.spark_home", "absolute path"),
    ({"spark_home": "/opt/spark"}, "spark_runtime", "both 'spark_home' and 'python'"),
    ({"release": "3.5.7"}, "spark_runtime", "unknown key 'release'"),
    (["3.5.7"], "spark_runtime", "got list"),
])
def test_a_bad_runtime_names_the_field(tmp_path, value, field, words):
    with pytest.raises(SpecError) as raised:
        spec(tmp_path, spark_runtime=value)
    assert raised.value.field == field and words in str(raised.value)


def test_the_runtime_is_stored_with_the_version_and_kept_by_with_version(tmp_path):
    s = spec(tmp_path, spark_runtime="3.5.7")
    assert s.spark_runtime == {"version": "3.5.7"} and s.to_dict()["spark_runtime"] == {"version": "3.5.7"}
    assert StreamSpec.from_dict(s.to_dict()) == s
    assert s.with_version("v2").spark_runtime == {"version": "3.5.7"}
    assert s.with_version("v2", spark_runtime=None).spark_runtime is None  # Spark alone: back to the installed
    assert "spark_runtime" not in spec(tmp_path).to_dict()  # specs stored before the field read the same


def test_describe_never_raises_on_what_a_file_holds():
    assert describe({"version": "3.5.7"}) == "Spark 3.5.7"
    assert describe({"spark_home": "/opt/spark", "python": "/p"}) == "Spark at /opt/spark"
    assert describe(None) == f"Spark {installed_version()} (installed)"
    assert describe({"version": ["<b>"]}) == describe("garbage") == "an unreadable Spark runtime"


# ------------------------------------------------------------------ resolving
def fake_runtime(folder: Path, release: str, marker: bool = True) -> Path:
    """A runtime folder as the builder leaves it: a venv's python, pyspark with bin/spark-submit and jars."""
    home = folder / "lib" / PY / "site-packages" / "pyspark"
    (home / "bin").mkdir(parents=True)
    (home / "jars").mkdir()
    (home / "jars" / f"spark-core_2.12-{release}.jar").write_bytes(b"")
    submit = home / "bin" / "spark-submit"
    submit.write_text("#!/bin/sh\n")
    submit.chmod(0o755)
    (folder / "bin").mkdir()
    (folder / "bin" / "python").symlink_to(sys.executable)
    if marker:
        (folder / ".airflow-streaming-runtime.json").write_text(json.dumps({"version": release}))
    return home


def test_the_installed_release_and_no_runtime_resolve_to_the_installed_pyspark(tmp_path):
    assert resolve_runtime(None) is None
    assert resolve_runtime({"version": installed_version()}, build=False, cache=tmp_path) is None


def test_a_cached_runtime_is_found_and_a_half_built_one_is_never_used(tmp_path):
    home = fake_runtime(tmp_path / "pyspark-3.5.7", "3.5.7")
    found = resolve_runtime({"version": "3.5.7"}, build=False, cache=tmp_path)
    assert found is not None and (found.source, found.spark_home) == ("cache", str(home))
    assert found.spark_submit == str(home / "bin" / "spark-submit") and found.line == (3, 5)
    assert found.environment() == {"SPARK_HOME": str(home), "PYSPARK_PYTHON": found.python,
                                   "PYSPARK_DRIVER_PYTHON": found.python}
    fake_runtime(tmp_path / "pyspark-3.5.6", "3.5.6", marker=False)  # a build cut before its marker
    with pytest.raises(RuntimeUnavailableError, match=r"Spark 3\.5\.6 is not installed .* install pyspark==3\.5\.6"):
        resolve_runtime({"version": "3.5.6"}, build=False, cache=tmp_path)


@pytest.mark.parametrize("tamper, why", [
    (lambda folder, home: (folder / "bin").chmod(0o777), r"bin is writable by group and others"),
    (lambda folder, home: (home / "bin" / "spark-submit").chmod(0o775), r"spark-submit is writable by its group"),
    (lambda folder, home: os.chown(home, 4242, -1), r"pyspark is owned by uid 4242"),
    (lambda folder, home: (home.rename(home.with_name("real")), home.symlink_to(home.with_name("real"))),
     r"pyspark is a symbolic link"),
])
def test_a_cached_runtime_that_someone_else_could_have_changed_is_not_used(tmp_path, tamper, why):
    """Issue 35: the runtime cache was reused without an owner/mode check - a runtime another user can write
    to decides what every driver of this host runs. Refused, naming the part; nothing is rebuilt over it."""
    home = fake_runtime(tmp_path / "pyspark-3.5.7", "3.5.7")
    assert resolve_runtime({"version": "3.5.7"}, build=False, cache=tmp_path) is not None
    if os.getuid() != 0 and "uid" in why:
        pytest.skip("chown to another user needs root")
    tamper(tmp_path / "pyspark-3.5.7", home)
    for build in (False, True):
        with pytest.raises(RuntimeUnavailableError, match=why):
            resolve_runtime({"version": "3.5.7"}, build=build, cache=tmp_path)
    assert (tmp_path / "pyspark-3.5.7" / ".airflow-streaming-runtime.json").exists()  # left for a person


def test_a_marker_that_names_another_release_is_not_trusted(tmp_path):
    fake_runtime(tmp_path / "pyspark-3.5.7", "3.5.5")  # jars of 3.5.5 under the 3.5.7 name
    (tmp_path / "pyspark-3.5.7" / ".airflow-streaming-runtime.json").write_text('{"version": "3.5.7"}')
    with pytest.raises(RuntimeUnavailableError):
        resolve_runtime({"version": "3.5.7"}, build=False, cache=tmp_path)


def test_an_existing_installation_is_checked_and_its_release_read(tmp_path):
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "RELEASE").write_text("Spark 3.5.2 (git revision abc) built for Hadoop 3.3.4\n")
    with pytest.raises(RuntimeUnavailableError, match="no executable bin/spark-submit"):
        resolve_runtime({"spark_home": str(home), "python": sys.executable})
    (home / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (home / "bin" / "spark-submit").chmod(0o755)
    with pytest.raises(RuntimeUnavailableError, match="python /nope is not an executable"):
        resolve_runtime({"spark_home": str(home), "python": "/nope"})
    found = resolve_runtime({"spark_home": str(home), "python": sys.executable})
    assert (found.version, found.source) == ("3.5.2", "spark_home")
    (home / "RELEASE").write_text("Spark 3.4.1 built for Hadoop 3\n")
    with pytest.raises(RuntimeUnavailableError, match="older than the oldest supported line"):
        resolve_runtime({"spark_home": str(home), "python": sys.executable})


def test_a_release_that_cannot_be_installed_says_what_to_install_and_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeUnavailableError) as raised:
        resolve_runtime({"version": "3.5.99"}, cache=tmp_path, timeout=300)
    message = str(raised.value)
    assert "could not build the Spark 3.5.99 runtime" in message and "pip install pyspark==3.5.99" in message
    assert "No matching distribution found for pyspark==3.5.99" in message  # pip's own reason
    assert sorted(p.name for p in tmp_path.iterdir()) == [".pyspark-3.5.99.lock"]  # no half-built folder


def test_pips_reason_never_carries_a_private_indexs_password(tmp_path, monkeypatch):
    """pip names the index it could not use; a private index's URL holds a token: the error keeps the reason and
    masks the password (the venv step runs for real, pip's answer is the one a private index gives)."""
    import airflow_streaming.spark_runtime as spark_runtime

    real_run = subprocess.run

    def run(argv, **kwargs):
        if argv[1:3] == ["-m", "pip"]:
            return subprocess.CompletedProcess(argv, 1, "", "Looking in indexes: https://ci:s3cr3t-index-token@pypi.corp."
                                               "example/simple\nERROR: 401 Client Error: Unauthorized for url: https://ci:"
                                               "s3cr3t-index-token@pypi.corp.example/simple/pyspark/\n")
        return real_run(argv, **kwargs)

    monkeypatch.setattr(spark_runtime.subprocess, "run", run)
    with pytest.raises(RuntimeUnavailableError) as raised:
        resolve_runtime({"version": "3.5.7"}, cache=tmp_path)
    assert "401 Client Error: Unauthorized" in str(raised.value) and "pypi.corp.example" in str(raised.value)
    assert "s3cr3t-index-token" not in str(raised.value)


RACE = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from airflow_streaming.spark_runtime import resolve_runtime
    found = resolve_runtime({"version": sys.argv[2]}, cache=Path(sys.argv[1]))
    print(json.dumps([found.source, found.spark_submit]))
""")


def test_two_builders_of_one_release_build_it_once(tmp_path):
    """Two processes resolve a release that is not here at the same moment: one builds it (a real venv and
    pip install), the other waits on the lock and finds it complete."""
    release = os.environ.get("AIRFLOW_STREAMING_TEST_RUNTIME", "3.5.7")
    procs = [subprocess.Popen([sys.executable, "-c", RACE, str(tmp_path), release], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(source for source, _ in results) == ["built", "cache"]
    assert results[0][1] == results[1][1] and os.access(results[0][1], os.X_OK)
    done = subprocess.run([results[0][1], "--version"], capture_output=True, text=True, timeout=300)
    assert release in done.stdout + done.stderr  # the runtime's own spark-submit is that release
    assert not [p for p in tmp_path.iterdir() if ".building-" in p.name]


def test_a_builder_killed_mid_build_leaves_nothing_used_and_the_next_resolve_builds_it(tmp_path):
    """kill -9 of the building process while pip runs: its lock goes with it, its half-built venv is never
    taken for a runtime, and the next resolve removes it and builds a complete one."""
    import signal
    import time

    release = os.environ.get("AIRFLOW_STREAMING_TEST_RUNTIME", "3.5.7")
    proc = subprocess.Popen([sys.executable, "-c", RACE, str(tmp_path), release], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(tmp_path.glob(f".pyspark-{release}.building-*/bin/python")):
        time.sleep(0.05)
    assert list(tmp_path.glob(f".pyspark-{release}.building-*")), "the build never started"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    with pytest.raises(RuntimeUnavailableError):
        resolve_runtime({"version": release}, build=False, cache=tmp_path)
    found = resolve_runtime({"version": release}, cache=tmp_path)
    assert found is not None and found.source == "built" and os.access(found.spark_submit, os.X_OK)
    assert not list(tmp_path.glob(f".pyspark-{release}.building-*"))


# ------------------------------------------------------------------ where it reaches
def test_a_local_plan_runs_the_runtimes_spark_submit_python_and_an_isolated_launcher(tmp_path, monkeypatch):
    from airflow_streaming.hooks.streaming_job import SparkStreamHook

    home = fake_runtime(tmp_path / "rt" / "pyspark-3.5.7", "3.5.7")
    monkeypatch.setenv("AIRFLOW_STREAMING_RUNTIMES", str(tmp_path / "rt"))
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:SharedArchiveFile=/x/spark-abc.jsa -Xshare:auto -Dkeep=1")
    hook = SparkStreamHook(spec(tmp_path, spark_runtime="3.5.7"))
    plan = hook.launch_plan("20261125T000000Z-12345678")
    assert plan.spark_binary == str(home / "bin" / "spark-submit")
    assert plan.env["SPARK_HOME"] == str(home)
    assert plan.env["PYSPARK_PYTHON"] == plan.env["PYSPARK_DRIVER_PYTHON"] == str(tmp_path / "rt" / "pyspark-3.5.7" / "bin" / "python")
    opts = plan.env["SPARK_SUBMIT_OPTS"]  # the installed PySpark's class archive does not fit the runtime's jars
    assert "-Dkeep=1" in opts and "log4j2.configurationFile" in opts and "SharedArchive" not in opts and "Xshare" not in opts
    tree = Path(plan.launcher).parents[1]
    assert plan.launcher.endswith("spark_jobs/launch.py") and (tree / "airflow_streaming" / "spec.py").is_file()
    # The launcher puts its tree first on sys.path: it must hold no pyspark (and no Airflow side) to shadow the runtime's.
    assert not (tree / "pyspark").exists() and not (tree / "airflow_streaming" / "hooks").exists()
    assert hook.command_for("20261125T000000Z-12345678")[0][0] == str(home / "bin" / "spark-submit")
    assert SparkStreamHook(spec(tmp_path)).launch_plan("20261125T000000Z-12345678").spark_binary is None


def test_the_gate_child_runs_in_the_candidates_runtime(tmp_path, monkeypatch):
    from airflow_streaming.compat.run import check_command, check_environment

    home = fake_runtime(tmp_path / "rt" / "pyspark-3.5.7", "3.5.7")
    monkeypatch.setenv("AIRFLOW_STREAMING_RUNTIMES", str(tmp_path / "rt"))
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "not-for-the-child")
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:SharedArchiveFile=/x/spark-abc.jsa")
    candidate = spec(tmp_path, spark_runtime="3.5.7")
    cmd, _ = check_command(candidate, allow_warnings=False)
    env = check_environment(candidate)
    assert cmd[:3] == [str(tmp_path / "rt" / "pyspark-3.5.7" / "bin" / "python"), "-m", "airflow_streaming.compat"]
    assert env["SPARK_HOME"] == str(home) and Path(env["PYTHONPATH"], "airflow_streaming", "compat", "__main__.py").is_file()
    assert "AIRFLOW__CORE__FERNET_KEY" not in env and env["SPARK_SUBMIT_OPTS"] == ""
    assert check_command(spec(tmp_path), allow_warnings=False)[0][0] == sys.executable
    plain = check_environment(spec(tmp_path))  # the installed PySpark: this environment without Airflow's
    assert plain is not None and "AIRFLOW__CORE__FERNET_KEY" not in plain and plain["PATH"] == os.environ["PATH"]
    remote = StreamSpec(name="s", application="events_etl", checkpoint_location="hdfs://nn/ckpt",
                        control_location=str(tmp_path / "control"), spark_runtime="3.5.7")
    with pytest.raises(RuntimeUnavailableError, match="gate driver"):
        check_command(remote, allow_warnings=False)


@pytest.mark.parametrize("master,mode,words", [("spark://m1:7077", "cluster", "standalone workers' own Spark"),
                                                ("k8s://https://api:6443", "cluster", "driver image")])
def test_cluster_targets_whose_spark_this_host_cannot_choose_refuse_a_runtime(tmp_path, master, mode, words):
    from airflow_streaming.hooks.streaming_job import SparkStreamHook

    hook = SparkStreamHook(spec(tmp_path, spark_runtime="3.5.7").__class__.from_dict(
        {**spec(tmp_path, spark_runtime="3.5.7").to_dict(), "master": master, "deploy_mode": mode,
         "cluster": {"image": "img:1", "runtime_path": "/opt/as"} if master.startswith("k8s") else {}}))
    with pytest.raises(RuntimeUnavailableError, match=words):
        hook.spark_runtime()
