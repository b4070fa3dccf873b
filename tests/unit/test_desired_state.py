"""Unit tests for airflow_streaming.lifecycle.desired_state (pure Python, no Spark, no Airflow)."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

import pytest

from airflow_streaming.lifecycle.desired_state import (
    DesiredState,
    DesiredStateError,
    PendingChange,
    Probation,
    load_desired_state,
    pending_changes,
)
from airflow_streaming.spec import SpecError

GOOD = """\
defaults:
  control_location: /data/control
  master: local[2]
  spark_conf: {spark.sql.shuffle.partitions: 4, spark.ui.enabled: false}
streams:
  device-signals:
    version: v2
    allow_warnings: true
    probation: {min_batches: 3, window: 2 minutes}
    spec:
      checkpoint_location: /data/ckpt/device-signals
      trigger_interval: 10 seconds
      spark_conf: {spark.sql.shuffle.partitions: 8}
    versions:
      v1: {application: device_signals, application_args: [--input, /in, --output, /out]}
      v2:
        application: device_signals_v2
        application_args: [--input, /in2]
        spark_conf: {spark.ui.enabled: true}
      v3:
        transition: parallel
        name: device-signals-v3
        checkpoint_location: /data/ckpt/device-signals-v3
        application: device_signals_v2
  orders:
    version: v1
    spec: {checkpoint_location: /data/ckpt/orders}
    versions:
      v1: {application: events_etl}
  alerts:
    version: v1
    versions:
      v1: {application: events_etl, checkpoint_location: /data/ckpt/alerts}
"""

MINIMAL_STREAM = """\
streams:
  s:
    version: v1
    versions:
      v1: {application: events_etl, checkpoint_location: /c/s, control_location: /ctl}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "desired_state.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_error(tmp_path: Path, text: str) -> DesiredStateError:
    with pytest.raises(DesiredStateError) as exc_info:
        load_desired_state(write(tmp_path, text))
    return exc_info.value


# --------------------------------------------------------------------------- loading and merging


