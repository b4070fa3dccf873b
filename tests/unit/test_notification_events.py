"""Stream events: rendering, redaction and the notification gate's flap protection (pure Python)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.storage import StorageError
from airflow_streaming.notifications.delivery import send_event
from airflow_streaming.notifications.events import (
    EventKind,
    StreamEvent,
    event_from_context,
    redact,
    render_json,
    render_slack,
    render_text,
)
from airflow_streaming.notifications.gate import GateStateCorrupt, NotificationGate

T0 = datetime(2025, 3, 4, 10, 2, tzinfo=timezone.utc).timestamp()


def failed(**overrides) -> StreamEvent:
    values = dict(
        kind=EventKind.FAILED, stream="orders-etl", version="v7", run_id="run-42", app_id="local-1741082520000",
        driver_id="31337", last_committed_batch=41,
        error_first_line="[STREAM_FAILED] Query orders [id = 9f1c] terminated with exception: disk full",
        error_class="STREAM_FAILED", attempt=2, max_attempts=5, next_attempt_in_s=40.0,
        health_reasons=["driver exited with code 1", "no heartbeat for 45s (limit 30s)"],
        links={"spark_ui": "http://127.0.0.1:4040", "airflow_log": "http://localhost:8080/dags/d/runs/r/tasks/t"},
        at=T0,
    )
    values.update(overrides)
    return StreamEvent(**values)


# ----------------------------------------------------------------------------------------------- model


def test_event_round_trips_through_dict_and_json():
    event = failed()
    d = json.loads(json.dumps(event.to_dict()))
    assert d["kind"] == "FAILED"
    assert StreamEvent.from_dict(d) == event


def test_from_dict_accepts_supervisor_dicts_with_unknown_keys_and_missing_fields():
    event = StreamEvent.from_dict({"kind": "restarting", "stream": "orders-etl", "driver_id": 123, "links": None,
                                   "health_reasons": None, "whatever": 1})
    assert event.kind is EventKind.RESTARTING and event.driver_id == "123"
    assert event.links == {} and event.health_reasons == [] and event.at > 0


def test_unknown_kind_and_missing_stream_are_configuration_errors():
    with pytest.raises(ValueError, match="unknown event kind"):
        StreamEvent(kind="EXPLODED", stream="s")
    with pytest.raises(ValueError, match="stream"):
        StreamEvent(kind="FAILED", stream="")


def test_events_module_imports_no_airflow():
    code = "import sys, airflow_streaming.notifications as n; n.render_text; assert 'airflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ------------------------------------------------------------------------------------------ rendering


def test_text_names_every_field():
    subject, body = render_text(failed())
    assert subject.startswith("[airflow-streaming] orders-etl FAILED: [STREAM_FAILED] Query orders")
    assert "attempt 2 of 5, next in 40s" in subject
    assert "\n" not in subject
    for expected in ("orders-etl", "v7", "run-42", "local-1741082520000", "31337", "Last committed batch: 41",
                     "terminated with exception: disk full", "Error class:          STREAM_FAILED",
                     "driver exited with code 1", "no heartbeat for 45s (limit 30s)",
                     "Spark UI: http://127.0.0.1:4040", "Airflow task log: http://localhost:8080/dags/d/runs/r/tasks/t",
                     "2025-03-04T10:02:00Z"):
        assert expected in body, expected
    assert "suppressed" not in body


@pytest.mark.parametrize(("event", "subject"), [
    (failed(kind=EventKind.RESTARTING), "[airflow-streaming] orders-etl restarting (attempt 2 of 5, next in 40s)"),
    (failed(kind=EventKind.RESTARTING, next_attempt_in_s=0), "[airflow-streaming] orders-etl restarting (attempt 2 of 5, next now)"),
    (failed(kind=EventKind.RECOVERED, error_first_line=None, error_class=None, attempt=None),
     "[airflow-streaming] orders-etl RECOVERED (version v7)"),
    (failed(kind=EventKind.GAVE_UP, attempt=5), "[airflow-streaming] orders-etl GAVE UP after 5 attempts: [STREAM_FAILED] Query orders"),
    (failed(kind=EventKind.UNHEALTHY, error_first_line=None, error_class=None, attempt=None),
     "[airflow-streaming] orders-etl UNHEALTHY: driver exited with code 1"),
    (failed(kind=EventKind.UPGRADE_SUCCEEDED, error_first_line=None, error_class=None, attempt=None),
     "[airflow-streaming] orders-etl upgraded to v7"),
    (failed(kind=EventKind.UPGRADE_ROLLED_BACK, version="v6", attempt=None),
     "[airflow-streaming] orders-etl upgrade ROLLED BACK (running v6): [STREAM_FAILED]"),
    (failed(kind=EventKind.FAILED_OVER, error_first_line=None, error_class=None, attempt=None),
     "[airflow-streaming] orders-etl FAILED OVER to its hot standby (run run-42)"),
])
def test_subject_per_kind(event, subject):
    assert render_text(event)[0].startswith(subject)


def test_error_class_is_prefixed_when_the_first_line_lacks_it_and_subject_is_short():
    event = failed(error_first_line="java.lang.OutOfMemoryError: heap " + "x" * 500, error_class="OOM")
    subject, _ = render_text(event, prefix="[prod]")
    assert subject.startswith("[prod] orders-etl FAILED: [OOM] java.lang.OutOfMemoryError")
    assert len(subject) <= 200 and subject.endswith("...")


def test_slack_payload_shape():
    payload = render_slack(failed())
    assert set(payload) == {"text", "blocks"}
    assert payload["text"].startswith("[airflow-streaming] orders-etl FAILED")
    types = [b["type"] for b in payload["blocks"]]
    assert types[0] == "header" and types[1] == "section" and "context" in types
    header = payload["blocks"][0]["text"]
    assert header["type"] == "plain_text" and len(header["text"]) <= 150
    fields = payload["blocks"][1]["fields"]
    assert 0 < len(fields) <= 10 and all(f["type"] == "mrkdwn" for f in fields)
    text = json.dumps(payload)
    for expected in ("31337", "local-1741082520000", "STREAM_FAILED", "disk full", "no heartbeat for 45s",
                     "<http://127.0.0.1:4040|Spark UI>", "Airflow task log>"):
        assert expected in text, expected
    json.dumps(payload)  # JSON-safe


def test_slack_escapes_control_characters():
    payload = render_slack(failed(error_first_line="a < b && c > d"))
    assert "a &lt; b &amp;&amp; c &gt; d" in json.dumps(payload)


def test_json_payload_is_flat_and_reads_back():
    payload = render_json(failed(suppressed_count=3, suppressed_since=T0 - 600))
    assert payload["schema"] == "airflow-streaming.event/v1"
    assert payload["kind"] == "FAILED" and payload["stream"] == "orders-etl" and payload["last_committed_batch"] == 41
    assert payload["subject"].startswith("[airflow-streaming] orders-etl FAILED")
    assert "Last committed batch: 41" in payload["text"]
    assert payload["suppressed_summary"] == "(3 similar events suppressed since 09:52)"
    assert StreamEvent.from_dict(json.loads(json.dumps(payload))).suppressed_count == 3


# ------------------------------------------------------------------------------------------ redaction


@pytest.mark.parametrize(("text", "expected"), [
    ("password=hunter2 user=bob", "password=*** user=bob"),
    ("DB_PASSWORD: hunter2", "DB_PASSWORD: ***"),
    ('{"client_secret": "s3cr3t value", "a": 1}', '{"client_secret": "***", "a": 1}'),
    ("spark.hadoop.fs.s3a.secret.key=AKIA123 next", "spark.hadoop.fs.s3a.secret.key=*** next"),
    ("https://host/cb?access_token=abc123&x=1", "https://host/cb?access_token=***&x=1"),
    ("ApiKey=k1; API_KEY: k2, apikey=k3", "ApiKey=***; API_KEY: ***, apikey=***"),
    ("Credentials: abc", "Credentials: ***"),
    ("https://user:pass@host:8443/p", "https://***@host:8443/p"),
    ("jdbc:postgresql://admin:pw@db/x", "jdbc:postgresql://***@db/x"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.x.y", "Authorization: Bearer ***"),
    ("header Bearer abcdefgh sent", "header Bearer *** sent"),
    ("Secret manager unavailable; token expired", "Secret manager unavailable; token expired"),
    ("no secrets here: batch=41", "no secrets here: batch=41"),
])
def test_redact(text, expected):
    assert redact(text) == expected


def test_every_rendering_is_redacted():
    event = failed(error_first_line="[STREAM_FAILED] auth failed: password=hunter2",
                   health_reasons=["sink token: tok-999 rejected"],
                   links={"spark_ui": "https://admin:letmein@spark.example:4040/?api_key=k-555"},
                   run_id="run token=tok-777")
    rendered = json.dumps([render_text(event), render_slack(event), render_json(event)])
    for secret in ("hunter2", "tok-999", "letmein", "k-555", "tok-777", "admin:"):
        assert secret not in rendered, secret
    assert "password=***" in rendered and "https://***@spark.example:4040" in rendered


# --------------------------------------------------------------------------------- task failure context


class _TI:
    dag_id, task_id, run_id = "orders_dag", "deploy", "manual__2025-03-04"
    log_url = "http://localhost:8080/dags/orders_dag/runs/manual__2025-03-04/tasks/deploy"


def test_event_from_failure_context():
    exc = RuntimeError("[STREAM_FAILED] query died\nat line 2")
    event = event_from_context({"ti": _TI(), "exception": exc, "run_id": _TI.run_id})
    assert event.kind is EventKind.FAILED and event.stream == "orders_dag.deploy"
    assert (event.dag_id, event.task_id) == ("orders_dag", "deploy")
    assert event.error_first_line == "[STREAM_FAILED] query died" and event.error_class == "STREAM_FAILED"
    assert event.links == {"airflow_log": _TI.log_url}
    assert event_from_context({"ti": _TI(), "exception": ValueError("bad")}).error_class == "ValueError"


def test_event_from_context_prefers_the_given_event_and_uses_a_task_spec():
    given = failed()
    assert event_from_context({"stream_event": given}) is given
    assert event_from_context({"stream_event": given.to_dict()}) == given

    class Task:
        task_id = "deploy"
        spec = {"name": "orders-etl", "version": "v8"}

    event = event_from_context({"task": Task(), "exception": "boom"})
    assert (event.stream, event.version, event.error_first_line) == ("orders-etl", "v8", "boom")

    Task.spec = str(Path(__file__).resolve().parents[2] / "dags" / "specs" / "device_signals.yaml")
    event = event_from_context({"task": Task(), "exception": "boom"})
    assert (event.stream, event.version) == ("device-signals-yaml", "v1")

    Task.spec = "/no/such/spec.yaml"
    assert event_from_context({"task": Task(), "dag": type("D", (), {"dag_id": "d"})()}).stream == "d.deploy"


# ----------------------------------------------------------------------------------------------- gate


@pytest.fixture
def gate_path(tmp_path):
    return str(tmp_path / "control" / "orders-etl" / "notifications.json")


def test_gate_flap_protection(gate_path):
    gate = NotificationGate(LocalStorage(), gate_path, repeat_window_s=900)
    first = gate.admit(failed(), now=T0)
    assert first is not None and first.suppressed_count == 0
    assert gate.admit(failed(attempt=3), now=T0 + 60) is None
    assert gate.admit(failed(attempt=4), now=T0 + 120) is None
    assert gate.state("orders-etl")["suppressed"] == 2

    recovered = gate.admit(failed(kind=EventKind.RECOVERED, error_class=None, error_first_line=None), now=T0 + 300)
    assert recovered is not None and recovered.kind is EventKind.RECOVERED
    assert recovered.suppressed_count == 2
    summary = "(2 similar events suppressed since 10:02)"
    assert summary in render_text(recovered)[1]
    assert summary in json.dumps(render_slack(recovered))
    assert render_json(recovered)["suppressed_summary"] == summary

    # A second RECOVERED within the window is a repeat; the next FAILED is a state change.
    assert gate.admit(failed(kind=EventKind.RECOVERED, error_class=None, error_first_line=None), now=T0 + 360) is None
    again = gate.admit(failed(), now=T0 + 400)
    assert again is not None and again.suppressed_count == 1


def test_gate_sends_a_repeat_after_the_window(gate_path):
    gate = NotificationGate(LocalStorage(), gate_path, repeat_window_s=900)
    assert gate.admit(failed(), now=T0) is not None
    assert gate.admit(failed(), now=T0 + 899) is None
    repeat = gate.admit(failed(), now=T0 + 900)
    assert repeat is not None and repeat.suppressed_count == 1
    assert "(1 similar event suppressed since 10:02)" in render_text(repeat)[1]
    assert gate.admit(failed(), now=T0 + 901) is None  # the window restarts at the message sent


def test_gate_a_different_error_class_is_a_new_state(gate_path):
    gate = NotificationGate(LocalStorage(), gate_path)
    assert gate.admit(failed(), now=T0) is not None
    other = gate.admit(failed(error_class="STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"), now=T0 + 10)
    assert other is not None and other.suppressed_count == 0


def test_gate_streams_are_independent(gate_path):
    gate = NotificationGate(LocalStorage(), gate_path)
    assert gate.admit(failed(), now=T0) is not None
    assert gate.admit(failed(stream="payments"), now=T0 + 1) is not None
    assert gate.admit(failed(stream="payments"), now=T0 + 2) is None
    assert gate.admit(failed(), now=T0 + 3) is None


def test_gate_state_persists_across_instances(gate_path):
    storage = LocalStorage()
    assert NotificationGate(storage, gate_path).admit(failed(), now=T0) is not None
    assert NotificationGate(storage, gate_path).admit(failed().to_dict(), now=T0 + 60) is None
    doc = json.loads(open(gate_path).read())
    assert doc["streams"]["orders-etl"] == {"kind": "FAILED", "error_class": "STREAM_FAILED", "sent_at": T0,
                                            "suppressed": 1}
    sent = NotificationGate(storage, gate_path).admit(failed(kind=EventKind.RECOVERED), now=T0 + 120)
    assert sent is not None and sent.suppressed_count == 1
    # Whole-file replaces only: no temp files left beside the state.
    assert sorted(p.name for p in Path(gate_path).parent.iterdir()) == ["notifications.json"]


@pytest.mark.parametrize("garbage", [
    b"{not json",
    b"[1, 2, 3]",
    b'{"version": 1, "streams": []}',
    b'{"version": 1, "streams": {"orders-etl": {"kind": "FAILED", "error_class": "STREAM_FAILED", "sent_at": "x"}}}',
    b'{"version": 1, "streams": {"orders-etl": "FAILED"}}',
], ids=["not-json", "a-list", "streams-not-an-object", "sent-at-not-a-number", "entry-not-an-object"])
def test_gate_garbage_is_reported_kept_aside_and_never_silences(gate_path, garbage, caplog):
    storage = LocalStorage()
    storage.write_atomic(gate_path, garbage)
    gate = NotificationGate(storage, gate_path)
    with caplog.at_level(logging.DEBUG, logger="airflow_streaming.notifications.gate"):
        sent = gate.admit(failed(), now=T0)

    # Not silenced: the event goes out, and says what happened to the gate.
    assert sent is not None and sent.kind is EventKind.FAILED
    note = sent.health_reasons[-1]
    assert "notification gate state" in note and "garbage" in note and ".corrupt-" in note
    assert "notification gate state" in render_text(sent)[1]
    # Reported: a named condition on the gate and an ERROR log line.
    assert isinstance(gate.last_problem, GateStateCorrupt) and gate.last_problem.path == gate_path
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "is garbage" in errors[0].getMessage()
    # The evidence is kept, byte for byte, beside a fresh state.
    aside = gate.last_problem.moved_to
    assert aside is not None and aside.startswith(gate_path + ".corrupt-")
    assert Path(aside).read_bytes() == garbage
    assert json.loads(Path(gate_path).read_bytes())["streams"]["orders-etl"]["sent_at"] == T0
    # And the fresh state works: the next repeat is suppressed again.
    assert gate.admit(failed(), now=T0 + 1) is None
    assert sorted(p.name.split(".corrupt-")[0] for p in Path(gate_path).parent.iterdir()) == \
        ["notifications.json", "notifications.json"]


def test_gate_that_cannot_read_its_state_sends_and_overwrites_nothing(gate_path, monkeypatch):
    storage = LocalStorage()
    storage.write_atomic(gate_path, b'{"version": 1, "streams": {}}')
    before = Path(gate_path).read_bytes()

    def unreadable(path):
        raise StorageError(5, f"cannot read {path}: Input/output error")

    monkeypatch.setattr(storage, "read_bytes", unreadable)
    gate = NotificationGate(storage, gate_path)
    assert gate.admit(failed(), now=T0) is not None
    assert gate.admit(failed(), now=T0 + 1) is not None  # no flap protection without its state: fail open
    assert Path(gate_path).read_bytes() == before and gate.last_problem is None


def test_gate_garbage_that_cannot_be_moved_aside_is_left_in_place(gate_path, monkeypatch):
    storage = LocalStorage()
    storage.write_atomic(gate_path, b"{not json")

    def no_move(src, dst):
        raise StorageError(38, f"cannot move {src} to {dst}: not supported")

    monkeypatch.setattr(storage, "move", no_move)
    gate = NotificationGate(storage, gate_path)
    sent = gate.admit(failed(), now=T0)
    assert sent is not None and "left in place and not overwritten" in sent.health_reasons[-1]
    assert Path(gate_path).read_bytes() == b"{not json"
    assert gate.admit(failed(), now=T0 + 1) is not None


def test_supervisor_delivery_survives_a_garbage_gate(gate_path):
    """Through ``send_event`` (the supervisor's path): the notifier is called, nothing raises."""
    storage = LocalStorage()
    storage.write_atomic(gate_path, b'{"streams": {"orders-etl": {"kind": "FAILED", "error_class": "STREAM_FAILED", '
                                b'"sent_at": "soon"}}}')
    seen: list = []
    sent = send_event(failed(), [lambda context: seen.append(context["stream_event"])],
                      gate=NotificationGate(storage, gate_path), now=T0)
    assert sent is not None and seen == [sent]


def test_gate_rejects_a_negative_window(gate_path):
    with pytest.raises(ValueError, match="repeat_window_s"):
        NotificationGate(LocalStorage(), gate_path, repeat_window_s=-1)


def test_send_event_gates_and_calls_every_notifier(gate_path):
    calls: list[tuple[str, dict]] = []

    def ok(context):
        calls.append(("ok", context))

    def broken(context):
        calls.append(("broken", context))
        raise RuntimeError("smtp down")

    gate = NotificationGate(LocalStorage(), gate_path)
    with pytest.raises(RuntimeError, match="smtp down"):
        send_event(failed().to_dict(), [broken, ok], gate=gate, now=T0)
    assert [name for name, _ in calls] == ["broken", "ok"]
    assert calls[1][1]["stream_event"].stream == "orders-etl"
    assert send_event(failed(), [ok], gate=gate, now=T0 + 1) is None
    assert len(calls) == 2
