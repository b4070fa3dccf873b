"""Trust boundary (issue 25, items 6 and 7): inputs checked as a provider checks them.

- A Spark connection's ``spark-binary`` extra names the program the workers run: only the Spark
  provider's allowed binaries are accepted (as its ``SparkSubmitHook`` does); anything else is
  :class:`SparkBinaryNotAllowedError` and nothing runs. The attack: a connection editor points it at
  their own script; a stand-in ``spark-submit`` on PATH records whether anything was started.
- The provider's directories under the temp dir (secrets, runtime zip, driver logs) are per user,
  created 0700 and verified before use: one that another user made first, a symlink, a file or one open
  to others is :class:`UnsafeDirectoryError`, and nothing is written into it or read from it.

No Spark: the spark-submit here is a stand-in script, and the temp dir is a test directory with the
same mode as ``/tmp`` (1777), so the real one shared with other processes is never touched.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import zipfile
from pathlib import Path

import pytest

from airflow_streaming.control.contract import ControlPaths
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.exceptions import SparkBinaryNotAllowedError, UnsafeDirectoryError
from airflow_streaming.hooks.spark_connection import allowed_spark_binaries
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.private_dir import private_dir
from airflow_streaming.properties_file import write_properties_file
from airflow_streaming.spec import StreamSpec
from airflow_streaming.targets.base import LaunchPlan
from airflow_streaming.targets.local import LocalTarget
from airflow_streaming.targets.runtime_bundle import bundle_path
import stream_actions

RUN = "20261125T000000Z-0000tmpx"


@pytest.fixture
def shared_tmp(tmp_path, monkeypatch):
    """A temp dir like /tmp (mode 1777) that ``tempfile.gettempdir()`` returns for the test."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    return shared


