"""Unit tests of the pure health model: :func:`airflow_streaming.health.verdict.evaluate` and the thresholds.

Two kinds of input:

- status documents recorded from real Spark drivers (``tests/fixtures/status/``, see its README), checked
  as recorded and re-timed (state set to RUNNING, ``now`` moved relative to the recorded progress);
- constructed documents in the exact layout the driver writes (``dataclasses.asdict(StatusDocument)``)
  with progress entries using Spark's own field names, one per verdict and per boundary.

No Spark, no Airflow, no clock: every call passes ``now`` explicitly.
"""

from __future__ import annotations

import copy
import json
import statistics
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_streaming.control.contract import QueryStatus, StatusDocument
from airflow_streaming.health.thresholds import HealthThresholds
from airflow_streaming.health.verdict import STATE_GAUGE, HealthState, HealthVerdict, Reason, evaluate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "status"
NOW = 1_800_000_000.0  # a fixed wall clock; exactly representable, so boundaries are exact


# --------------------------------------------------------------------------- builders


def iso(ts: float) -> str:
    """Spark's progress timestamp format: ISO 8601, milliseconds, 'Z'."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def ts_of(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def prog(at: float, batch_id: int, rows: int = 100, *, in_rate: float | None = None, proc_rate: float | None = None,
         duration_ms: float = 500, state: list[tuple[int, int]] | None = None, watermark: str | None = None,
         behind: Any = None, quarantined: dict[str, int] | None = None) -> dict[str, Any]:
    """One StreamingQueryProgress as Spark writes it (only the fields the health model reads, plus a few)."""
    p: dict[str, Any] = {
        "id": "q-1", "runId": "r-1", "name": "q", "timestamp": iso(at), "batchId": batch_id,
        "numInputRows": rows,
        "inputRowsPerSecond": float(rows) if in_rate is None else in_rate,
        "processedRowsPerSecond": float(rows) if proc_rate is None else proc_rate,
        "durationMs": {"addBatch": max(duration_ms - 10, 0), "triggerExecution": duration_ms},
        "stateOperators": [{"operatorName": "stateStoreSave", "numRowsTotal": total, "numRowsUpdated": 0,
                            "numRowsDroppedByWatermark": dropped} for total, dropped in (state or [])],
        "sources": [{"description": "FileStreamSource[file:/in]", "numInputRows": rows, "metrics": {}}],
        "sink": {"description": "FileSink[/out]", "numOutputRows": -1},
    }
    if watermark is not None:
        p["eventTime"] = {"watermark": watermark}
    if behind is not None:
        p["sources"] = [{"description": "KafkaV2[Subscribe[events]]", "numInputRows": rows,
                         "metrics": {"avgOffsetsBehindLatest": "0.0", "maxOffsetsBehindLatest": behind,
                                     "minOffsetsBehindLatest": "0"}}]
    if quarantined is not None:
        p["observedMetrics"] = {name: {"lines": rows, "quarantined_rows": n} for name, n in quarantined.items()}
    return p


def make_doc(progress: list[dict[str, Any]] | None = None, *, state: str = "RUNNING", ready: bool = True,
             heartbeat_at: float = NOW, started_at: float = NOW - 3600, trigger_active: bool = False,
             exit: dict[str, Any] | None = None, last_exception: dict[str, Any] | None = None,
             queries: list[QueryStatus] | None = None, quarantined_total: int = 0) -> dict[str, Any]:
    """A status document exactly as the hook hands it to evaluate(): ``dataclasses.asdict(StatusDocument)``."""
    progress = progress or []
    if queries is None:
        queries = [QueryStatus(
            id="q-1", run_id="r-1", name="q", active=True,
            status={"message": "Processing new data" if trigger_active else "Waiting for next trigger",
                    "isDataAvailable": trigger_active, "isTriggerActive": trigger_active},
            recent_progress=progress, last_batch_id=progress[-1]["batchId"] if progress else None)]
    doc = StatusDocument(
        stream="orders", version="v1", run_id="20261122T000000Z-abcdef01", state=state, pid=4242, host="vm",
        started_at=started_at, heartbeat_at=heartbeat_at, ready=ready, queries=queries,
        totals={"batches": len(progress), "input_rows": sum(p["numInputRows"] for p in progress),
                "quarantined_rows": quarantined_total},
        last_exception=last_exception, exit=exit)
    return asdict(doc)


def run(doc: dict[str, Any] | None, *, now: float = NOW, driver_alive: bool | None = True,
        trigger_interval: float = 1.0, heartbeat_interval: float = 1.0, thresholds: HealthThresholds | None = None,
        unreadable: str | None = None) -> HealthVerdict:
    """The verdict; every verdict of this file is also computed state-only (``details=False``, what a health watch
    polls until its event fires) and must give the same state and reasons, with no warnings and no metrics."""
    kwargs: dict[str, Any] = dict(now=now, driver_alive=driver_alive, trigger_interval=trigger_interval,
                                  heartbeat_interval=heartbeat_interval, thresholds=thresholds, unreadable=unreadable)
    verdict = evaluate(doc, **kwargs)
    brief = evaluate(copy.deepcopy(doc), details=False, **kwargs)
    assert (brief.stream, brief.state, brief.reasons, brief.run_id, brief.at) == (
        verdict.stream, verdict.state, verdict.reasons, verdict.run_id, verdict.at)
    assert brief.warnings == () and brief.metrics == {}
    return verdict


def steady(n: int = 5, *, end: float = NOW - 1, every: float = 1.0, **kw: Any) -> list[dict[str, Any]]:
    """``n`` batches with data, the last starting at ``end``, ``every`` seconds apart."""
    return [prog(end - (n - 1 - i) * every, i, **kw) for i in range(n)]


def codes(reasons: tuple[Reason, ...]) -> list[str]:
    return [r.code for r in reasons]


# --------------------------------------------------------------------------- recorded fixtures


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def recorded_progress(doc: dict[str, Any]) -> list[dict[str, Any]]:
    items = [p for q in doc["queries"] for p in q["recent_progress"]]
    return sorted(items, key=lambda p: (ts_of(p["timestamp"]), p["batchId"]))


def retimed(doc: dict[str, Any], now: float) -> dict[str, Any]:
    """The recorded document as if its driver were still running at ``now`` (trigger idle)."""
    d = copy.deepcopy(doc)
    d.update(state="RUNNING", exit=None, last_exception=None, heartbeat_at=now, ready=True)
    for q in d["queries"]:
        q["active"] = True
        q["status"] = {"message": "Waiting for next trigger", "isDataAvailable": False, "isTriggerActive": False}
    return d


def batch_end(p: dict[str, Any]) -> float:
    return ts_of(p["timestamp"]) + p["durationMs"]["triggerExecution"] / 1000


#: Each recording with the trigger interval its stream ran with (the demo DAG: 2 s; the integration tests: 1 s).
TRIGGER = {"etl_demo_stopped.json": 2.0, "etl_dag_phase1_running.json": 2.0, "etl_dag_phase1_stopped.json": 2.0,
           "device_signals_stopped.json": 1.0, "user_script_stopped.json": 1.0, "crash_at_start_failed.json": 1.0,
           "stuck_first_batch_stopping.json": 1.0}
RECORDED = list(TRIGGER)
STOPPED_RECORDINGS = ["etl_demo_stopped.json", "etl_dag_phase1_stopped.json", "device_signals_stopped.json",
                      "user_script_stopped.json"]
#: The ETL recordings hold several batches with data (2 and 3); the user script's run holds one.
WITH_DATA_RECORDINGS = ["etl_demo_stopped.json", "etl_dag_phase1_stopped.json", "user_script_stopped.json"]


def with_data_in_window(progress: list[dict[str, Any]], now: float, window: float) -> list[dict[str, Any]]:
    return [p for p in progress if ts_of(p["timestamp"]) >= now - window and p["numInputRows"] > 0]


def test_the_recorded_fixtures_are_real_status_documents():
    for name in RECORDED:
        raw = (FIXTURES / name).read_bytes()
        doc = StatusDocument.from_json(name, raw)  # the driver's own schema accepts it
        recorded = json.loads(raw)
        # Fields added since the recording take their defaults; everything recorded reads back as is.
        read_back = {k: v for k, v in asdict(doc).items() if k in recorded}
        for query, recorded_query in zip(read_back.get("queries") or [], recorded.get("queries") or []):
            for key in set(query) - set(recorded_query):  # a query field added since (its trigger)
                assert query.pop(key) is None, (name, key)
        assert read_back == recorded, name
        assert doc.host and doc.pid > 0 and doc.app_id.startswith("local-"), name  # a real driver wrote it


@pytest.mark.parametrize("name", STOPPED_RECORDINGS)
def test_recorded_stopped_documents_are_stopped(name):
    doc = load(name)
    assert doc["state"] == "STOPPED" and doc["exit"]["code"] == 0
    # The driver is gone after a graceful stop: still STOPPED, never DRIVER_GONE.
    v = run(doc, now=doc["heartbeat_at"] + 3600, driver_alive=False, trigger_interval=TRIGGER[name])
    assert v.state is HealthState.STOPPED and v.state.is_terminal and not v.state.is_ok
    assert codes(v.reasons) == ["STOPPED"]
    assert v.reasons[0].values == {"last_committed_batch": doc["exit"]["last_committed_batch"]}
    assert v.reasons[0].message == f"stopped gracefully: {doc['exit']['reason']}"
    assert v.stream == doc["stream"] and v.run_id == doc["run_id"] and v.warnings == ()
    progress = recorded_progress(doc)
    assert v.metrics["last_batch_id"] == progress[-1]["batchId"]
    assert v.metrics["quarantined_rows"] == doc["totals"]["quarantined_rows"]
    assert v.metrics["batch_duration_ms"] == progress[-1]["durationMs"]["triggerExecution"]
    assert v.metrics["heartbeat_age_s"] == 3600.0


def test_recorded_startup_failure_is_failed_with_the_error_class_kept():
    doc = load("crash_at_start_failed.json")
    assert doc["state"] == "FAILED" and not doc["ready"] and doc["queries"] == []
    v = run(doc, now=doc["heartbeat_at"] + 5, driver_alive=False)
    assert v.state is HealthState.FAILED
    assert codes(v.reasons) == ["QUERY_FAILED"]
    (reason,) = v.reasons
    assert reason.values == {"error_class": doc["last_exception"]["error_class"], "exit_code": doc["exit"]["code"]}
    assert reason.values == {"error_class": "RuntimeError", "exit_code": 4}
    assert reason.message == f"[RuntimeError] {doc['last_exception']['message'].splitlines()[0]} (exit code 4)"
    assert v.metrics["last_batch_id"] is None and v.metrics["state_rows"] is None
    assert STATE_GAUGE[v.state] == max(STATE_GAUGE.values())
    # Even while the driver process is still alive (before it exits), FAILED is FAILED.
    assert run(doc, now=doc["heartbeat_at"], driver_alive=True).state is HealthState.FAILED


def test_recorded_stuck_first_batch_while_stopping_is_unknown_and_killed_is_driver_gone():
    doc = load("stuck_first_batch_stopping.json")
    assert doc["state"] == "STOPPING" and not doc["ready"] and doc["queries"][0]["status"]["isTriggerActive"]
    v = run(doc, now=doc["heartbeat_at"] + 0.5, driver_alive=True)
    assert v.state is HealthState.UNKNOWN and not v.state.is_ok and not v.state.is_terminal
    # The stop timed out and the driver was killed: it left no graceful exit behind.
    now = doc["heartbeat_at"] + 9
    gone = run(doc, now=now, driver_alive=False)
    assert gone.state is HealthState.FAILED and codes(gone.reasons) == ["DRIVER_GONE"]
    assert gone.reasons[0].values == {"state": "STOPPING", "heartbeat_age_s": round(now - doc["heartbeat_at"], 2)}
    assert "state was STOPPING" in gone.reasons[0].message


def test_recorded_stopping_driver_before_its_first_batch_says_stopping():
    doc = load("stuck_first_batch_stopping.json")
    v = run(doc, now=doc["heartbeat_at"] + 0.5, driver_alive=True)
    assert codes(v.reasons) == ["STOPPING"]


def test_recorded_first_batch_hanging_for_ten_minutes_is_stalled():
    doc = load("stuck_first_batch_stopping.json")
    d = copy.deepcopy(doc)
    now = doc["started_at"] + 600
    d.update(state="RUNNING", heartbeat_at=now)  # still ready=false, trigger active, no progress
    v = run(d, now=now, driver_alive=True, trigger_interval=TRIGGER["stuck_first_batch_stopping.json"])
    assert v.state is HealthState.STALLED and codes(v.reasons) == ["NO_BATCH_COMPLETED"]
    assert v.reasons[0].values["seconds_since_last_batch"] == 600.0


def test_recorded_running_document_as_recorded_is_healthy():
    name = "etl_dag_phase1_running.json"
    doc = load(name)
    assert doc["state"] == "RUNNING" and doc["exit"] is None
    now = doc["heartbeat_at"]
    progress = recorded_progress(doc)
    window = HealthThresholds().window(TRIGGER[name])
    with_data = with_data_in_window(progress, now, window)
    assert len(with_data) >= HealthThresholds().min_batches  # a rate verdict is given
    v = run(doc, now=now, driver_alive=True, trigger_interval=TRIGGER[name], heartbeat_interval=2.0)
    assert v.state is HealthState.HEALTHY and v.reasons[0].values == {"batches": len(with_data)}
    assert v.metrics["heartbeat_age_s"] == 0 and v.metrics["last_batch_id"] == progress[-1]["batchId"]
    # About 2 % of the rows were malformed: under the 5 % quarantine limit.
    assert v.warnings == ()

    # The same recording, its heartbeat gone quiet past max(3 x 2 s, 30 s):
    late = now + 30.5
    stalled = run(doc, now=late, driver_alive=True, trigger_interval=2.0, heartbeat_interval=2.0)
    assert stalled.state is HealthState.STALLED and codes(stalled.reasons) == ["HEARTBEAT_MISSING"]
    assert stalled.reasons[0].values == {"heartbeat_age_s": 30.5, "limit_s": 30.0}
    assert run(doc, now=late, driver_alive=None, trigger_interval=2.0, heartbeat_interval=2.0).state \
        is HealthState.UNKNOWN
    gone = run(doc, now=now + 12, driver_alive=False, trigger_interval=2.0, heartbeat_interval=2.0)
    assert gone.state is HealthState.FAILED and codes(gone.reasons) == ["DRIVER_GONE"]
    assert gone.reasons[0].values == {"state": "RUNNING", "heartbeat_age_s": 12.0}


def test_recorded_rates_and_durations_give_the_falling_behind_numbers():
    doc = load("etl_dag_phase1_running.json")
    now = doc["heartbeat_at"]
    with_data = with_data_in_window(recorded_progress(doc), now, 60.0)
    input_rate = statistics.fmean(p["inputRowsPerSecond"] for p in with_data)
    processed_rate = statistics.fmean(p["processedRowsPerSecond"] for p in with_data)
    median_s = statistics.median(p["durationMs"]["triggerExecution"] / 1000 for p in with_data)
    ratio = input_rate / processed_rate
    # Just under the recorded ratio: falling behind, with the recorded averages as the reason's numbers.
    v = run(doc, now=now, trigger_interval=2.0, thresholds=HealthThresholds(rate_ratio=ratio * 0.99))
    assert v.state is HealthState.FALLING_BEHIND and codes(v.reasons) == ["INPUT_FASTER_THAN_PROCESSING"]
    assert v.reasons[0].values == {"input_rows_per_s": round(input_rate, 2),
                                   "processed_rows_per_s": round(processed_rate, 2), "batches": len(with_data)}
    assert run(doc, now=now, trigger_interval=2.0, thresholds=HealthThresholds(rate_ratio=ratio * 1.01)).state \
        is HealthState.HEALTHY
    # Judged against a trigger interval just below the recorded median batch duration: falling behind.
    v = run(doc, now=now, trigger_interval=median_s * 0.99)
    assert v.state is HealthState.FALLING_BEHIND and codes(v.reasons) == ["BATCH_LONGER_THAN_TRIGGER"]
    assert v.reasons[0].values == {"median_batch_s": round(median_s, 2), "trigger_interval_s": median_s * 0.99}
    assert run(doc, now=now, trigger_interval=median_s).state is HealthState.HEALTHY


@pytest.mark.parametrize("name", WITH_DATA_RECORDINGS)
def test_recorded_run_retimed_just_after_its_last_batch_is_healthy(name):
    doc = load(name)
    progress = recorded_progress(doc)
    trigger = TRIGGER[name]
    now = batch_end(progress[-1]) + 1.0
    window = HealthThresholds().window(trigger)
    with_data = with_data_in_window(progress, now, window)
    assert with_data
    if len(with_data) >= HealthThresholds().min_batches:  # preconditions of HEALTHY rather than FALLING_BEHIND
        assert (statistics.fmean(p["inputRowsPerSecond"] for p in with_data)
                <= 1.2 * statistics.fmean(p["processedRowsPerSecond"] for p in with_data))
        assert statistics.median(p["durationMs"]["triggerExecution"] / 1000 for p in with_data) <= trigger

    v = run(retimed(doc, now), now=now, trigger_interval=trigger)
    assert v.state is HealthState.HEALTHY and v.state.is_ok
    assert codes(v.reasons) == ["PROGRESSING"]
    assert v.reasons[0].values == {"batches": len(with_data)}
    assert v.reasons[0].message == f"{len(with_data)} batch(es) with data in the last {window:.0f}s"
    last = progress[-1]
    assert v.metrics["last_batch_id"] == last["batchId"]
    assert v.metrics["input_rows_per_s"] == round(last["inputRowsPerSecond"], 2)
    assert v.metrics["processed_rows_per_s"] == round(last["processedRowsPerSecond"], 2)
    assert v.metrics["batch_duration_ms"] == last["durationMs"]["triggerExecution"]
    assert v.metrics["quarantined_rows"] == doc["totals"]["quarantined_rows"]
    assert v.metrics["heartbeat_age_s"] == 0
    # Moving now so that the first batch with data falls out of the window drops it from the count.
    later = ts_of(with_data[0]["timestamp"]) + window + 0.5
    assert later > now
    v2 = run(retimed(doc, later), now=later, trigger_interval=trigger)
    remaining = with_data_in_window(progress, later, window)
    assert len(remaining) == len(with_data) - 1
    if remaining:
        assert v2.state is HealthState.HEALTHY and v2.reasons[0].values == {"batches": len(remaining)}
    else:
        assert v2.state is HealthState.IDLE


@pytest.mark.parametrize("name", STOPPED_RECORDINGS)
def test_recorded_run_retimed_long_after_its_last_batch_is_idle_not_stalled(name):
    doc = load(name)
    progress = recorded_progress(doc)
    trigger = TRIGGER[name]
    now = batch_end(progress[-1]) + 3600
    v = run(retimed(doc, now), now=now, trigger_interval=trigger)
    assert v.state is HealthState.IDLE
    assert codes(v.reasons) == ["NO_NEW_DATA"]
    assert v.reasons[0].values == {"window_s": HealthThresholds().window(trigger)}
    # No window of data: the quarantine warning looks at the last min_batches batches instead.
    tail = progress[-HealthThresholds().min_batches:]
    rows = sum(p["numInputRows"] for p in tail)
    quarantined = sum(m.get("quarantined_rows", 0) for p in tail for m in (p.get("observedMetrics") or {}).values())
    expect_quarantine = bool(rows) and quarantined / rows > 0.05
    assert ("QUARANTINE_RATE" in codes(v.warnings)) is expect_quarantine
    if expect_quarantine:
        assert next(w for w in v.warnings if w.code == "QUARANTINE_RATE").values == {
            "quarantined": quarantined, "rows": rows}
    # The same silence with a trigger reported active is a stall, counted from the recorded last batch end.
    d = retimed(doc, now)
    d["queries"][0]["status"].update(isTriggerActive=True, isDataAvailable=True)
    stalled = run(d, now=now, trigger_interval=trigger)
    assert stalled.state is HealthState.STALLED and codes(stalled.reasons) == ["NO_BATCH_COMPLETED"]
    expected_since = now - max(batch_end(p) for p in progress)
    assert stalled.reasons[0].values == {"query": d["queries"][0].get("name") or d["queries"][0]["id"],
                                         "seconds_since_last_batch": round(expected_since, 2),
                                         "limit_s": HealthThresholds().stall_after(trigger)}


def test_recorded_stateful_job_retimed_reports_state_and_watermark_lag():
    doc = load("device_signals_stopped.json")
    progress = recorded_progress(doc)
    last = progress[-1]
    assert last["stateOperators"] and last["eventTime"]["watermark"]
    now = batch_end(last) + 1.0
    v = run(retimed(doc, now), now=now, trigger_interval=1.0)
    # The job reads event times of 2026-01-01 while the wall clock is later: the watermark lags by months.
    lag = round(now - ts_of(last["eventTime"]["watermark"]), 2)
    assert v.metrics["watermark_lag_s"] == lag > 3600
    assert v.metrics["state_rows"] == sum(op["numRowsTotal"] for op in last["stateOperators"])
    wm = next(w for w in v.warnings if w.code == "WATERMARK_LAG")
    assert wm.values == {"watermark_lag_s": lag} and f"{lag:.0f}s" in wm.message
    assert v.state is (HealthState.HEALTHY if with_data_in_window(progress, now, 60.0) else HealthState.IDLE)
    # A watermark is present: the state is bounded, no STATE_GROWING even with a zero growth threshold.
    v2 = run(retimed(doc, now), now=now, thresholds=HealthThresholds(state_growth_rows=0, window_seconds=3600))
    assert "STATE_GROWING" not in codes(v2.warnings)
    # A generous lag limit silences the lag warning.
    v3 = run(retimed(doc, now), now=now, thresholds=HealthThresholds(watermark_lag_seconds=lag + 1))
    assert "WATERMARK_LAG" not in codes(v3.warnings)


def test_recorded_stateful_job_state_growth_is_measured_first_to_last_batch():
    doc = load("device_signals_stopped.json")
    progress = recorded_progress(doc)
    now = batch_end(progress[-1]) + 1.0
    d = retimed(doc, now)
    for q in d["queries"]:
        for p in q["recent_progress"]:
            p.pop("eventTime", None)  # as if the job had no watermark
    recent = [p for p in progress if ts_of(p["timestamp"]) >= now - 3600]
    assert len(recent) >= 2
    first = sum(op["numRowsTotal"] for op in recent[0]["stateOperators"])
    last = sum(op["numRowsTotal"] for op in recent[-1]["stateOperators"])
    v = run(d, now=now, thresholds=HealthThresholds(window_seconds=3600, state_growth_rows=0))
    if last > first:
        assert next(w for w in v.warnings if w.code == "STATE_GROWING").values == {"from_rows": first, "to_rows": last}
    else:  # the recorded run evicted state: shrinking state never warns
        assert "STATE_GROWING" not in codes(v.warnings)
    # Rewrite the last batch's state to exceed the first by 11 rows, over a threshold of 10.
    d["queries"][0]["recent_progress"][-1]["stateOperators"][0]["numRowsTotal"] += first - last + 11
    v = run(d, now=now, thresholds=HealthThresholds(window_seconds=3600, state_growth_rows=10))
    assert next(w for w in v.warnings if w.code == "STATE_GROWING").values == {"from_rows": first,
                                                                                "to_rows": first + 11}


# --------------------------------------------------------------------------- UNKNOWN


def test_no_document_is_unknown():
    v = run(None, driver_alive=None)
    assert v.state is HealthState.UNKNOWN and codes(v.reasons) == ["NO_STATUS"]
    assert v.reasons[0].message == "no status document yet" and v.stream is None and v.at == NOW

def test_no_document_and_a_driver_proven_gone_is_failed_not_unknown():
    """A driver killed while starting (before its first status): UNKNOWN was never acted on, so the stream
    stayed down for good with no notification (issue "Reconcile core")."""
    gone = run(None, driver_alive=False)
    assert gone.state is HealthState.FAILED and codes(gone.reasons) == ["DRIVER_GONE_AT_START"]
    assert "before it reported any status" in gone.reasons[0].message


def test_unreadable_document_is_unknown_with_the_reason():
    why = "/ctl/orders/status.json: not valid JSON (Expecting value: line 1 column 1 (char 0))"
    v = run(make_doc(steady()), unreadable=why)
    assert v.state is HealthState.UNKNOWN and codes(v.reasons) == ["STATUS_UNREADABLE"]
    assert v.reasons[0].message == why


@pytest.mark.parametrize("state, ready", [("STARTING", False), ("RUNNING", False), (None, True)])
def test_a_starting_driver_is_unknown(state, ready):
    v = run(make_doc(state=state, ready=ready))
    assert v.state is HealthState.UNKNOWN and codes(v.reasons) == ["STARTING"]
    assert v.stream == "orders" and v.run_id == "20261122T000000Z-abcdef01"


def test_a_stopping_driver_is_unknown():
    v = run(make_doc(steady(), state="STOPPING"))
    assert v.state is HealthState.UNKNOWN and codes(v.reasons) == ["STOPPING"]


def test_missing_heartbeat_with_unknown_liveness_is_unknown_not_stalled():
    v = run(make_doc(steady(), heartbeat_at=NOW - 31), driver_alive=None)
    assert v.state is HealthState.UNKNOWN and codes(v.reasons) == ["HEARTBEAT_MISSING"]
    assert v.reasons[0].values == {"heartbeat_age_s": 31.0, "limit_s": 30.0}


# --------------------------------------------------------------------------- FAILED / STOPPED


def test_failed_query_keeps_sparks_error_class_and_first_message_line():
    exc = {"error_class": "STREAM_FAILED",
           "message": "[STREAM_FAILED] Query [id = q-1] terminated with exception: boom\n\tat org.apache.spark..."}
    v = run(make_doc(steady(), state="FAILED", last_exception=exc,
                     exit={"code": 3, "reason": "query failed", "last_committed_batch": 4}))
    assert v.state is HealthState.FAILED and codes(v.reasons) == ["QUERY_FAILED"]
    (reason,) = v.reasons
    assert reason.values == {"error_class": "STREAM_FAILED", "exit_code": 3}
    assert reason.message == ("[STREAM_FAILED] [STREAM_FAILED] Query [id = q-1] terminated with exception: boom"
                              " (exit code 3)")
    assert "\n" not in reason.message


def test_failed_state_without_exception_or_exit():
    v = run(make_doc(steady(), state="FAILED"))
    assert v.state is HealthState.FAILED
    assert v.reasons[0].message == "[UNKNOWN] driver reported failure"
    assert v.reasons[0].values == {"error_class": None, "exit_code": None}


@pytest.mark.parametrize("code", [3, 4, 5])
def test_non_zero_exit_code_is_failed_whatever_the_state(code):
    v = run(make_doc(steady(), state="RUNNING", exit={"code": code, "reason": "x", "last_committed_batch": None}))
    assert v.state is HealthState.FAILED and v.reasons[0].values["exit_code"] == code


def test_exit_code_zero_is_not_a_failure():
    v = run(make_doc(steady(), state="STOPPED", exit={"code": 0, "reason": "graceful stop", "last_committed_batch": 4}))
    assert v.state is HealthState.STOPPED
    assert v.reasons[0].message == "stopped gracefully: graceful stop"
    assert v.reasons[0].values == {"last_committed_batch": 4}


def test_driver_gone_while_running_is_failed():
    v = run(make_doc(steady(), heartbeat_at=NOW - 7), driver_alive=False)
    assert v.state is HealthState.FAILED and codes(v.reasons) == ["DRIVER_GONE"]
    assert v.reasons[0].values == {"state": "RUNNING", "heartbeat_age_s": 7.0}
    assert "last heartbeat 7s ago" in v.reasons[0].message


def test_driver_gone_after_recording_its_failure_keeps_the_query_failure():
    v = run(make_doc(state="FAILED", last_exception={"error_class": "RuntimeError", "message": "x"}), driver_alive=False)
    assert codes(v.reasons) == ["QUERY_FAILED"] and v.reasons[0].values["error_class"] == "RuntimeError"


def test_stopped_without_exit_info():
    v = run(make_doc(state="STOPPED"), driver_alive=False)
    assert v.state is HealthState.STOPPED and v.reasons[0].message == "stopped gracefully: stopped"


# --------------------------------------------------------------------------- STALLED


def test_heartbeat_exactly_at_the_timeout_is_not_missing_just_over_is():
    doc_at = make_doc(steady(), heartbeat_at=NOW - 60)  # heartbeat interval 20 -> limit max(60, 30) = 60
    assert run(doc_at, heartbeat_interval=20).state is HealthState.HEALTHY
    v = run(make_doc(steady(), heartbeat_at=NOW - 60.5), heartbeat_interval=20)
    assert v.state is HealthState.STALLED and codes(v.reasons) == ["HEARTBEAT_MISSING"]
    assert v.reasons[0].values == {"heartbeat_age_s": 60.5, "limit_s": 60.0}


def test_heartbeat_timeout_override_and_floor():
    # Default floor: 30 s even with a 1 s heartbeat.
    assert run(make_doc(steady(), heartbeat_at=NOW - 30)).state is HealthState.HEALTHY
    assert run(make_doc(steady(), heartbeat_at=NOW - 30.5)).state is HealthState.STALLED
    t = HealthThresholds(heartbeat_timeout_seconds=5)
    assert run(make_doc(steady(), heartbeat_at=NOW - 5), thresholds=t).state is HealthState.HEALTHY
    assert run(make_doc(steady(), heartbeat_at=NOW - 5.5), thresholds=t).state is HealthState.STALLED


def test_no_heartbeat_at_all_is_missing():
    doc = make_doc(steady())
    doc["heartbeat_at"] = None
    v = run(doc)
    assert v.state is HealthState.STALLED and codes(v.reasons) == ["HEARTBEAT_MISSING"]


def test_active_trigger_with_no_batch_completed_stalls_only_past_stall_after():
    # trigger 15 s -> stall after max(10 x 15, 120) = 150 s; the batch ends at ts + triggerExecution.
    at_limit = [prog(NOW - 152, 7, rows=0, duration_ms=2000)]  # ended exactly 150 s ago
    v = run(make_doc(at_limit, trigger_active=True), trigger_interval=15)
    assert v.state is HealthState.IDLE
    over = [prog(NOW - 152.5, 7, rows=0, duration_ms=2000)]  # ended 150.5 s ago
    v = run(make_doc(over, trigger_active=True), trigger_interval=15)
    assert v.state is HealthState.STALLED and codes(v.reasons) == ["NO_BATCH_COMPLETED"]
    assert {k: v.reasons[0].values[k] for k in ("seconds_since_last_batch", "limit_s")} == {
        "seconds_since_last_batch": 150.5, "limit_s": 150.0}
    assert "limit 150s = 10 trigger intervals" in v.reasons[0].message


def test_stall_minimum_applies_with_a_short_trigger():
    progress = [prog(NOW - 119, 3, rows=0, duration_ms=0)]
    assert run(make_doc(progress, trigger_active=True), trigger_interval=1).state is HealthState.IDLE
    progress = [prog(NOW - 121, 3, rows=0, duration_ms=0)]
    assert run(make_doc(progress, trigger_active=True), trigger_interval=1).state is HealthState.STALLED


def test_active_trigger_with_no_progress_at_all_counts_from_driver_start():
    assert run(make_doc([], trigger_active=True, started_at=NOW - 100)).state is HealthState.IDLE
    v = run(make_doc([], trigger_active=True, started_at=NOW - 300))
    assert v.state is HealthState.STALLED and v.reasons[0].values["seconds_since_last_batch"] == 300.0


def test_stalled_keeps_the_warnings():
    progress = [prog(NOW - 500, 1, rows=100, quarantined={"quality": 50}),
                prog(NOW - 499, 2, rows=100, quarantined={"quality": 50})]
    v = run(make_doc(progress, trigger_active=True))
    assert v.state is HealthState.STALLED and codes(v.warnings) == ["QUARANTINE_RATE"]


def test_no_active_trigger_long_after_the_last_batch_is_idle_never_stalled():
    progress = steady(5, end=NOW - 10_000)
    v = run(make_doc(progress, trigger_active=False, started_at=NOW - 20_000))
    assert v.state is HealthState.IDLE and codes(v.reasons) == ["NO_NEW_DATA"]


def test_an_inactive_query_does_not_count_as_an_active_trigger():
    q = QueryStatus(id="q", run_id="r", name="q", active=False,
                    status={"isTriggerActive": True, "isDataAvailable": True}, recent_progress=[prog(NOW - 10_000, 1, rows=0)])
    assert run(make_doc(queries=[q])).state is HealthState.IDLE


def test_a_stuck_query_is_not_masked_by_a_progressing_sibling():
    busy = QueryStatus(id="a", run_id="ra", name="a", active=True, status={"isTriggerActive": False},
                       recent_progress=steady(5, end=NOW - 1))
    stuck = QueryStatus(id="b", run_id="rb", name="b", active=True, status={"isTriggerActive": True, "isDataAvailable": True},
                        recent_progress=[prog(NOW - 600, 9, rows=10)])
    v = run(make_doc(queries=[busy, stuck]))
    assert v.state is HealthState.STALLED


# --------------------------------------------------------------------------- FALLING_BEHIND


def test_input_faster_than_processing_beyond_the_ratio_falls_behind():
    progress = [prog(NOW - 3 + i, i, in_rate=r, proc_rate=100.0) for i, r in enumerate([111.0, 121.0, 131.0])]
    v = run(make_doc(progress))
    assert v.state is HealthState.FALLING_BEHIND and not v.state.is_ok
    assert codes(v.reasons) == ["INPUT_FASTER_THAN_PROCESSING"]
    assert v.reasons[0].values == {"input_rows_per_s": 121.0, "processed_rows_per_s": 100.0, "batches": 3}
    assert "(ratio 1.21 > 1.2)" in v.reasons[0].message


def test_input_rate_exactly_at_the_ratio_is_not_falling_behind():
    progress = [prog(NOW - 3 + i, i, in_rate=r, proc_rate=100.0) for i, r in enumerate([110.0, 120.0, 130.0])]
    v = run(make_doc(progress))
    assert v.state is HealthState.HEALTHY and v.reasons[0].values == {"batches": 3}


def test_the_rate_ratio_threshold_is_honoured():
    progress = [prog(NOW - 3 + i, i, in_rate=150.0, proc_rate=100.0) for i in range(3)]
    assert run(make_doc(progress)).state is HealthState.FALLING_BEHIND
    assert run(make_doc(progress), thresholds=HealthThresholds(rate_ratio=1.5)).state is HealthState.HEALTHY


def test_median_batch_duration_over_the_trigger_interval_falls_behind():
    over = [prog(NOW - 10 + 3 * i, i, duration_ms=d) for i, d in enumerate([1000, 2500, 9000])]
    v = run(make_doc(over), trigger_interval=2.0)
    assert v.state is HealthState.FALLING_BEHIND and codes(v.reasons) == ["BATCH_LONGER_THAN_TRIGGER"]
    assert v.reasons[0].values == {"median_batch_s": 2.5, "trigger_interval_s": 2.0}


def test_median_batch_duration_exactly_the_trigger_interval_is_not_falling_behind():
    at = [prog(NOW - 10 + 3 * i, i, duration_ms=d) for i, d in enumerate([1000, 2000, 9000])]
    assert run(make_doc(at), trigger_interval=2.0).state is HealthState.HEALTHY
    # batch_duration_factor scales the limit.
    over = [prog(NOW - 10 + 3 * i, i, duration_ms=d) for i, d in enumerate([1000, 2500, 9000])]
    t = HealthThresholds(batch_duration_factor=1.5)
    assert run(make_doc(over), trigger_interval=2.0, thresholds=t).state is HealthState.HEALTHY


def test_zero_trigger_interval_has_no_duration_rule():
    slow = [prog(NOW - 50 + 10 * i, i, duration_ms=9000) for i in range(4)]
    assert run(make_doc(slow), trigger_interval=0).state is HealthState.HEALTHY
    assert run(make_doc(slow), trigger_interval=1).state is HealthState.FALLING_BEHIND


def test_both_falling_behind_reasons_together():
    progress = [prog(NOW - 20 + 5 * i, i, in_rate=500.0, proc_rate=100.0, duration_ms=4000) for i in range(3)]
    v = run(make_doc(progress), trigger_interval=1.0)
    assert codes(v.reasons) == ["INPUT_FASTER_THAN_PROCESSING", "BATCH_LONGER_THAN_TRIGGER"]


def test_fewer_than_min_batches_with_data_gives_no_rate_verdict():
    # Two batches with data far behind, plus empty batches that do not count.
    progress = [prog(NOW - 10, 0, in_rate=1000.0, proc_rate=10.0, duration_ms=9000),
                prog(NOW - 8, 1, in_rate=1000.0, proc_rate=10.0, duration_ms=9000)]
    progress += [prog(NOW - 6 + i, 2 + i, rows=0, in_rate=0.0, proc_rate=0.0) for i in range(5)]
    v = run(make_doc(progress))
    assert v.state is HealthState.HEALTHY and v.reasons[0].values == {"batches": 2}
    # With min_batches=2 the same batches are judged.
    assert run(make_doc(progress), thresholds=HealthThresholds(min_batches=2)).state is HealthState.FALLING_BEHIND


def test_zero_processing_rate_gives_no_rate_verdict():
    progress = [prog(NOW - 3 + i, i, in_rate=100.0, proc_rate=0.0) for i in range(3)]
    assert run(make_doc(progress)).state is HealthState.HEALTHY


def test_min_batches_zero_accepted_by_from_mapping_does_not_crash_an_idle_stream():
    t = HealthThresholds.from_mapping({"min_batches": 0})
    v = run(make_doc([prog(NOW - 10_000, 1, rows=0)]), thresholds=t)
    assert v.state is HealthState.IDLE


# --------------------------------------------------------------------------- IDLE / HEALTHY


def test_no_data_in_the_window_is_idle_even_with_old_data_outside_it():
    old = steady(5, end=NOW - 61, rows=1000)  # window = max(10 x 1, 60) = 60 s
    empty = [prog(NOW - 30 + i, 5 + i, rows=0) for i in range(3)]
    v = run(make_doc(old + empty))
    assert v.state is HealthState.IDLE and v.reasons[0].values == {"window_s": 60.0}
    assert v.reasons[0].message == "no new data in the last 60s; heartbeat 0s ago"


def test_data_in_the_window_is_healthy_and_the_window_start_is_inclusive():
    v = run(make_doc([prog(NOW - 60, 0, rows=10)]))
    assert v.state is HealthState.HEALTHY and v.reasons[0].values == {"batches": 1}
    assert run(make_doc([prog(NOW - 60.5, 0, rows=10)])).state is HealthState.IDLE


def test_window_grows_with_the_trigger_interval_and_can_be_set():
    progress = [prog(NOW - 90, 0, rows=10)]
    assert run(make_doc(progress), trigger_interval=1).state is HealthState.IDLE
    assert run(make_doc(progress), trigger_interval=10).state is HealthState.HEALTHY  # window 100 s
    assert run(make_doc(progress), thresholds=HealthThresholds(window_seconds=30), trigger_interval=10).state \
        is HealthState.IDLE


def test_healthy_metrics_come_from_the_last_batch():
    progress = steady(4, end=NOW - 2, in_rate=42.123, proc_rate=84.567, duration_ms=750,
                      state=[(10, 0), (5, 0)], watermark=iso(NOW - 120))
    v = run(make_doc(progress, quarantined_total=7, heartbeat_at=NOW - 1.234))
    assert v.state is HealthState.HEALTHY and v.warnings == ()
    assert v.metrics == {"input_rows_per_s": 42.12, "processed_rows_per_s": 84.57, "batch_duration_ms": 750.0,
                         "state_rows": 15, "watermark_lag_s": 120.0, "last_batch_id": 3, "quarantined_rows": 7,
                         "heartbeat_age_s": 1.23, "trigger_interval_s": 1.0, "trigger_from": "spec"}


def test_progress_of_several_queries_is_merged_in_time_order():
    a = QueryStatus(id="a", run_id="ra", name="a", active=True, status={},
                    recent_progress=[prog(NOW - 5, 10, rows=1), prog(NOW - 1, 11, rows=1)])
    b = QueryStatus(id="b", run_id="rb", name="b", active=True, status={},
                    recent_progress=[prog(NOW - 3, 50, rows=1)])
    v = run(make_doc(queries=[a, b]))
    assert v.state is HealthState.HEALTHY and v.reasons[0].values == {"batches": 3}
    assert v.metrics["last_batch_id"] == 11


# --------------------------------------------------------------------------- warnings


def test_state_growing_without_watermark_over_the_threshold_warns():
    progress = [prog(NOW - 5 + i, i, state=[(1_000 + i * 50_000, 0)]) for i in range(3)]  # +100,000
    assert "STATE_GROWING" not in codes(run(make_doc(progress)).warnings)
    progress = [prog(NOW - 5 + i, i, state=[(1_000 + i * 50_001, 0)]) for i in range(3)]  # +100,002
    v = run(make_doc(progress))
    assert v.state is HealthState.HEALTHY
    assert codes(v.warnings) == ["STATE_GROWING"]
    assert v.warnings[0].values == {"from_rows": 1_000, "to_rows": 101_002}


def test_state_growing_with_a_watermark_does_not_warn():
    progress = [prog(NOW - 5 + i, i, state=[(1_000 + i * 1_000_000, 0)], watermark=iso(NOW - 600)) for i in range(3)]
    assert "STATE_GROWING" not in codes(run(make_doc(progress)).warnings)
    # A watermark in any batch of the window counts (Spark's epoch-0 watermark means one is defined).
    progress = [prog(NOW - 5 + i, i, state=[(1_000 + i * 1_000_000, 0)]) for i in range(3)]
    progress[0]["eventTime"] = {"watermark": "1970-01-01T00:00:00.000Z"}
    v = run(make_doc(progress))
    assert "STATE_GROWING" not in codes(v.warnings)
    assert v.metrics["watermark_lag_s"] is None


def test_state_growth_needs_two_batches_and_state_operators():
    assert run(make_doc([prog(NOW - 1, 0, state=[(10_000_000, 0)])])).warnings == ()
    progress = [prog(NOW - 2, 0, state=[(0, 0)]), prog(NOW - 1, 1)]  # last batch has no state operator
    assert run(make_doc(progress)).warnings == ()


def test_watermark_lag_warns_only_past_the_limit():
    assert run(make_doc(steady(watermark=iso(NOW - 3600)))).warnings == ()
    v = run(make_doc(steady(watermark=iso(NOW - 3601))))
    assert codes(v.warnings) == ["WATERMARK_LAG"] and v.warnings[0].values == {"watermark_lag_s": 3601.0}
    t = HealthThresholds(watermark_lag_seconds=60)
    assert codes(run(make_doc(steady(watermark=iso(NOW - 61))), thresholds=t).warnings) == ["WATERMARK_LAG"]


def test_epoch_zero_watermark_is_not_a_lag():
    v = run(make_doc(steady(watermark="1970-01-01T00:00:00.000Z")))
    assert v.warnings == () and v.metrics["watermark_lag_s"] is None


def test_late_rows_dropped_in_the_window_are_summed():
    progress = [prog(NOW - 120, 0, state=[(10, 1000)], watermark=iso(NOW - 60)),  # outside the window
                prog(NOW - 3, 1, state=[(10, 2), (5, 3)], watermark=iso(NOW - 60)),
                prog(NOW - 2, 2, state=[(10, 0)], watermark=iso(NOW - 60)),
                prog(NOW - 1, 3, state=[(10, 4)], watermark=iso(NOW - 60))]
    v = run(make_doc(progress))
    assert codes(v.warnings) == ["LATE_ROWS_DROPPED"] and v.warnings[0].values == {"rows": 9}
    no_drop = [prog(NOW - 1, 0, state=[(10, 0)], watermark=iso(NOW - 60))]
    assert run(make_doc(no_drop)).warnings == ()


@pytest.mark.parametrize("behind, warns", [("100000", False), ("100001", True), (100001, True), (None, False)])
def test_kafka_offsets_behind_latest(behind, warns):
    # Spark reports Kafka source metrics as strings.
    progress = steady(3, behind="0")
    progress[-1] = prog(NOW - 1, 2, behind=behind if behind is not None else "NaN")
    v = run(make_doc(progress))
    assert ("KAFKA_LAG" in codes(v.warnings)) is warns
    if warns:
        assert v.warnings[0].values == {"max_offsets_behind_latest": 100001.0}


def test_kafka_lag_only_looks_at_the_last_batch():
    progress = steady(3, behind="0")
    progress[0] = prog(NOW - 3, 0, behind="9999999")
    assert run(make_doc(progress)).warnings == ()


def test_quarantine_ratio_boundary():
    at = [prog(NOW - 2, 0, rows=100, quarantined={"quality": 2}), prog(NOW - 1, 1, rows=100, quarantined={"quality": 8})]
    assert run(make_doc(at)).warnings == ()  # 10 / 200 = 5 % exactly
    over = [prog(NOW - 2, 0, rows=100, quarantined={"quality": 3}), prog(NOW - 1, 1, rows=100, quarantined={"quality": 8})]
    v = run(make_doc(over))
    assert codes(v.warnings) == ["QUARANTINE_RATE"]
    assert v.warnings[0].values == {"quarantined": 11, "rows": 200}
    assert "11 of 200 input rows quarantined" in v.warnings[0].message


def test_quarantine_sums_every_observed_metric_of_that_name():
    progress = [prog(NOW - 1, 0, rows=100, quarantined={"quality": 3, "user_check": 3})]
    v = run(make_doc(progress))
    assert v.warnings[0].values == {"quarantined": 6, "rows": 100}


def test_terminal_verdicts_carry_no_warnings():
    progress = [prog(NOW - 1, 0, rows=100, quarantined={"quality": 90}, watermark=iso(NOW - 99_999))]
    assert run(make_doc(progress, state="STOPPED")).warnings == ()
    assert run(make_doc(progress, state="FAILED")).warnings == ()


# --------------------------------------------------------------------------- thresholds


@pytest.mark.parametrize("mapping, message", [
    ({"bogus": 1}, "health.bogus: unknown health threshold"),
    ({"min_batches": True}, "health.min_batches: must be a number, got bool"),
    ({"rate_ratio": "1.5"}, "health.rate_ratio: must be a number, got str"),
    ({"window_seconds": None}, "health.window_seconds: must be a number, got NoneType"),
    ({"stall_min_seconds": -1}, "health.stall_min_seconds: must be >= 0, got -1"),
])
def test_from_mapping_errors_name_the_key(mapping, message):
    with pytest.raises(ValueError) as err:
        HealthThresholds.from_mapping(mapping)
    assert str(err.value).startswith(message)


def test_from_mapping_unknown_key_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"known: .*rate_ratio.*window_seconds"):
        HealthThresholds.from_mapping({"ratio": 2})


def test_from_mapping_builds_typed_values():
    t = HealthThresholds.from_mapping({"min_batches": 5.0, "rate_ratio": 2, "window_seconds": 90,
                                       "kafka_lag_records": 10})
    assert t.min_batches == 5 and isinstance(t.min_batches, int)
    assert t.rate_ratio == 2.0 and isinstance(t.rate_ratio, float)
    assert t.window_seconds == 90.0 and isinstance(t.window_seconds, float)
    assert t.kafka_lag_records == 10 and isinstance(t.kafka_lag_records, int)
    assert HealthThresholds.from_mapping(None) == HealthThresholds() == HealthThresholds.from_mapping({})
    assert HealthThresholds.from_mapping({"stall_min_seconds": 0}).stall_after(0) == 0  # zero is valid


def test_threshold_defaults():
    t = HealthThresholds()
    assert (t.min_batches, t.rate_ratio, t.batch_duration_factor, t.stall_trigger_intervals, t.stall_min_seconds,
            t.state_growth_rows, t.watermark_lag_seconds, t.kafka_lag_records, t.quarantine_ratio) == (
        3, 1.2, 1.0, 10.0, 120.0, 100_000, 3600.0, 100_000, 0.05)
    assert t.window(1) == 60 and t.window(6) == 60 and t.window(10) == 100
    assert HealthThresholds(window_seconds=15).window(10) == 15
    assert t.heartbeat_timeout(1) == 30 and t.heartbeat_timeout(10) == 30 and t.heartbeat_timeout(20) == 60
    assert HealthThresholds(heartbeat_timeout_seconds=7).heartbeat_timeout(20) == 7
    assert t.stall_after(1) == 120 and t.stall_after(12) == 120 and t.stall_after(30) == 300
    assert HealthThresholds(stall_trigger_intervals=2, stall_min_seconds=0).stall_after(5) == 10


# --------------------------------------------------------------------------- verdict object


def test_verdict_round_trips_through_json():
    progress = [prog(NOW - 3 + i, i, in_rate=500.0, proc_rate=100.0, quarantined={"quality": 50}) for i in range(3)]
    v = run(make_doc(progress, quarantined_total=150))
    assert v.state is HealthState.FALLING_BEHIND and v.warnings
    d = v.to_dict()
    assert type(d["state"]) is str and d["state"] == "FALLING_BEHIND"  # a plain string, not the enum
    assert d["reasons"][0]["code"] == "INPUT_FASTER_THAN_PROCESSING"
    back = HealthVerdict.from_dict(json.loads(json.dumps(d)))
    assert back == v
    assert isinstance(back.reasons, tuple) and isinstance(back.reasons[0], Reason)


def test_from_dict_tolerates_missing_optional_fields():
    v = HealthVerdict.from_dict({"state": "IDLE"})
    assert v == HealthVerdict(None, HealthState.IDLE, (), (), {}, None, None)


def test_summary_names_the_state_reasons_and_warnings():
    v = HealthVerdict("orders", HealthState.FALLING_BEHIND,
                      (Reason("A", "input too fast"), Reason("B", "batches too long")), (Reason("W", "lagging"),))
    assert v.summary() == "orders: FALLING_BEHIND - input too fast; batches too long | warnings: lagging"
    assert HealthVerdict("orders", HealthState.HEALTHY, ()).summary() == "orders: HEALTHY"
    real = run(make_doc(steady()))
    assert real.summary().startswith("orders: HEALTHY - ") and real.reasons[0].message in real.summary()


def test_state_properties_and_gauge():
    assert {s for s in HealthState if s.is_ok} == {HealthState.HEALTHY, HealthState.IDLE}
    assert {s for s in HealthState if s.is_terminal} == {HealthState.FAILED, HealthState.STOPPED}
    assert set(STATE_GAUGE) == set(HealthState)
    assert STATE_GAUGE[HealthState.HEALTHY] == STATE_GAUGE[HealthState.IDLE] == 0
    assert 0 < STATE_GAUGE[HealthState.FALLING_BEHIND] < STATE_GAUGE[HealthState.STALLED]


def test_an_idle_trigger_polling_its_sources_is_never_stalled():
    """An idle query's trigger is briefly active while it asks its sources for data (isDataAvailable
    false); caught at that moment long after start, it must read IDLE, not STALLED (seen on a real run)."""
    doc = make_doc([], trigger_active=False)
    doc["queries"][0]["status"] = {"message": "Getting offsets from FileStreamSource", "isDataAvailable": False,
                                   "isTriggerActive": True}
    doc["started_at"] = NOW - 600
    assert run(doc).state is HealthState.IDLE
    doc["queries"][0]["status"]["isDataAvailable"] = True  # a batch with data in flight for 600 s
    assert run(doc).state is HealthState.STALLED


def test_recent_control_storage_errors_are_a_warning_not_a_failure():
    doc = make_doc(steady())
    doc["storage_errors"] = {"count": 37, "last": "run marker: cannot check /c/s/RUNNING: Input/output error",
                             "at": NOW - 2}
    v = run(doc)
    assert v.state is HealthState.HEALTHY  # the stream runs: never FAILED or STOPPED for a storage error
    warning = next(w for w in v.warnings if w.code == "CONTROL_STORAGE_ERRORS")
    assert warning.values["count"] == 37 and "Input/output error" in warning.message
    doc["storage_errors"]["at"] = NOW - 3600  # long over: no warning
    assert "CONTROL_STORAGE_ERRORS" not in codes(run(doc).warnings)
