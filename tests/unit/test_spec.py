"""Unit tests for airflow_streaming.spec (pure Python, no Spark, no Airflow)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from airflow_streaming.spec import BUNDLED_JOBS, SpecError, StreamSpec, parse_duration

MINIMAL: dict[str, Any] = {
    "name": "orders",
    "application": "events_etl",
    "checkpoint_location": "/data/checkpoints/orders",
    "control_location": "/data/control",
}


def make(**overrides: Any) -> dict[str, Any]:
    data = dict(MINIMAL)
    data.update(overrides)
    return data


def spec_error(data: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as exc_info:
        StreamSpec.from_dict(data)
    return exc_info.value


# --------------------------------------------------------------------------- basics


def test_minimal_dict_and_defaults() -> None:
    spec = StreamSpec.from_dict(MINIMAL)
    assert spec.name == "orders"
    assert spec.application == "events_etl"
    assert spec.checkpoint_location == "/data/checkpoints/orders"
    assert spec.control_location == "/data/control"
    assert spec.version == "v1"
    assert spec.application_args == ()
    assert spec.spark_conf == {}
    assert spec.conn_id == "spark_default"
    assert spec.master is None
    assert spec.trigger_interval == 5.0
    assert spec.stop_timeout == 120.0
    assert spec.startup_timeout == 300.0
    assert spec.heartbeat_interval == 5.0
    assert spec.is_bundled is True


def test_bundled_jobs_constant() -> None:
    assert BUNDLED_JOBS == {"events_etl", "events_etl_v2", "device_signals", "device_signals_v2"}
    assert isinstance(BUNDLED_JOBS, frozenset)


def test_direct_construction_validates_and_normalises() -> None:
    spec = StreamSpec(
        name="s1",
        application="/opt/jobs/my_job.py",
        checkpoint_location="hdfs://nn:8020/ckpt/s1",
        control_location="hdfs://nn:8020/control",
        application_args=["--rate", 5, True],  # type: ignore[arg-type]
        spark_conf={"spark.sql.shuffle.partitions": 4},
        trigger_interval="500ms",  # type: ignore[arg-type]
    )
    assert spec.application_args == ("--rate", "5", "True")
    assert spec.spark_conf == {"spark.sql.shuffle.partitions": "4"}
    assert type(spec.spark_conf) is dict
    assert spec.trigger_interval == pytest.approx(0.5)
    assert spec.is_bundled is False
    with pytest.raises(SpecError) as exc_info:
        StreamSpec(name="../x", application="events_etl", checkpoint_location="/c",
                   control_location="/ctl")
    assert exc_info.value.field == "name"


def test_spec_is_frozen_and_hashable() -> None:
    spec = StreamSpec.from_dict(make(spark_conf={"spark.a": "1"}))
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]
    assert hash(spec) == hash(StreamSpec.from_dict(make(spark_conf={"spark.a": "1"})))


def test_spark_conf_is_a_copy() -> None:
    conf = {"spark.a": "1"}
    spec = StreamSpec.from_dict(make(spark_conf=conf))
    conf["spark.b"] = "2"
    assert spec.spark_conf == {"spark.a": "1"}


def test_none_for_optional_field_means_default() -> None:
    spec = StreamSpec.from_dict(
        make(master=None, spark_conf=None, application_args=None, trigger_interval=None)
    )
    assert spec.master is None
    assert spec.spark_conf == {}
    assert spec.application_args == ()
    assert spec.trigger_interval == 5.0


# --------------------------------------------------------------------------- YAML

YAML_TEXT = """
name: orders
application: device_signals_v2
checkpoint_location: file:///data/ckpt/orders
control_location: file:///data/control
version: v2
application_args: ["--topic", orders, 3]
spark_conf:
  spark.sql.shuffle.partitions: 8
  spark.streaming.stopGracefullyOnShutdown: true
