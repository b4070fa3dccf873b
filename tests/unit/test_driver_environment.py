"""Trust boundary: job code runs in the driver, so the driver's environment must not carry Airflow's
own configuration and credentials (the metadata database URL with its password, the Fernet key that
decrypts every connection, connections and variables given as environment variables)."""

from __future__ import annotations

import json
import os
import stat
import time

from airflow_streaming.control.contract import ControlPaths
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.targets.base import LaunchPlan
from airflow_streaming.targets.driver_env import driver_environment
from airflow_streaming.targets.local import LocalTarget

AIRFLOWS_OWN = {
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:dbPa55@db/airflow",
    "AIRFLOW__CORE__FERNET_KEY": "fernetKeyMaterial0123456789=",
    "AIRFLOW__API_AUTH__JWT_SECRET": "jwtSecretMaterial",
    "AIRFLOW_CONN_WAREHOUSE": "postgres://etl:connPa55@wh/db",
    "AIRFLOW_VAR_API_TOKEN": "varToken123",
    "AIRFLOW_HOME": "/srv/airflow-home-with-the-seal-key",
    "AIRFLOW_CONFIG": "/srv/airflow-home-with-the-seal-key/airflow.cfg",
}


def test_the_driver_environment_drops_airflows_configuration_and_credentials():
    env = driver_environment({**AIRFLOWS_OWN, "PATH": "/bin", "JAVA_HOME": "/jvm", "SPARK_HOME": "/spark",
                              "AWS_PROFILE": "etl", "AIRFLOW_STREAMING_FAULTS": "/f.json"}, {"PYSPARK_PYTHON": "/py"})
    assert env == {"PATH": "/bin", "JAVA_HOME": "/jvm", "SPARK_HOME": "/spark", "AWS_PROFILE": "etl",
                   "AIRFLOW_STREAMING_FAULTS": "/f.json", "PYSPARK_PYTHON": "/py"}


def test_a_submitted_driver_does_not_inherit_them(tmp_path, monkeypatch):
    """A real submission by the local target, with a stand-in spark-submit (a script on PATH that
    records the environment it was started with), so no Spark is needed to see what the driver gets."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    dump = tmp_path / "env.json"
    fake = bindir / "spark-submit"
    fake.write_text(f"#!/usr/bin/env python3\nimport json, os\njson.dump(dict(os.environ), open({str(dump)!r}, 'w'))\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    for key, value in AIRFLOWS_OWN.items():
        monkeypatch.setenv(key, value)
    target = LocalTarget(LocalStorage(), ControlPaths(str(tmp_path / "control")), {})
    plan = LaunchPlan(run_id="20261125T000000Z-0000envx", name="s:v1", master="local[1]", deploy_mode="client",
                      launcher="/x/launch.py", runtime_args=[], conf={}, env={"PYSPARK_PYTHON": "/py"},
                      log_path=str(tmp_path / "log" / "driver.log"))
    handle = target.submit(plan)
    deadline = time.monotonic() + 30
    while not dump.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        os.waitpid(handle["pid"], 0)
    except ChildProcessError:
        pass
    seen = json.loads(dump.read_text())
    assert seen["PYSPARK_PYTHON"] == "/py" and seen["PATH"].startswith(str(bindir))
    assert not [k for k in seen if k in AIRFLOWS_OWN], sorted(k for k in seen if k.startswith("AIRFLOW"))
    assert not any(v in json.dumps(seen) for v in AIRFLOWS_OWN.values())


def test_drivers_on_this_host_log_through_the_redacting_configuration_unless_one_is_named():
    from airflow_streaming.hooks.submission import DRIVER_LOG4J2, redacting_log_options
    from control_fixtures import spec_under
    from pathlib import Path

    assert DRIVER_LOG4J2.is_file()
    spec = spec_under(Path("/tmp/x"))
    option = f"-Dlog4j2.configurationFile={DRIVER_LOG4J2.as_uri()}"
    assert redacting_log_options(spec, {}) == option
    # the suite's class archive (or any other option) is kept
    assert redacting_log_options(spec, {"SPARK_SUBMIT_OPTS": "-XX:SharedArchiveFile=/a.jsa"}) == \
        f"-XX:SharedArchiveFile=/a.jsa {option}"
    # the user's own configuration wins
    assert redacting_log_options(spec, {"SPARK_SUBMIT_OPTS": "-Dlog4j2.configurationFile=/mine"}) is None
    mine = spec.with_version("v1", spark_conf={"spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=/m"})
    assert redacting_log_options(mine, {}) is None
    # cluster mode: the driver's JVM is not spark-submit's
    cluster = spec_under(Path("/tmp/x"), master="spark://m:7077", deploy_mode="cluster")
    assert redacting_log_options(cluster, {}) is None
