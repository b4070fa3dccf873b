"""Writes the golden control files of this directory: what the provider writes, with fixed values.

The ``*.json`` files next to this script were made by running it on commit
6cc92b2062af5d5ee0a1b28664ea7659b9f4dcc5 (before the models became pydantic models), from the checkout:

    PYTHONPATH=. python tests/unit/data/previous_formats/make_golden.py

Do not regenerate them with a newer version: they are the previous version's formats, which the current
models must read, and write back identically (``tests/unit/test_previous_formats.py``). The functions
below use only the public API that both versions have, so the test also calls them with the current code
and compares the result with the files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

SPEC_V1 = {"name": "orders", "application": "events_etl", "version": "v1", "checkpoint_location": "/c/orders",
           "control_location": "/d", "trigger_interval": "5 seconds", "spark_conf": {"spark.x": "1"}}
SPEC_V2 = {**SPEC_V1, "version": "v2", "application": "events_etl_v2"}
T0 = 1_700_000_000.25


def manifest() -> dict[str, Any]:
    from airflow_streaming.lifecycle.snapshot import SnapshotManifest

    return SnapshotManifest(checkpoint="/c/orders", snapshot_dir="/d/orders/snapshots/u1", batch_id=41,
                            sink_metadata="/o/orders/_spark_metadata", files=17, bytes=20480, linked=True,
                            created_at=T0 + 30.5).to_dict()


def wait() -> dict[str, Any]:
    from airflow_streaming.lifecycle.waits import PROBATION, Wait

    return Wait(PROBATION, dict(SPEC_V2), "run-2", T0 + 400.0,
                {"started_at": T0 + 60.0, "probation": {"min_batches": 3, "window_s": 120.0}}).to_dict()


def record(terminal: bool = False) -> dict[str, Any]:
    """An upgrade at PROBATION (deferred, waiting), or (``terminal``) one that SUCCEEDED."""
    from airflow_streaming.lifecycle.record import Action, LifecycleRecord, Probation, Step

    rec = LifecycleRecord(stream="orders", action=Action.UPGRADE, from_spec=dict(SPEC_V1), to_spec=dict(SPEC_V2),
                          allow_warnings=True, probation=Probation(min_batches=3, window_s=120.0), warm_start=False,
                          id="20231114T221320-abc123", owner="dag upgrade_orders run r1", created_at=T0, updated_at=T0)
    rec.verdict = "COMPATIBLE_WITH_WARNINGS"
    rec.old_run_id = "run-1"
    rec.sink_path = "/o/orders"
    rec.advance(Step.CHECKED, "gate passed with 1 warning", now=T0 + 10.0)
    rec.advance(Step.STOPPING, None, now=T0 + 11.0)
    rec.stop_requested_at = T0 + 11.0
    rec.stopping_run_id = "run-1"
    rec.advance(Step.STOPPED, "stopped at batch 41", now=T0 + 20.0)
    rec.stop_batch = 41
    rec.advance(Step.SNAPSHOTTED, None, now=T0 + 31.0)
    rec.snapshot = manifest()
    rec.advance(Step.STARTING, None, now=T0 + 32.0)
    rec.new_run_id = "run-2"
    rec.advance(Step.PROBATION, None, now=T0 + 60.0)
    rec.steps.append({"step": "RESUMED", "at": T0 + 70.0, "detail": "resumed by pid 42 at step PROBATION"})
    rec.waiting = wait()
    rec.first_new_batch = 42
    if terminal:
        rec.advance(Step.SUCCEEDED, "HEALTHY after 3 completed batch(es)", now=T0 + 200.0)
    return rec.to_dict()


def history() -> list[dict[str, Any]]:
    from airflow_streaming.lifecycle.record import LifecycleRecord, append_history

    deploy = LifecycleRecord.from_dict({
        "stream": "orders", "action": "deploy", "from_spec": None, "to_spec": dict(SPEC_V1), "id": "d1",
        "step": "SUCCEEDED", "created_at": T0 - 1000.0, "updated_at": T0 - 900.0, "new_run_id": "run-1",
        "steps": [{"step": "PLANNED", "at": T0 - 1000.0, "detail": None}]})
    upgrade = LifecycleRecord.from_dict(record(terminal=True))
    return append_history(append_history([], deploy.history_entry()), upgrade.history_entry())


def ledger() -> dict[str, Any]:
    from airflow_streaming.supervision.policy import RestartLedger

    return RestartLedger(failures=[T0 + 1.5, T0 + 99.0], error_classes=["STREAM_FAILED", None], healthy_since=None,
                         gave_up=False, handled_run_ids=["run-1", "run-2"]).to_dict()


def verdict() -> dict[str, Any]:
    from airflow_streaming.health.verdict import HealthState, HealthVerdict, Reason

    return HealthVerdict(
        "orders", HealthState.FALLING_BEHIND,
        (Reason("INPUT_FASTER_THAN_PROCESSING", "input 120.0 rows/s > processing 80.0 rows/s",
                {"input_rows_per_s": 120.0, "processed_rows_per_s": 80.0, "batches": 4}),),
        (Reason("KAFKA_LAG", "Kafka source 5000 offsets behind latest", {"max_offsets_behind_latest": 5000.0}),),
        {"input_rows_per_s": 120.0, "processed_rows_per_s": 80.0, "batch_duration_ms": 6100.0, "state_rows": None,
         "watermark_lag_s": None, "last_batch_id": 57, "quarantined_rows": 3, "heartbeat_age_s": 1.5,
         "cluster": "standalone master reports app app-1 RUNNING"},
        "run-2", T0 + 300.0).to_dict()


def event() -> dict[str, Any]:
    from airflow_streaming.notifications.events import EventKind, StreamEvent

    return StreamEvent(kind=EventKind.RESTARTING, stream="orders", version="v2", run_id="run-2", app_id="app-1",
                       driver_id="4242", last_committed_batch=57, error_first_line="[STREAM_FAILED] boom",
                       error_class="STREAM_FAILED", attempt=2, max_attempts=5, next_attempt_in_s=20.0,
                       health_reasons=["driver exited"], links={"spark_ui": "http://driver:4040"}, at=T0 + 301.0,
                       dag_id="supervise", task_id="orders", suppressed_count=2, suppressed_since=T0 - 5.0).to_dict()


#: file name -> what the provider writes there (lifecycle.json, history.json, supervisor.json,
#: a snapshot's manifest.json) or passes through trigger events and XCom (wait, verdict, event).
GOLDEN = {"lifecycle.json": record, "lifecycle_terminal.json": lambda: record(terminal=True),
          "history.json": history, "manifest.json": manifest, "supervisor.json": ledger,
          "wait.json": wait, "health_verdict.json": verdict, "stream_event.json": event}


def main() -> None:
    for name, make in GOLDEN.items():
        (HERE / name).write_text(json.dumps(make(), indent=1) + "\n")
        print(HERE / name)


if __name__ == "__main__":
    main()