def test_good_file_merges_defaults_stream_spec_and_version(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    state = load_desired_state(path)
    assert state.path == str(path)
    target = state.target("device-signals")
    assert (target.name, target.version, target.transition) == ("device-signals", "v2", "in_place")
    assert target.allow_warnings is True
    assert target.probation == Probation(min_batches=3, window_s=120.0)
    assert target.versions == ("v1", "v2", "v3")
    spec = target.spec
    assert (spec.name, spec.version, spec.application) == ("device-signals", "v2", "device_signals_v2")
    assert spec.control_location == "/data/control" and spec.master == "local[2]"
    assert spec.checkpoint_location == "/data/ckpt/device-signals"
    assert spec.trigger_interval == 10.0
    assert spec.application_args == ("--input", "/in2")  # lists replaced, not merged
    # spark_conf merged key by key: defaults < stream spec < version
    assert spec.spark_conf == {"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "true"}
    assert target.spec_for("v2") == spec
    v1 = target.spec_for("v1")
    assert v1.version == "v1" and v1.application_args == ("--input", "/in", "--output", "/out")
    assert v1.spark_conf == {"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"}


def test_parallel_version_has_its_own_name_and_checkpoint(tmp_path: Path) -> None:
    target = load_desired_state(write(tmp_path, GOOD)).target("device-signals")
    v3 = target.spec_for("v3")
    assert (v3.name, v3.version) == ("device-signals-v3", "v3")
    assert v3.checkpoint_location == "/data/ckpt/device-signals-v3"
    assert v3.control_dir == "/data/control/device-signals-v3"
    assert target.transition_for("v3") == "parallel" and target.transition_for("v1") == "in_place"


def test_defaults_and_file_order(tmp_path: Path) -> None:
    state = load_desired_state(write(tmp_path, GOOD))
    assert list(state.streams) == ["device-signals", "orders", "alerts"]
    orders = state.target("orders")
    assert orders.allow_warnings is False
    assert orders.probation == Probation(min_batches=2, window_s=300.0)
    assert orders.spec.trigger_interval == 5.0  # the StreamSpec default
    assert state.target("alerts").spec.checkpoint_location == "/data/ckpt/alerts"


def test_mapping_source_and_pickling(tmp_path: Path) -> None:
    import yaml

    state = load_desired_state(yaml.safe_load(GOOD))
    assert isinstance(state, DesiredState) and state.path is None
    assert state.target("orders").spec.application == "events_etl"
    err = DesiredStateError("streams.x.version", "boom")
    assert isinstance(err, SpecError) and str(err) == "streams.x.version: boom"
    copy = pickle.loads(pickle.dumps(err))
    assert (type(copy), copy.field, copy.message) == (DesiredStateError, "streams.x.version", "boom")


def test_unknown_stream_and_version_lookups(tmp_path: Path) -> None:
    state = load_desired_state(write(tmp_path, GOOD))
    with pytest.raises(DesiredStateError) as exc_info:
        state.target("order")
    assert exc_info.value.field == "stream"
    assert "device-signals, orders, alerts" in exc_info.value.message
    assert "did you mean 'orders'" in exc_info.value.message
    target = state.target("orders")
    for lookup in (target.spec_for, target.transition_for):
        with pytest.raises(DesiredStateError) as exc_info:
            lookup("v9")
        assert exc_info.value.field == "streams.orders.versions"
        assert "'v9'" in exc_info.value.message and "v1" in exc_info.value.message


# --------------------------------------------------------------------------- pending changes


def test_pending_changes(tmp_path: Path) -> None:
    state = load_desired_state(write(tmp_path, GOOD))
    deployed = {"device-signals": "v1", "orders": "v1", "unmanaged": "v7"}
    assert pending_changes(state, deployed) == [
        PendingChange("device-signals", "v1", "v2", "in_place"),
        PendingChange("alerts", None, "v1", "in_place"),  # never deployed: a deploy
    ]
    assert pending_changes(state, {"device-signals": "v2", "orders": "v1", "alerts": "v1"}) == []
    first = pending_changes(state, {"orders": None})
    assert [c.stream for c in first] == ["device-signals", "orders", "alerts"]
    assert all(c.is_deploy and c.from_version is None for c in first)


def test_pending_change_to_a_parallel_version(tmp_path: Path) -> None:
    state = load_desired_state(write(tmp_path, GOOD.replace("version: v2\n", "version: v3\n", 1)))
    (change,) = pending_changes(state, {"device-signals": "v2", "orders": "v1", "alerts": "v1"})
    assert change == PendingChange("device-signals", "v2", "v3", "parallel")
    assert not change.is_deploy
    assert state.target("device-signals").spec.name == "device-signals-v3"


# --------------------------------------------------------------------------- file-level errors


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(DesiredStateError) as exc_info:
        load_desired_state(missing)
    assert exc_info.value.field == "<root>"
    assert str(missing) in exc_info.value.message and "does not exist" in exc_info.value.message


def test_yaml_text_is_not_accepted() -> None:
    with pytest.raises(DesiredStateError, match="not YAML text"):
        load_desired_state(MINIMAL_STREAM)


def test_yaml_syntax_error_names_path_and_line(tmp_path: Path) -> None:
    err = load_error(tmp_path, "streams:\n  s:\n    version: [v1\n    versions: {}\n")
    assert err.field == "<root>"
    assert "desired_state.yaml" in err.message and "invalid YAML" in err.message
    assert "line 4" in err.message


@pytest.mark.parametrize(("text", "got"), [("- a\n- b\n", "list"), ("", "an empty document")])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, got: str) -> None:
    err = load_error(tmp_path, text)
    assert err.field == "<root>" and f"must be a mapping, got {got}" in err.message


def test_unknown_top_level_key(tmp_path: Path) -> None:
    err = load_error(tmp_path, "default: {}\n" + MINIMAL_STREAM)
    assert err.field == "default"
    assert "unknown key" in err.message and "did you mean 'defaults'" in err.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("defaults: {}\n", "is required"),
        ("streams: {}\n", "at least one stream"),
        ("streams: [a, b]\n", "must be a mapping, got list"),
    ],
)
def test_streams_missing_empty_or_not_a_mapping(tmp_path: Path, text: str, message: str) -> None:
    err = load_error(tmp_path, text)
    assert err.field == "streams" and message in err.message


# --------------------------------------------------------------------------- per-stream errors


def test_unknown_stream_key(tmp_path: Path) -> None:
    text = MINIMAL_STREAM.replace("    version: v1\n", "    version: v1\n    allow_warning: true\n")
    err = load_error(tmp_path, text)
    assert err.field == "streams.s.allow_warning"
    assert "did you mean 'allow_warnings'" in err.message


