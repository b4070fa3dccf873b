"""How the spark-submit command is built: from the spec or its `spark` connection, with no secret on it."""

from __future__ import annotations

import json

import pytest

from airflow_streaming.hooks.streaming_job import LAUNCHER, SparkStreamHook
import stream_actions


def _command_parts(cmd: list[str]) -> dict[str, str]:
    return {cmd[i]: cmd[i + 1] for i in range(len(cmd) - 1) if cmd[i].startswith("--")}


def test_master_comes_from_the_spark_connection_when_the_spec_sets_none(streams, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STREAMS", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    spec = streams.etl_spec(master=None, conn_id="spark_streams")
    cmd, masked = SparkStreamHook(spec).command_for("run-1")
    parts = _command_parts(cmd)
    assert cmd[0] == "spark-submit" and parts["--master"] == "local[2]" and parts["--name"] == "etl:v1"
    assert cmd[cmd.index(LAUNCHER) + 1 :][:4] == ["--stream", "etl", "--version", "v1"]
    assert cmd[-6:] == list(spec.application_args)
    assert "spark.sql.streaming.metricsEnabled=true" in cmd  # Spark's streaming gauges for Prometheus
    assert "spark.metrics.conf.*.sink.prometheusServlet.path=/metrics/prometheus" in cmd


def test_spec_master_overrides_the_connection(streams, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "yarn"}))
    cmd, _ = SparkStreamHook(streams.etl_spec(master="local[1]")).command_for("run-1")
    assert _command_parts(cmd)["--master"] == "local[1]"


def test_missing_connection_without_master_is_a_clear_error(streams):
    spec = streams.etl_spec(master=None, conn_id="no_such_spark_conn")
    with pytest.raises(ValueError, match="master: the spec sets no master and the Spark connection "
                                        "'no_such_spark_conn' cannot be loaded"):
        SparkStreamHook(spec).command_for("run-1")


def test_secrets_in_conf_are_kept_off_the_command_line(streams):
    spec = streams.etl_spec(spark_conf={"spark.hadoop.fs.s3a.secret.key": "TOPSECRET123",
                                        "spark.sql.shuffle.partitions": 2})
    cmd, masked = SparkStreamHook(spec).command_for("run-1")
    # The secret travels in a 0600 properties file, never on the command line (ps shows it to everyone).
    assert not any("TOPSECRET123" in arg or "s3a.secret.key" in arg for arg in cmd)
    assert "TOPSECRET123" not in masked and "--properties-file" in cmd and "--load-spark-defaults" in cmd
    assert "spark.sql.shuffle.partitions=2" in cmd


def test_missing_spark_submit_is_named_and_nothing_is_submitted(streams, monkeypatch, tmp_path):
    import shutil as shutil_module

    from airflow_streaming.exceptions import ApplicationNotFoundError

    hook = SparkStreamHook(streams.etl_spec())
    real_which = shutil_module.which
    monkeypatch.setattr(shutil_module, "which",
                        lambda name, *a, **k: None if name == "spark-submit" else real_which(name, *a, **k))
    with pytest.raises(ApplicationNotFoundError, match="spark-submit is not on PATH") as raised:
        stream_actions.submit(hook)
    assert 'pip install "airflow-streaming[pyspark]" "pyspark==' in str(raised.value)  # the extra, pinned
    assert "nothing was submitted" in str(raised.value)
    assert hook.driver_record() is None and not hook.storage.exists(hook.paths.marker)
