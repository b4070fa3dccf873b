"""The whole lifecycle of the bundled streaming ETL job, end to end, on an embedded local default.

feed phase 1 -> deploy -> wait for progress -> graceful stop -> restart from the checkpoint ->
feed phase 2 -> wait for progress -> graceful stop -> summary (batches, rows in, rows out per phase,
exactly-once check). ``ensure_stopped`` is a teardown: the stream is stopped even if a task fails.

Paths live under ``$AIRFLOW_STREAMING_DEMO_ROOT`` (default ``/tmp/airflow-streaming-demo``);
Spark runs in local mode (``local[2]``), no connection needed.
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.sdk import DAG, task

from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.operators.stop import SparkStreamStopOperator
from airflow_streaming.sensors.progress import SparkStreamProgressSensor

ROOT = os.environ.get("AIRFLOW_STREAMING_DEMO_ROOT", "/tmp/airflow-streaming-demo")
NAME = "events-etl-demo"
INPUT, OUTPUT, QUARANTINE = f"{ROOT}/input", f"{ROOT}/output", f"{ROOT}/quarantine"
SPEC: dict[str, Any] = {
    "name": NAME,
    "application": "events_etl",
    "version": "v1",
    "checkpoint_location": f"{ROOT}/checkpoints/{NAME}",
    "control_location": f"{ROOT}/control",
    "master": "local[2]",
    "trigger_interval": "2 seconds",
    "heartbeat_interval": "2 seconds",
    "stop_timeout": "2 minutes",
    "startup_timeout": "5 minutes",
    "application_args": ["--input", INPUT, "--output", OUTPUT, "--quarantine", QUARANTINE,
                         "--max-files-per-trigger", "2"],
    "spark_conf": {"spark.sql.shuffle.partitions": 2},
}
PHASES = {"phase1": {"count": 1500, "start_seq": 0, "files": 5}, "phase2": {"count": 1000, "start_seq": 1500, "files": 4}}
MALFORMED_EVERY = 50
RUN_LABEL = "demo"


@task
def feed(phase: str) -> dict[str, Any]:
    """Write one phase's events (every 50th line malformed) into the stream's input directory."""
    from spark_jobs.event_generator import generate_events

    cfg = PHASES[phase]
    batch = generate_events(INPUT, count=cfg["count"], files=cfg["files"], run=RUN_LABEL, start_seq=cfg["start_seq"],
                            malformed_every=MALFORMED_EVERY, file_start_index=cfg["start_seq"], rate_per_second=2000)
    return {"phase": phase, "valid": batch.valid, "malformed": batch.malformed, "lines": batch.valid + batch.malformed}


@task
def summary(feeds: list[dict[str, Any]], stop1: dict[str, Any], stop2: dict[str, Any]) -> dict[str, Any]:
    """Batches, rows in and rows out per phase, and the exactly-once verdict, written to summary.json."""
    from spark_jobs.event_generator import event_id_for
    from spark_jobs.outputs import count_quarantined, read_etl_output

    output = read_etl_output(OUTPUT)
    b1_last, b2_last = stop1["last_committed_batch"], stop2["last_committed_batch"]
    phases = []
    for fed, first, last in ((feeds[0], 0, b1_last), (feeds[1], b1_last + 1, b2_last)):
        phases.append({
            "phase": fed["phase"], "batches": f"{first}..{last}", "batch_count": last - first + 1,
            "rows_in": fed["lines"], "valid_in": fed["valid"], "quarantined_in": fed["malformed"],
            "rows_out": output.rows_in_batches(first, last),
        })
    expected = {event_id_for(RUN_LABEL, s) for p in PHASES.values() for s in range(p["start_seq"], p["start_seq"] + p["count"])}
    result = {
        "stream": NAME,
        "phases": phases,
        "stops": [{k: s[k] for k in ("graceful", "clean", "last_committed_batch", "seconds")} for s in (stop1, stop2)],
        "restart_continued_at_batch": b1_last + 1,
        "rows_out_total": output.rows,
        "quarantined_total": count_quarantined(QUARANTINE),
        "duplicates": len(output.duplicates),
        "missing": len(expected - set(output.event_ids)),
        "unexpected": len(set(output.event_ids) - expected),
    }
    result["exactly_once"] = result["duplicates"] == result["missing"] == result["unexpected"] == 0
    lines = [f"stream {NAME}: lifecycle demo summary"]
    lines += [f"  {p['phase']}: batches {p['batches']} ({p['batch_count']}), rows in {p['rows_in']} "
              f"({p['valid_in']} valid, {p['quarantined_in']} malformed), rows out {p['rows_out']}" for p in phases]
    lines += ["  stops: " + ", ".join(f"graceful={s['graceful']} clean={s['clean']} at batch {s['last_committed_batch']} "
                                      f"in {s['seconds']}s" for s in result["stops"])]
    lines += [f"  restart continued at batch {result['restart_continued_at_batch']}; output rows {result['rows_out_total']}, "
              f"quarantined {result['quarantined_total']}, duplicates {result['duplicates']}, missing {result['missing']}"]
    lines += [f"  exactly once: {'YES' if result['exactly_once'] else 'NO'}"]
    with open(f"{ROOT}/summary.json", "w") as fh:
        json.dump(result, fh, indent=1)
    with open(f"{ROOT}/summary.txt", "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not result["exactly_once"]:
        raise ValueError(f"exactly-once check failed: {result}")
    return result


with DAG(
    dag_id="streaming_lifecycle_demo",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    tags=["airflow-streaming", "example"],
    doc_md=__doc__,
) as dag:
    feed1 = feed.override(task_id="feed_phase1")("phase1")
    deploy = SparkStreamDeployOperator(task_id="deploy", spec=SPEC)
    wait1 = SparkStreamProgressSensor(task_id="wait_phase1", spec=SPEC, mode="poke", poke_interval=2, timeout=600,
                                      min_input_rows="{{ ti.xcom_pull(task_ids='feed_phase1')['lines'] }}")
    stop1 = SparkStreamStopOperator(task_id="stop_phase1", spec=SPEC, fail_if_not_graceful=True)
    restart = SparkStreamDeployOperator(task_id="restart", spec=SPEC)
    feed2 = feed.override(task_id="feed_phase2")("phase2")
    wait2 = SparkStreamProgressSensor(task_id="wait_phase2", spec=SPEC, mode="poke", poke_interval=2, timeout=600,
                                      min_input_rows="{{ ti.xcom_pull(task_ids='feed_phase2')['lines'] }}")
    stop2 = SparkStreamStopOperator(task_id="stop_phase2", spec=SPEC, fail_if_not_graceful=True)
    report = summary([feed1, feed2], stop1.output, stop2.output)
    ensure_stopped = SparkStreamStopOperator(task_id="ensure_stopped", spec=SPEC)

    feed1 >> deploy >> wait1 >> stop1 >> restart >> feed2 >> wait2 >> stop2 >> report
    report >> ensure_stopped.as_teardown(setups=[deploy, restart])