master: local[2]
trigger_interval: 10 seconds
stop_timeout: 2 minutes
"""


def _check_yaml_spec(spec: StreamSpec) -> None:
    assert spec.application == "device_signals_v2"
    assert spec.version == "v2"
    assert spec.application_args == ("--topic", "orders", "3")
    assert spec.spark_conf == {
        "spark.sql.shuffle.partitions": "8",
        "spark.streaming.stopGracefullyOnShutdown": "true",
    }
    assert spec.master == "local[2]"
    assert spec.trigger_interval == 10.0
    assert spec.stop_timeout == 120.0
    assert spec.control_dir == "file:///data/control/orders"


def test_from_yaml_text() -> None:
    _check_yaml_spec(StreamSpec.from_yaml(YAML_TEXT))


@pytest.mark.parametrize("as_str", [False, True], ids=["pathlike", "str-path"])
def test_from_yaml_file(tmp_path: Path, as_str: bool) -> None:
    path = tmp_path / "orders.yaml"
    path.write_text(YAML_TEXT, encoding="utf-8")
    _check_yaml_spec(StreamSpec.from_yaml(str(path) if as_str else path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "must be a mapping, got list"),
        ("just a string", "must be a mapping, got str"),
        ("", "must be a mapping, got an empty document"),
        ("name: [unclosed\n", "invalid YAML:"),
    ],
    ids=["list", "scalar", "empty", "syntax"],
)
def test_from_yaml_bad_documents(text: str, message: str) -> None:
    with pytest.raises(SpecError) as exc_info:
        StreamSpec.from_yaml(text)
    assert exc_info.value.field == "<root>"
    assert message in str(exc_info.value)
    assert str(exc_info.value).startswith("<root>: ")


def test_from_yaml_missing_pathlike_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as exc_info:
        StreamSpec.from_yaml(tmp_path / "nope.yaml")
    assert exc_info.value.field == "<root>"
    assert "cannot read" in exc_info.value.message


def test_from_yaml_validation_error_propagates() -> None:
    with pytest.raises(SpecError) as exc_info:
        StreamSpec.from_yaml(
            YAML_TEXT.replace("trigger_interval: 10 seconds", "trigger_interval: -1")
        )
    assert exc_info.value.field == "trigger_interval"


# --------------------------------------------------------------------------- errors


def test_error_string_starts_with_field() -> None:
    err = spec_error(make(trigger_interval=-1))
    assert str(err) == "trigger_interval: must be >= 0 seconds, got -1"
    assert err.field == "trigger_interval"
    assert err.message == "must be >= 0 seconds, got -1"
    assert isinstance(err, ValueError)
    clone = pickle.loads(pickle.dumps(err))
    assert (clone.field, clone.message, str(clone)) == (err.field, err.message, str(err))


@pytest.mark.parametrize("missing", ["name", "application", "checkpoint_location",
                                     "control_location"])
def test_missing_required_field(missing: str) -> None:
    data = make()
    del data[missing]
    err = spec_error(data)
    assert err.field == missing
    assert str(err) == f"{missing}: is required"


def test_unknown_field_with_suggestion() -> None:
    data = make()
    data["chekpoint_location"] = data.pop("checkpoint_location")
    err = spec_error(data)
    assert err.field == "chekpoint_location"
    assert "unknown field 'chekpoint_location' (allowed: name, application," in str(err)
    assert "heartbeat_interval, master_ui_url, health, deploy_mode, cluster, storage_conn_id, secret_args, spark_runtime, hot_standby, lease_ttl, run_as_user, assets, py_files," in str(err)
    assert "queue, env_vars, properties_file)" in str(err)
    assert "did you mean 'checkpoint_location'?" in str(err)


def test_unknown_field_without_suggestion() -> None:
    err = spec_error(make(zzzzzz=1))
    assert err.field == "zzzzzz"
    assert "unknown field 'zzzzzz'" in str(err)
    assert "did you mean" not in str(err)


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        (["not", "a", "mapping"], "<root>", "must be a mapping, got list"),
        ({**MINIMAL, 1: "x"}, "<root>", "field names must be strings, got int"),
    ],
    ids=["not-mapping", "non-str-key"],
)
def test_from_dict_root_errors(data: Any, field: str, message: str) -> None:
    err = spec_error(data)
    assert err.field == field
    assert message in err.message


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"name": 42}, "name", "must be a string, got int"),
        ({"name": ""}, "name", "must be non-empty"),
        ({"name": " orders"}, "name", "must not have leading or trailing whitespace"),
        ({"name": "a/b"}, "name", "must be a safe path segment"),
        ({"name": ".hidden"}, "name", "must be a safe path segment"),
        ({"name": "x" * 65}, "name", "must be a safe path segment"),
        ({"version": "v 2"}, "version", "must be a safe path segment"),
        ({"version": "v2\n"}, "version", "leading or trailing whitespace"),
        ({"version": 2}, "version", "must be a string, got int"),
        ({"conn_id": ""}, "conn_id", "must be non-empty"),
        ({"conn_id": ["x"]}, "conn_id", "must be a string, got list"),
        ({"master": ""}, "master", "must be non-empty"),
        ({"master": "mesos://h:5050"}, "master", "got 'mesos://h:5050'"),
        ({"master": "local[two]"}, "master", "must be local"),
        ({"application": "events_etl_v3"}, "application",
         "unknown bundled job 'events_etl_v3' (bundled: device_signals, device_signals_v2, "
         "events_etl, events_etl_v2) and not an absolute path to a .py file"),
        ({"application": "jobs/my_job.py"}, "application", "unknown bundled job"),
        ({"application": "/opt/jobs/my_job.sh"}, "application", "unknown bundled job"),
        ({"application": "/opt/jobs/.py"}, "application", "unknown bundled job"),
        ({"application": " events_etl"}, "application", "leading or trailing whitespace"),
        ({"application_args": "--flag"}, "application_args", "must be a list of strings, got str"),
        ({"application_args": ["a", "b", {"k": 1}]}, "application_args[2]", "got dict"),
        ({"application_args": [None]}, "application_args[0]", "got NoneType"),
        ({"application_args": ["a", ["b"]]}, "application_args[1]", "got list"),
        ({"spark_conf": ["spark.a"]}, "spark_conf", "must be a mapping, got list"),
        ({"spark_conf": {"sql.shuffle": "1"}}, "spark_conf.sql.shuffle",
         "key must start with 'spark.'"),
        ({"spark_conf": {"": "1"}}, "spark_conf", "keys must be non-empty strings"),
        ({"spark_conf": {1: "1"}}, "spark_conf", "keys must be non-empty strings, got int"),
        ({"spark_conf": {"spark.x": None}}, "spark_conf.spark.x", "got NoneType"),
        ({"spark_conf": {"spark.x": [1]}}, "spark_conf.spark.x", "got list"),
        ({"trigger_interval": -1}, "trigger_interval", "must be >= 0 seconds, got -1"),
        ({"trigger_interval": "-2 seconds"}, "trigger_interval", "got -2"),
        ({"trigger_interval": True}, "trigger_interval", "got bool"),
        ({"trigger_interval": "5 parsecs"}, "trigger_interval", "invalid duration '5 parsecs'"),
        ({"stop_timeout": 0}, "stop_timeout", "must be > 0 seconds, got 0"),
        ({"startup_timeout": "0s"}, "startup_timeout", "must be > 0 seconds, got 0"),
        ({"heartbeat_interval": 0}, "heartbeat_interval", "must be > 0 seconds"),
        ({"heartbeat_interval": "61s"}, "heartbeat_interval", "must be <= 60 seconds, got 61"),
        ({"heartbeat_interval": "2 minutes"}, "heartbeat_interval", "got 120"),
        ({"lease_ttl": "29s"}, "lease_ttl", "must be >= 30 seconds (at least 30 s and 6 heartbeats of 5 s), got 29"),
        ({"lease_ttl": 40, "heartbeat_interval": 10}, "lease_ttl", "must be >= 60 seconds"),
        ({"lease_ttl": "soon"}, "lease_ttl", "invalid duration 'soon'"),
        ({"lease_ttl": True}, "lease_ttl", "got bool"),
        ({"lease_ttl": float("nan")}, "lease_ttl", "must be a finite number"),
        ({"stop_timeout": float("nan")}, "stop_timeout", "must be a finite number"),
        ({"stop_timeout": float("inf")}, "stop_timeout", "must be a finite number"),
    ],
)
def test_field_errors(overrides: dict[str, Any], field: str, message: str) -> None:
    err = spec_error(make(**overrides))
    assert err.field == field
    assert message in err.message
    assert str(err).startswith(f"{field}: ")


# --------------------------------------------------------------------------- locations


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("data/ckpt",
         "must be an absolute path or a file://, hdfs:// or webhdfs:// URI, got 'data/ckpt'"),
        ("./ckpt", "must be an absolute path"),
        ("s3a://bucket/ckpt", "unsupported scheme 's3a'"),
        ("gs://bucket/ckpt", "unsupported scheme 'gs'"),
        ("/data/../etc/ckpt", "must not contain '..' segments"),
        ("hdfs://nn/data/../ckpt", "must not contain '..' segments"),
        ("file://data/ckpt", "file:// URI must have an empty host"),
        ("hdfs://nn", "must be an absolute path"),
        ("hdfs://nn/ckpt?x=1", "must not contain a query or fragment"),
        ("/data/ckpt ", "leading or trailing whitespace"),
        ("", "must be non-empty"),
    ],
)
@pytest.mark.parametrize("field", ["checkpoint_location", "control_location"])
def test_bad_locations(field: str, location: str, message: str) -> None:
    err = spec_error(make(**{field: location}))
    assert err.field == field
    assert message in err.message


@pytest.mark.parametrize(
    "location",
    [
        "/data/ckpt",
        "file:///data/ckpt",
        "file://localhost/data/ckpt",
        "hdfs://namenode:8020/data/ckpt",
        "hdfs:///data/ckpt",
        "webhdfs://namenode:9870/data/ckpt",
        "HDFS://namenode/data/ckpt",
    ],
)
def test_good_locations(location: str) -> None:
    spec = StreamSpec.from_dict(make(checkpoint_location=location))
    assert spec.checkpoint_location == location


@pytest.mark.parametrize(
    ("checkpoint", "control"),
    [
        ("/data/control/orders", "/data/control"),  # equal to control dir
        ("/data/control/orders/ckpt", "/data/control"),  # inside control dir
        ("/data/control", "/data/control"),  # control dir inside checkpoint
        ("/data", "/data/control"),  # control dir inside checkpoint
        ("/data/control//orders/", "/data/control/"),  # normalised before comparing
        ("file:///data/control/orders", "/data/control"),  # file:// == local path
        ("/data/./control/orders", "file://localhost/data/control"),
        ("hdfs://nn/a/orders", "hdfs://NN/a"),  # host case-insensitive
    ],
)
def test_checkpoint_overlapping_control_dir(checkpoint: str, control: str) -> None:
    err = spec_error(make(checkpoint_location=checkpoint, control_location=control))
    assert err.field == "checkpoint_location"
    assert "must not be equal to or nested with the stream's control dir" in err.message


@pytest.mark.parametrize(
    ("checkpoint", "control"),
    [
        ("/data/control/orders-ckpt", "/data/control"),  # sibling, common prefix only
        ("/data/control/other", "/data/control"),  # another stream's name
        ("hdfs://nn1/data/control/orders", "hdfs://nn2/data/control"),  # other cluster
        ("hdfs://nn/data/control/orders", "/data/control"),  # other filesystem
    ],
)
def test_checkpoint_not_overlapping(checkpoint: str, control: str) -> None:
    spec = StreamSpec.from_dict(make(checkpoint_location=checkpoint, control_location=control))
    assert spec.checkpoint_location == checkpoint


@pytest.mark.parametrize(
    ("control_location", "expected"),
    [
        ("/data/control", "/data/control/orders"),
        ("/data/control/", "/data/control/orders"),
        ("/", "/orders"),
        ("hdfs://nn:8020/ctl", "hdfs://nn:8020/ctl/orders"),
        ("file:///", "file:///orders"),
    ],
)
def test_control_dir(control_location: str, expected: str) -> None:
    spec = StreamSpec.from_dict(
        make(control_location=control_location, checkpoint_location="hdfs://other/ckpt")
    )
    assert spec.control_dir == expected


# --------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (5, 5.0),
        (2.5, 2.5),
        ("5", 5.0),
        ("5 seconds", 5.0),
        ("1 second", 1.0),
        ("10s", 10.0),
        ("10 sec", 10.0),
        ("500 milliseconds", 0.5),
        ("250ms", 0.25),
        ("2 minutes", 120.0),
        ("1 minute", 60.0),
        ("1m", 60.0),
        ("1.5 min", 90.0),
        ("1h", 3600.0),
        ("  3 Seconds ", 3.0),
        (".5s", 0.5),
    ],
)
def test_parse_duration(value: Any, seconds: float) -> None:
    result = parse_duration(value, "trigger_interval")
    assert result == pytest.approx(seconds)
    assert type(result) is float


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "got bool"),
        (None, "got NoneType"),
        ([5], "got list"),
        ("", "invalid duration ''"),
        ("five seconds", "invalid duration"),
        ("5 fortnights", "invalid duration"),
        ("5 s s", "invalid duration"),
    ],
)
def test_parse_duration_errors(value: Any, message: str) -> None:
    with pytest.raises(SpecError) as exc_info:
        parse_duration(value, "stop_timeout")
    assert exc_info.value.field == "stop_timeout"
    assert message in exc_info.value.message


def test_lease_ttl_is_the_drivers_lease_and_left_out_when_unset() -> None:
    from airflow_streaming.hooks.planning import lease_ttl

    default = StreamSpec.from_dict(make())
    assert default.lease_ttl is None and "lease_ttl" not in default.to_dict()  # stored specs stay as they were
    assert lease_ttl(default) == 120.0
    assert lease_ttl(StreamSpec.from_dict(make(heartbeat_interval="20s"))) == 240.0
    short = StreamSpec.from_dict(make(lease_ttl="30 seconds"))
    assert short.lease_ttl == 30.0 and type(short.lease_ttl) is float and lease_ttl(short) == 30.0
    assert short.to_dict()["lease_ttl"] == 30.0 and StreamSpec.from_dict(short.to_dict()) == short


def test_durations_stored_as_float_seconds() -> None:
    spec = StreamSpec.from_dict(
        make(trigger_interval=0, stop_timeout="90s", startup_timeout="10 minutes",
             heartbeat_interval="60 seconds")
    )
    assert (spec.trigger_interval, spec.stop_timeout, spec.startup_timeout,
            spec.heartbeat_interval) == (0.0, 90.0, 600.0, 60.0)
    assert all(type(v) is float for v in (spec.trigger_interval, spec.stop_timeout))


# --------------------------------------------------------------------------- spark_conf / master


def test_spark_conf_coercion() -> None:
    spec = StreamSpec.from_dict(
        make(spark_conf={
            "spark.sql.shuffle.partitions": 8,
            "spark.memory.fraction": 0.6,
            "spark.a.enabled": True,
            "spark.b.enabled": False,
            "spark.app.name": "orders",
        })
    )
    assert spec.spark_conf == {
        "spark.sql.shuffle.partitions": "8",
        "spark.memory.fraction": "0.6",
        "spark.a.enabled": "true",
        "spark.b.enabled": "false",
        "spark.app.name": "orders",
    }


@pytest.mark.parametrize(
    "master",
    ["local", "local[2]", "local[*]", "spark://host:7077", "yarn", "k8s://https://api:6443"],
)
def test_valid_masters(master: str) -> None:
    assert StreamSpec.from_dict(make(master=master)).master == master


# ----------------------------------------------------------------- round trip / with_version


def test_to_dict_round_trip_and_json_safe() -> None:
    spec = StreamSpec.from_yaml(YAML_TEXT)
    data = spec.to_dict()
    assert data["application_args"] == ["--topic", "orders", "3"]
    assert data["trigger_interval"] == 10.0
    assert set(data) == {
        "name", "application", "checkpoint_location", "control_location", "version",
        "application_args", "spark_conf", "conn_id", "master", "trigger_interval",
        "stop_timeout", "startup_timeout", "heartbeat_interval", "master_ui_url", "health",
        "deploy_mode", "cluster", "storage_conn_id",
    }
    assert json.loads(json.dumps(data)) == data
    assert StreamSpec.from_dict(data) == spec
    assert StreamSpec.from_dict(json.loads(json.dumps(data))) == spec
    minimal = StreamSpec.from_dict(MINIMAL)
    assert StreamSpec.from_dict(minimal.to_dict()) == minimal


def test_with_version() -> None:
    spec = StreamSpec.from_dict(make(application_args=["a"], spark_conf={"spark.x": "1"}))
    v2 = spec.with_version("v2")
    assert v2.version == "v2"
    assert (v2.application, v2.application_args, v2.spark_conf) == (
        "events_etl", ("a",), {"spark.x": "1"})
    assert spec.version == "v1"  # original untouched
    v3 = spec.with_version("v3", application="events_etl_v2", application_args=["b", 2],
                           spark_conf={"spark.y": True})
    assert (v3.version, v3.application, v3.application_args, v3.spark_conf) == (
        "v3", "events_etl_v2", ("b", "2"), {"spark.y": "true"})
    assert v3.name == spec.name and v3.checkpoint_location == spec.checkpoint_location


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"version": "../v2"}, "version"),
        ({"version": "v2", "application": "nope"}, "application"),
        ({"version": "v2", "spark_conf": {"x": "1"}}, "spark_conf.x"),
        ({"version": "v2", "application_args": [{}]}, "application_args[0]"),
    ],
)
def test_with_version_validates(kwargs: dict[str, Any], field: str) -> None:
    spec = StreamSpec.from_dict(MINIMAL)
    with pytest.raises(SpecError) as exc_info:
        spec.with_version(**kwargs)
    assert exc_info.value.field == field


def test_example_yaml_spec_in_dags_is_valid():
    from pathlib import Path

    from airflow_streaming.spec import as_spec

    spec = as_spec(str(Path(__file__).resolve().parents[2] / "dags" / "specs" / "device_signals.yaml"))
    assert spec.application == "device_signals" and spec.trigger_interval == 5.0 and spec.stop_timeout == 120.0
    assert spec.spark_conf == {"spark.sql.shuffle.partitions": "4"}


def test_health_thresholds_are_validated_naming_the_key():
    base = {"name": "s", "application": "events_etl", "checkpoint_location": "/c", "control_location": "/ctl"}
    spec = StreamSpec.from_dict({**base, "health": {"rate_ratio": 1.5, "min_batches": 2}})
    assert spec.health == {"rate_ratio": 1.5, "min_batches": 2}
    with pytest.raises(SpecError) as err:
        StreamSpec.from_dict({**base, "health": {"rate_ration": 1.5}})
    assert err.value.field == "health.rate_ration" and "unknown health threshold" in str(err.value)
    with pytest.raises(SpecError) as err:
        StreamSpec.from_dict({**base, "health": {"min_batches": -1}})
    assert err.value.field == "health.min_batches" and "must be >= 0" in str(err.value)


# Trust boundary (issue 25, item 9): snapshots under the control dir are pruned, so a checkpoint that the
# overlap check let sit inside it could be deleted. Two spellings of one place must compare equal.
@pytest.mark.parametrize(
    ("checkpoint", "control"),
    [
        ("hdfs://nn:8020/ctl/orders", "hdfs://nn/ctl"),  # hdfs's default port
        ("hdfs://nn/ctl/orders/state", "hdfs://NN:8020/ctl/"),
        ("webhdfs://nn:9870/ctl/orders", "webhdfs://nn/ctl"),  # webhdfs's default port
        ("webhdfs://nn/ctl/orders", "hdfs://nn:8020/ctl"),  # one NameNode's HTTP and RPC doors
        ("hdfs://nn/ctl%2Forders", "hdfs://nn/ctl"),  # decoded path
        ("hdfs://nn/%63tl/orders", "hdfs://nn/ctl"),
        ("file:///data/%63ontrol/orders", "/data/control"),
        ("hdfs://nn//ctl///orders//", "hdfs://nn/ctl/"),  # slashes
    ],
)
def test_the_overlap_check_compares_normalised_locations(checkpoint: str, control: str) -> None:
    err = spec_error(make(checkpoint_location=checkpoint, control_location=control))
    assert err.field == "checkpoint_location" and "nested with the stream's control dir" in err.message


@pytest.mark.parametrize("location", ["hdfs://nn/ctl/%2e%2e/x", "hdfs://nn/a/%2E%2E", "webhdfs://nn/a/..%2Fb"])
def test_encoded_dot_dot_is_refused(location: str) -> None:
    assert "'..'" in spec_error(make(checkpoint_location=location)).message


@pytest.mark.parametrize("location", ["hdfs://nn:port/x", "hdfs://etl@nn/x"])
def test_bad_hosts_are_refused(location: str) -> None:
    assert spec_error(make(checkpoint_location=location)).field == "checkpoint_location"


def test_locations_on_other_ports_or_hosts_do_not_overlap() -> None:
    from airflow_streaming.spec import locations_overlap

    assert not locations_overlap("hdfs://nn:9000/ctl/orders", "hdfs://nn/ctl")  # another NameNode port
    assert not locations_overlap("webhdfs://nn:50070/ctl/orders", "webhdfs://nn:9870/ctl")
    assert not locations_overlap("hdfs://nn2/ctl/orders", "webhdfs://nn/ctl")
    assert locations_overlap("hdfs://nn:8020/ctl/x", "hdfs://nn/ctl")


# --------------------------------------------------------------------------- assets

def test_assets_are_normalised_and_round_trip() -> None:
    spec = StreamSpec.from_dict(make(assets={"sources": ["kafka://broker:9092/orders"],
                                             "sinks": ["FILE:///data/out/orders/", "s3://lake/orders?b=2&a=1#x"]}))
    assert spec.assets == {"sources": ("kafka://broker:9092/orders",),
                           "sinks": ("file:///data/out/orders", "s3://lake/orders?a=1&b=2")}
    stored = spec.to_dict()["assets"]
    assert stored == {"sources": ["kafka://broker:9092/orders"],
                      "sinks": ["file:///data/out/orders", "s3://lake/orders?a=1&b=2"]}
    assert StreamSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert StreamSpec.from_dict(make(assets={"sinks": ["file:///o"]})).assets == {"sources": (), "sinks": ("file:///o",)}


@pytest.mark.parametrize("assets", [None, {}, {"sources": [], "sinks": []}])
def test_no_assets_leave_the_stored_spec_as_it_was(assets: Any) -> None:
    spec = StreamSpec.from_dict(make(assets=assets))
    assert spec.assets == {}
    assert "assets" not in spec.to_dict()
    assert spec.to_dict() == StreamSpec.from_dict(MINIMAL).to_dict()


@pytest.mark.parametrize(("assets", "field", "message"), [
    ({"sinks": ["/data/out"]}, "assets.sinks[0]", "must be a URI with a scheme"),
    ({"sinks": ["file:///o", "airflow://x"]}, "assets.sinks[1]", "reserved"),
    ({"sources": ["postgres://db.example/orders/public"]}, "assets.sources[0]", "database, schema and table"),
    ({"sinks": ["postgres:///orders/public/t"]}, "assets.sinks[0]", "must name a host"),
    ({"sinks": ["s3:///key"]}, "assets.sinks[0]", "must name a bucket"),
    ({"sinks": ["s3://user:pw@lake/k"]}, "assets.sinks[0]", "password"),
    ({"sinks": ["kafka://broker:port/t"]}, "assets.sinks[0]", "not a valid URI"),
    ({"sinks": [" "]}, "assets.sinks[0]", "empty"),
    ({"sinks": ["s3://b/" + "k" * 1500]}, "assets.sinks[0]", "1500"),
    ({"sinks": [3]}, "assets.sinks[0]", "must be an Asset URI string"),
    ({"sinks": ["file:///o", "file:///o/"]}, "assets.sinks[1]", "repeats"),
    ({"sinks": "file:///o"}, "assets.sinks", "must be a list"),
    ({"outputs": ["file:///o"]}, "assets.outputs", "unknown key"),
    (["file:///o"], "assets", "must be a mapping"),
])
def test_bad_assets_name_the_entry(assets: Any, field: str, message: str) -> None:
    err = spec_error(make(assets=assets))
    assert err.field == field
    assert message in str(err)


def test_a_lease_ttl_shorter_than_twice_the_control_storages_longest_call_is_refused_before_a_submit() -> None:
    """A driver's renewal on WebHDFS may hang the connection's connect + read timeouts at each NameNode; half the
    ttl must exceed that, or a hung renewal could land after the driver gave its lease up (docs/failover.md)."""
    import types

    from airflow_streaming.control.webhdfs_connection import WebHdfsSettings
    from airflow_streaming.hooks.planning import lease_ttl_problem

    one = types.SimpleNamespace(settings=WebHdfsSettings(hosts=("nn",), source="connection 'webhdfs_default'"))
    two = types.SimpleNamespace(settings=WebHdfsSettings(hosts=("nn1", "nn2"), connect_timeout=3, read_timeout=7))
    local = object()
    assert lease_ttl_problem(StreamSpec.from_dict(make()), one) is None  # the default: not the spec's choice
    assert lease_ttl_problem(StreamSpec.from_dict(make(lease_ttl=30)), local) is None  # local files: no timeouts
    problem = lease_ttl_problem(StreamSpec.from_dict(make(lease_ttl=80)), one)
    assert problem == ("half of it (40s) must exceed the longest call to the control storage, 40s (the 10s connect "
                       "and 30s read timeouts of connection 'webhdfs_default', at 1 NameNode(s)): set lease_ttl above "
                       "80s, or lower the connection's 'connect_timeout'/'timeout' extras")
    assert lease_ttl_problem(StreamSpec.from_dict(make(lease_ttl=81)), one) is None
    assert "longest call to the control storage, 20s" in lease_ttl_problem(StreamSpec.from_dict(make(lease_ttl=40)), two)
    assert lease_ttl_problem(StreamSpec.from_dict(make(lease_ttl=41)), two) is None


def test_the_default_lease_ttl_grows_above_twice_the_control_storages_longest_call() -> None:
    """The default ttl (``max(120, 12 x heartbeat)``) obeys the rule an explicit one must obey: with two NameNodes
    at the default 10 s + 30 s timeouts one call may hang 80 s, more than the default's half (60 s): 170 s then."""
    import types

    from airflow_streaming.control.webhdfs_connection import WebHdfsSettings
    from airflow_streaming.hooks.planning import lease_ttl, lease_ttl_problem

    default = StreamSpec.from_dict(make())
    one = types.SimpleNamespace(settings=WebHdfsSettings(hosts=("nn",)))
    two = types.SimpleNamespace(settings=WebHdfsSettings(hosts=("nn1", "nn2")))
    short = types.SimpleNamespace(settings=WebHdfsSettings(hosts=("nn1", "nn2"), connect_timeout=3, read_timeout=7))
    assert lease_ttl(default) == lease_ttl(default, object()) == lease_ttl(default, one) == 120.0
    assert lease_ttl(default, two) == 170.0 and 170.0 / 2 > 80
    assert lease_ttl(default, short) == 120.0
    assert lease_ttl(StreamSpec.from_dict(make(heartbeat_interval="20s")), two) == 240.0  # 12 heartbeats already
    assert lease_ttl(StreamSpec.from_dict(make(lease_ttl=81)), two) == 81.0  # the spec's own: refused, not changed
    assert lease_ttl_problem(StreamSpec.from_dict(make(lease_ttl=81)), two) is not None