@pytest.fixture
def recording_spark_submit(tmp_path, monkeypatch):
    """A stand-in ``spark-submit`` (and an attacker's script) on PATH that record whether they ran."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    ran = tmp_path / "ran"
    for name in ("spark-submit", "evil.sh"):
        script = bindir / name
        script.write_text(f"#!/bin/sh\necho {name} >> {ran}\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return bindir, ran


def _spec(tmp_path, **extra) -> StreamSpec:
    return StreamSpec(name="inputs", application="events_etl", checkpoint_location=str(tmp_path / "ckpt"),
                      control_location=str(tmp_path / "control"), conn_id="spark_inputs", **extra)


# ------------------------------------------------------------------ item 6: spark-binary


@pytest.mark.parametrize("binary", ["/tmp/evil.sh", "evil.sh", "spark-submit; touch /tmp/x", "../bin/spark-submit"])
def test_a_connection_cannot_choose_the_program_the_workers_run(tmp_path, monkeypatch, recording_spark_submit, binary):
    bindir, ran = recording_spark_submit
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_INPUTS", json.dumps(
        {"conn_type": "spark", "host": "local[1]", "extra": {"spark-binary": binary}}))
    hook = SparkStreamHook(_spec(tmp_path))
    with pytest.raises(SparkBinaryNotAllowedError) as err:
        stream_actions.submit(hook)
    message = str(err.value)
    assert "'spark_inputs'" in message and "spark-binary" in message and "spark3-submit" in message
    assert "Nothing was submitted" in message and isinstance(err.value, ValueError)  # a retry cannot fix it
    assert not ran.exists()
    assert not (tmp_path / "control" / "inputs" / "driver.json").exists()


def test_the_providers_allowed_binaries_are_accepted(tmp_path, monkeypatch):
    from airflow.providers.apache.spark.hooks.spark_submit import ALLOWED_SPARK_BINARIES

    assert allowed_spark_binaries() == list(ALLOWED_SPARK_BINARIES)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_INPUTS", json.dumps(
        {"conn_type": "spark", "host": "local[1]", "extra": {"spark-binary": "spark3-submit"}}))
    hook = SparkStreamHook(_spec(tmp_path))
    assert hook.resolved_spec.cluster["spark_binary"] == "spark3-submit"
    assert hook.target.settings["spark_binary"] == "spark3-submit"
    # The DAG's own spec may still name another program (as SparkSubmitHook's spark_binary argument may).
    own = SparkStreamHook(_spec(tmp_path, cluster={"spark_binary": "/opt/spark/bin/spark-submit"}))
    assert own.target.settings["spark_binary"] == "/opt/spark/bin/spark-submit"


# ------------------------------------------------------------------ item 7: private directories


def test_private_dirs_are_created_per_user_with_mode_0700(shared_tmp):
    path = private_dir("airflow-streaming-secrets")
    st = os.lstat(path)
    assert path == str(shared_tmp / f"airflow-streaming-secrets-{os.geteuid()}")
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    assert private_dir("airflow-streaming-secrets") == path  # reused when it is ours
    props = write_properties_file({"spark.x.password": "p"}, RUN)
    assert os.path.dirname(props) == path and stat.S_IMODE(os.stat(props).st_mode) == 0o600


def _precreate(shared_tmp, name: str, how: str, attacker_dir):
    path = shared_tmp / f"{name}-{os.geteuid()}"
    if how == "open mode":
        path.mkdir()
        path.chmod(0o777)
    elif how == "group readable":
        path.mkdir()
        path.chmod(0o750)
    elif how == "symlink":
        path.symlink_to(attacker_dir, target_is_directory=True)
    elif how == "a file":
        path.write_text("not a directory")
    elif how == "another user's":
        path.mkdir()
        path.chmod(0o700)
        os.chown(path, 65534, 65534)
    return path


CASES = ["open mode", "group readable", "symlink", "a file",
         pytest.param("another user's", marks=pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root"))]


@pytest.mark.parametrize("how", CASES)
def test_a_secrets_dir_someone_else_prepared_is_refused_and_nothing_is_written(shared_tmp, tmp_path, how):
    attacker = tmp_path / "attacker"
    attacker.mkdir(mode=0o700)
    path = _precreate(shared_tmp, "airflow-streaming-secrets", how, attacker)
    before = sorted(os.listdir(path)) if path.is_dir() else None
    with pytest.raises(UnsafeDirectoryError) as err:
        write_properties_file({"spark.hadoop.fs.s3a.secret.key": "s3cr3t"}, RUN)
    assert str(path) in str(err.value) and f"rm -rf {path}" in str(err.value)
    assert (sorted(os.listdir(path)) if path.is_dir() else None) == before
    assert os.listdir(attacker) == []  # nothing went through the symlink either


def test_a_refused_secrets_dir_stops_the_submission_before_spark_submit_runs(shared_tmp, tmp_path,
                                                                             recording_spark_submit):
    _, ran = recording_spark_submit
    _precreate(shared_tmp, "airflow-streaming-secrets", "open mode", None)
    target = LocalTarget(LocalStorage(), ControlPaths(str(tmp_path / "control")), {})
    plan = LaunchPlan(run_id=RUN, name="s:v1", master="local[1]", deploy_mode="client", launcher="/x/launch.py",
                      runtime_args=[], conf={}, secret_conf={"spark.x.password": "p"},
                      log_path=str(tmp_path / "log" / "driver.log"))
    with pytest.raises(UnsafeDirectoryError):
        target.submit(plan)
    assert not ran.exists()


@pytest.mark.parametrize("how", CASES)
def test_a_runtime_zip_dir_someone_else_prepared_is_refused(shared_tmp, tmp_path, how):
    """The attack: put a zip with the expected name (the name is the content's hash, so it is
    predictable) in a directory of one's own; spark-submit would ship that code to the cluster."""
    attacker = tmp_path / "attacker"
    attacker.mkdir(mode=0o700)
    path = _precreate(shared_tmp, "airflow-streaming-runtime", how, attacker)
    with pytest.raises(UnsafeDirectoryError):
        bundle_path()
    assert os.listdir(attacker) == []