def test_unknown_key_in_defaults_names_defaults(tmp_path: Path) -> None:
    err = load_error(tmp_path, "defaults: {chekpoint_location: /x}\n" + MINIMAL_STREAM)
    assert err.field == "defaults.chekpoint_location"
    assert "did you mean 'checkpoint_location'" in err.message


def test_wanted_version_not_listed(tmp_path: Path) -> None:
    err = load_error(tmp_path, MINIMAL_STREAM.replace("version: v1", "version: v2"))
    assert err.field == "streams.s.version"
    assert "'v2' is not a listed version (listed: v1)" in err.message


def test_bad_transition(tmp_path: Path) -> None:
    err = load_error(tmp_path, MINIMAL_STREAM.replace("{application", "{transition: blue_green, application"))
    assert err.field == "streams.s.versions.v1.transition"
    assert "in_place, parallel" in err.message and "'blue_green'" in err.message


def test_name_without_parallel_transition(tmp_path: Path) -> None:
    err = load_error(tmp_path, MINIMAL_STREAM.replace("{application", "{name: other, application"))
    assert err.field == "streams.s.versions.v1.name"
    assert "transition: parallel" in err.message


def parallel_v2(name: str, checkpoint: str) -> str:
    return MINIMAL_STREAM + (
        f"      v2: {{transition: parallel, name: {name}, checkpoint_location: {checkpoint},\n"
        "           application: events_etl, control_location: /ctl}\n"
    )


def test_parallel_version_needs_its_own_checkpoint(tmp_path: Path) -> None:
    state = load_desired_state(write(tmp_path, parallel_v2("s-v2", "/c/s-v2")))
    assert state.target("s").versions == ("v1", "v2")
    for checkpoint in ("/c/s", "/c/s/", "file:///c/s/inner"):
        err = load_error(tmp_path, parallel_v2("s-v2", checkpoint))
        assert err.field == "streams.s.versions.v2.checkpoint_location"
        assert "'/c/s'" in err.message and "own checkpoint" in err.message


def test_parallel_version_needs_its_own_name(tmp_path: Path) -> None:
    err = load_error(tmp_path, parallel_v2("s", "/c/s-v2"))
    assert err.field == "streams.s.versions.v2.name"
    assert "own stream name" in err.message
    # omitting the name means the stream's own name: same error
    text = parallel_v2("s", "/c/s-v2").replace("name: s, ", "")
    assert load_error(tmp_path, text).field == "streams.s.versions.v2.name"


def with_probation(probation: str) -> str:
    return MINIMAL_STREAM.replace("    versions:", f"    probation: {probation}\n    versions:")


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", "true"])
def test_min_batches_must_be_a_positive_int(tmp_path: Path, value: str) -> None:
    err = load_error(tmp_path, with_probation(f"{{min_batches: {value}}}"))
    assert err.field == "streams.s.probation.min_batches"
    assert "positive integer" in err.message


@pytest.mark.parametrize(
    ("value", "message"), [("soon", "invalid duration 'soon'"), ("0s", "positive duration")]
)
def test_probation_window_must_be_a_duration(tmp_path: Path, value: str, message: str) -> None:
    err = load_error(tmp_path, with_probation(f"{{window: {value}}}"))
    assert err.field == "streams.s.probation.window"
    assert message in err.message


def test_version_spec_error_is_prefixed_and_keeps_the_message(tmp_path: Path) -> None:
    # v2 is not the wanted version: it is validated at load time all the same
    text = MINIMAL_STREAM + (
        "      v2: {application: events_etl, checkpoint_location: /c/s, control_location: /ctl,\n"
        "           application_args: [--in, {a: 1}]}\n"
    )
    err = load_error(tmp_path, text)
    assert err.field == "streams.s.versions.v2.application_args[1]"
    assert err.message == "must be a string, number or boolean, got dict"
    assert isinstance(err, SpecError)


def test_missing_required_spec_field_and_unknown_version_key(tmp_path: Path) -> None:
    err = load_error(tmp_path, MINIMAL_STREAM.replace(", control_location: /ctl", ""))
    assert (err.field, err.message) == ("streams.s.versions.v1.control_location", "is required")
    err = load_error(tmp_path, MINIMAL_STREAM.replace("{application", "{version: v1, application"))
    assert err.field == "streams.s.versions.v1.version" and "unknown key" in err.message
