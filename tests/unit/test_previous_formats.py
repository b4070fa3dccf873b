"""The control files and payloads of the previous version stay readable, and what is written now stays
readable by the previous version.

``data/previous_formats/*.json`` were written by the previous version (the dataclass models, commit
6cc92b2062af5d5ee0a1b28664ea7659b9f4dcc5) with ``data/previous_formats/make_golden.py``. Each test reads
one with the current models, checks the values, and checks that the current models write the very same
JSON document back (same keys, same value types: a float stays a float, an enum its string value), both
from the parsed file and from the same inputs as the golden file was made of.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_streaming.health.verdict import HealthState, HealthVerdict, Reason
from airflow_streaming.lifecycle.record import Action, LifecycleRecord, Probation, Step, previous_spec
from airflow_streaming.lifecycle.snapshot import SnapshotManifest
from airflow_streaming.lifecycle.waits import PROBATION, Wait
from airflow_streaming.notifications.events import EventKind, StreamEvent
from airflow_streaming.supervision.policy import RestartLedger

DATA = Path(__file__).resolve().parent / "data" / "previous_formats"
_spec = importlib.util.spec_from_file_location("previous_formats_golden", DATA / "make_golden.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)  # type: ignore[union-attr]
T0 = golden.T0


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON text: unlike ``==`` on parsed values, ``1`` and ``1.0`` (or ``true``) differ."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("name", sorted(golden.GOLDEN))
def test_the_current_models_write_what_the_previous_version_wrote(name):
    assert same_json(golden.GOLDEN[name](), load(name)), name


def test_lifecycle_record():
    for name in ("lifecycle.json", "lifecycle_terminal.json"):
        doc = load(name)
        rec = LifecycleRecord.from_dict(doc)
        assert same_json(rec.to_dict(), doc), name
        assert (rec.stream, rec.action, rec.id, rec.owner) == ("orders", Action.UPGRADE, "20231114T221320-abc123",
                                                               "dag upgrade_orders run r1")
        assert rec.probation == Probation(min_batches=3, window_s=120.0) and rec.allow_warnings is True
        assert (rec.from_version, rec.to_version, rec.stop_batch, rec.first_new_batch) == ("v1", "v2", 41, 42)
        assert rec.snapshot == load("manifest.json") and rec.created_at == T0
        assert [s["step"] for s in rec.steps][:7] == ["PLANNED", "CHECKED", "STOPPING", "STOPPED", "SNAPSHOTTED",
                                                      "STARTING", "PROBATION"]
        assert rec.steps[7] == {"step": "RESUMED", "at": T0 + 70.0, "detail": "resumed by pid 42 at step PROBATION"}
    rec = LifecycleRecord.from_dict(load("lifecycle.json"))
    assert rec.step is Step.PROBATION and not rec.done and rec.waiting == load("wait.json")
    rec.advance(Step.SUCCEEDED, "HEALTHY after 3 completed batch(es)", now=T0 + 200.0)  # as the runner goes on
    assert same_json(rec.to_dict(), load("lifecycle_terminal.json"))
    assert LifecycleRecord.from_dict(load("lifecycle_terminal.json")).running_version() == "v2"


def test_history():
    history = load("history.json")
    assert [h["id"] for h in history] == ["d1", "20231114T221320-abc123"]
    assert previous_spec(history, "v2") == golden.SPEC_V1
    assert history[1]["snapshot"] == "/d/orders/snapshots/u1" and history[1]["last_batch_before"] == 41


def test_snapshot_manifest():
    doc = load("manifest.json")
    m = SnapshotManifest.from_dict(doc)
    assert (m.checkpoint, m.batch_id, m.sink_metadata, m.files, m.bytes, m.linked, m.method) == (
        "/c/orders", 41, "/o/orders/_spark_metadata", 17, 20480, True, "link")
    assert same_json(m.to_dict(), doc)


def test_restart_ledger():
    doc = load("supervisor.json")
    ledger = RestartLedger.from_dict(doc)
    assert ledger.failures == [T0 + 1.5, T0 + 99.0] and ledger.error_classes == ["STREAM_FAILED", None]
    assert ledger.handled_run_ids == ["run-1", "run-2"] and ledger.healthy_since is None and not ledger.gave_up
    assert same_json(ledger.to_dict(), doc)


def test_wait():
    doc = load("wait.json")
    w = Wait.from_dict(doc)
    assert (w.kind, w.run_id, w.deadline, w.spec) == (PROBATION, "run-2", T0 + 400.0, golden.SPEC_V2)
    assert Probation(**w.params["probation"]) == Probation(3, 120.0)
    assert same_json(w.to_dict(), doc)


def test_health_verdict():
    doc = load("health_verdict.json")
    v = HealthVerdict.from_dict(doc)
    assert v.state is HealthState.FALLING_BEHIND and v.stream == "orders" and v.run_id == "run-2"
    assert v.reasons[0] == Reason("INPUT_FASTER_THAN_PROCESSING", "input 120.0 rows/s > processing 80.0 rows/s",
                                  {"input_rows_per_s": 120.0, "processed_rows_per_s": 80.0, "batches": 4})
    assert v.warnings[0].code == "KAFKA_LAG" and v.metrics["cluster"].startswith("standalone")
    assert same_json(v.to_dict(), doc)


def test_stream_event():
    doc = load("stream_event.json")
    e = StreamEvent.from_dict(doc)
    assert e.kind is EventKind.RESTARTING and (e.stream, e.attempt, e.suppressed_count) == ("orders", 2, 2)
    assert e.links == {"spark_ui": "http://driver:4040"} and e.health_reasons == ["driver exited"]
    assert same_json(e.to_dict(), doc)


# ---------------------------------------------------------------- tolerance, as the previous version's readers

NEWER = {"written_by_a_newer_version": {"x": [1, 2]}}


def test_unknown_keys_of_a_newer_version_are_ignored():
    for name, model in (("lifecycle.json", LifecycleRecord), ("manifest.json", SnapshotManifest),
                        ("supervisor.json", RestartLedger), ("wait.json", Wait),
                        ("health_verdict.json", HealthVerdict), ("stream_event.json", StreamEvent)):
        doc = load(name)
        assert same_json(model.from_dict({**doc, **NEWER}).to_dict(), doc), name


def test_missing_optional_keys_take_their_defaults():
    doc = load("lifecycle.json")
    required = ("stream", "action", "from_spec", "to_spec", "step", "steps")
    rec = LifecycleRecord.from_dict({k: doc[k] for k in required})
    assert rec.probation == Probation() and rec.snapshot is None and rec.owner is None and rec.id
    assert rec.steps == doc["steps"] and rec.step is Step.PROBATION
    assert RestartLedger.from_dict({}) == RestartLedger()
    manifest = load("manifest.json")
    del manifest["method"]
    assert SnapshotManifest.from_dict(manifest).method == "link"
    wait = Wait.from_dict({k: v for k, v in load("wait.json").items() if k in ("kind", "spec", "deadline")})
    assert wait.run_id is None and wait.params == {}
    assert HealthVerdict.from_dict({"state": "IDLE"}) == HealthVerdict(None, HealthState.IDLE, ())
    event = StreamEvent.from_dict({"kind": "failed", "stream": "s", "at": None, "links": None,
                                   "health_reasons": None, "suppressed_count": None})
    assert event.kind is EventKind.FAILED and event.links == {} and event.suppressed_count == 0 and event.at > 0


# ---------------------------------------------------------------- garbage: a named error naming the file and field


def test_a_wrong_typed_ledger_is_a_control_file_error_naming_the_file_and_field(tmp_path):
    from airflow_streaming.control.contract import ControlFileError
    from airflow_streaming.lifecycle.supervisor import load_ledger
    from control_fixtures import deployed_stream

    _, hook = deployed_stream(tmp_path)
    path = f"{hook.paths.root}/supervisor.json"
    for bad, field in (({"failures": [1.0, True]}, "'failures[1]'"), ({"gave_up": "no"}, "'gave_up'"),
                       ({"handled_run_ids": [7]}, "'handled_run_ids[0]'"), ({"healthy_since": "x"}, "'healthy_since'")):
        hook.storage.unguarded.write_atomic(path, json.dumps({**load("supervisor.json"), **bad}).encode())
        with pytest.raises(ControlFileError) as err:
            load_ledger(hook)
        assert path in str(err.value) and f"field {field}" in str(err.value), str(err.value)


def test_a_wrong_typed_lifecycle_record_is_a_control_file_error_naming_the_file_and_field():
    from airflow_streaming.control.contract import ControlFileError
    from airflow_streaming.lifecycle.runner import parse_record

    path = "/d/orders/lifecycle.json"
    doc = load("lifecycle.json")
    for bad, expected in (({"step": "BOGUS"}, "field 'step'"), ({"action": 3}, "field 'action'"),
                          ({"steps": ["x"]}, "field 'steps[0]'"), ({"stop_batch": "41"}, "field 'stop_batch'"),
                          ({"probation": {"min_batches": 0}}, "field 'probation': probation min_batches"),
                          ({"to_spec": None}, "field 'to_spec'"), ({"allow_warnings": 1}, "field 'allow_warnings'")):
        with pytest.raises(ControlFileError) as err:
            parse_record(path, json.dumps({**doc, **bad}).encode())
        assert path in str(err.value) and expected in str(err.value), str(err.value)
    for key in ("step", "steps", "from_spec", "stream"):
        with pytest.raises(ControlFileError, match=f"lacks {key}"):
            parse_record(path, json.dumps({k: v for k, v in doc.items() if k != key}).encode())


def test_a_wrong_typed_manifest_is_a_snapshot_error_naming_the_file_and_field(tmp_path):
    from airflow_streaming.lifecycle.snapshot import SnapshotError, load_manifest

    for bad, expected in (({"batch_id": "41"}, "field 'batch_id'"), ({"linked": "yes"}, "field 'linked'"),
                          ({"files": None}, "field 'files'")):
        (tmp_path / "manifest.json").write_text(json.dumps({**load("manifest.json"), **bad}))
        with pytest.raises(SnapshotError) as err:
            load_manifest(str(tmp_path))
        assert str(tmp_path / "manifest.json") in str(err.value) and expected in str(err.value), str(err.value)