def test_the_hooks_preflight_refuses_such_a_lease_ttl_naming_the_field(tmp_path) -> None:
    from airflow_streaming.hooks.streaming_job import SparkStreamHook
    from airflow_streaming.spec import SpecError

    spec = StreamSpec.from_dict(make(control_location="webhdfs://127.0.0.1:9/ctl", lease_ttl="60 seconds",
                                     checkpoint_location=str(tmp_path / "ckpt")))
    with pytest.raises(SpecError, match=r"^lease_ttl: half of it \(30s\) must exceed .* 40s"):
        SparkStreamHook(spec).preflight()  # before anything is written or started: port 9 is never asked


def test_the_driver_is_started_with_the_storage_aware_default_ttl(tmp_path, monkeypatch) -> None:
    """The ttl a driver gets on its command line is :func:`lease_ttl` of its hook's own control storage."""
    import dataclasses

    from airflow_streaming.hooks.streaming_job import SparkStreamHook

    spec = StreamSpec.from_dict(make(control_location="webhdfs://127.0.0.1:9/ctl", master="local[1]",
                                     checkpoint_location=str(tmp_path / "ckpt")))
    hook = SparkStreamHook(spec)
    storage = hook.storage.unguarded

    def ttl() -> str:
        args = hook.launch_plan("r1").runtime_args
        return args[args.index("--lease-ttl") + 1]

    assert ttl() == "120.0"  # one NameNode: a call hangs at most 40 s, under the default's half
    monkeypatch.setattr(storage, "settings", dataclasses.replace(storage.settings, hosts=("nn1", "nn2")))
    assert ttl() == "170.0"