def test_the_runtime_zip_goes_to_the_private_dir(shared_tmp):
    zipped = bundle_path()
    folder = os.path.dirname(zipped)
    assert folder == str(shared_tmp / f"airflow-streaming-runtime-{os.geteuid()}")
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert "spark_jobs/launch.py" in zipfile.ZipFile(zipped).namelist()


def test_driver_logs_of_remote_control_storage_go_to_the_private_dir(shared_tmp, monkeypatch):
    monkeypatch.delenv("AIRFLOW_STREAMING_LOG_DIR", raising=False)
    spec = StreamSpec(name="remote", application="events_etl", checkpoint_location="webhdfs://127.0.0.1:9/ckpt",
                      control_location="webhdfs://127.0.0.1:9/control", master="local[1]")
    hook = SparkStreamHook(spec)  # no request is made: the client is only built
    assert hook.remote_storage
    log_path = hook.driver_log_path(RUN)
    assert log_path == str(shared_tmp / f"airflow-streaming-logs-{os.geteuid()}" / "remote" / f"{RUN}.log")
    os.chmod(shared_tmp / f"airflow-streaming-logs-{os.geteuid()}", 0o755)
    with pytest.raises(UnsafeDirectoryError):
        hook.driver_log_path(RUN)


def test_a_parent_others_may_write_without_the_sticky_bit_is_refused(tmp_path, monkeypatch):
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)  # anyone could rename our directory away and put theirs in its place
    monkeypatch.setattr(tempfile, "tempdir", str(loose))
    with pytest.raises(UnsafeDirectoryError, match="sticky"):
        private_dir("airflow-streaming-secrets")


# ------------------------------------------------------------------ driver logs are read where this host writes them


def test_a_driver_record_does_not_choose_which_file_goes_into_task_logs(tmp_path):
    """A forged ``driver.json`` names a file of the worker as the run's log: its content would be shown in
    task logs and error messages (``log_tail``). The log is read where this host writes it instead."""
    worker_file = tmp_path / "worker-environ"
    worker_file.write_text("AIRFLOW__CORE__FERNET_KEY=fernetMaterial0123456789\n")
    spec = StreamSpec(name="logs", application="events_etl", checkpoint_location=str(tmp_path / "ckpt"),
                      control_location=str(tmp_path / "control"), master="local[1]")
    hook = SparkStreamHook(spec)
    hook.storage.makedirs(f"{hook.paths.root}/logs")
    Path(hook.paths.log(RUN)).write_text("the run's own output\n")
    record = {"run_id": RUN, "stream": "logs", "version": "v1", "application": "events_etl", "host": "h",
              "command": "", "log_path": str(worker_file), "submitted_at": 1.0, "checkpoint_location": "/c",
              "target": "local", "handle": {}}
    Path(hook.paths.driver).write_text(json.dumps(record))
    assert hook.log_tail(RUN) == "the run's own output"
    assert "fernetMaterial" not in hook.log_tail(RUN)
    assert "not a run id" in hook.log_tail("../../../../" + str(worker_file))


@pytest.mark.parametrize("how", ["open mode", "symlink"])
def test_a_keytab_dir_someone_else_prepared_is_refused(shared_tmp, tmp_path, monkeypatch, how):
    import base64

    from airflow_streaming.hooks.spark_connection import keytab_file

    monkeypatch.delenv("AIRFLOW_STREAMING_KEYTAB_DIR", raising=False)
    attacker = tmp_path / "attacker"
    attacker.mkdir(mode=0o700)
    _precreate(shared_tmp, "airflow-streaming-keytabs", how, attacker)
    with pytest.raises(UnsafeDirectoryError):
        keytab_file(base64.b64encode(b"keytab bytes").decode(), "spark_inputs")
    assert os.listdir(attacker) == []
