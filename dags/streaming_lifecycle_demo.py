"""The whole lifecycle of the bundled streaming ETL job, end to end, on an embedded local default.

feed phase 1 -> deploy -> wait for progress -> graceful stop -> restart from the checkpoint ->
feed phase 2 -> wait for progress -> graceful stop -> summary (batches, rows in, rows out per phase,
exactly-once check) -> downstream periods. ``ensure_stopped`` is a teardown: the stream is stopped even if a
task fails.

The file's second DAG, ``events_etl_demo_periods_report``, is the stream's downstream batch DAG: it is
scheduled on the Asset :data:`PERIODS`, the stream's **hourly** completeness Asset, whose ``AssetWatcher`` runs
:class:`~airflow_streaming.triggers.completeness.SparkStreamCompletenessTrigger` over the demo stream
(docs/assets.md). The stream runs ``events_etl --watermark "10 minutes"``: still stateless (nothing is dropped
or held back), but Spark tracks the event-time watermark and writes it into each batch's offsets, so an hour
is closed once a committed batch ran with a watermark past its end. The feed writes events one after another
in event time from 2026-01-01T00:00Z: phase 1 spans hours 00-01, phase 2 hours 02-03. In a real Airflow the
triggerer runs that watcher and the scheduler runs the DAG once per closed hour. ``airflow dags test`` runs no
triggerer, so the demo's ``downstream_periods`` task stands in for it: it runs that same trigger's ``run()``
(the code the triggerer runs: the same checkpoint reads, the same cursor) until it has emitted the hours
already closed, and calls the downstream DAG's report callable (:func:`report_period`) with each event's
payload, as the downstream task does with the Asset event's ``extra["payload"]``. It then checks, from the
stream's committed batches (:func:`airflow_streaming.completeness.closed_periods`), that every hour closed up
to the last committed watermark has exactly one report.

Paths live under ``$AIRFLOW_STREAMING_DEMO_ROOT`` (default ``/tmp/airflow-streaming-demo``);
Spark runs in local mode (``local[2]``), no connection needed.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.operators.stop import SparkStreamStopOperator
from airflow_streaming.sensors.progress import SparkStreamProgressSensor
from airflow_streaming.triggers.completeness import SparkStreamCompletenessTrigger

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
                         "--max-files-per-trigger", "2", "--watermark", "10 minutes"],
    "spark_conf": {"spark.sql.shuffle.partitions": 2},
}
#: Event times: phase 1 spans 2026-01-01T00:00-02:00 (1,500 events 4.8 s apart), phase 2 02:00-04:00 (1,000
#: events 7.2 s apart), in sequence order.
EVENT_TIME_START = datetime(2026, 1, 1, tzinfo=timezone.utc)
PHASES = {"phase1": {"count": 1500, "start_seq": 0, "files": 5, "hours": (0, 2), "malformed_every": 0},
          "phase2": {"count": 1000, "start_seq": 1500, "files": 4, "hours": (2, 4), "malformed_every": 50}}
RUN_LABEL = "demo"
#: The demo stream's completeness rule: hours of event time, closed by the stream's watermark.
PERIOD_RULE: dict[str, Any] = {"period": "hourly"}
PERIODS_DAG_ID = "events_etl_demo_periods_report"
#: The Asset the downstream DAG is scheduled on: one Asset event per hour closed in the sink.
PERIODS = Asset(name="events-etl-demo_hourly", uri="stream://events-etl-demo/hourly", watchers=[AssetWatcher(
    name="events_etl_demo_periods",
    trigger=SparkStreamCompletenessTrigger(spec=SPEC, rule=PERIOD_RULE, poll_interval=5))])


@task
def feed(phase: str) -> dict[str, Any]:
    """Write one phase's events into the stream's input directory, in event-time order over the phase's hours;
    phase 2 has every 50th line malformed. (Phase 1 has none: Spark counts a line without event time as the
    epoch in its batch's ``eventTime.min``, and a watcher's first look starts from the earliest event time of
    the batches before the first watermark, so a malformed line in the stream's first batch would make it
    start 48 hours - its look-back bound - before the first real hour, with empty reports.)"""
    from spark_jobs.event_generator import generate_events

    cfg = PHASES[phase]
    first_hour, end_hour = cfg["hours"]
    step = (end_hour - first_hour) * 3600 / cfg["count"]
    batch = generate_events(INPUT, count=cfg["count"], files=cfg["files"], run=RUN_LABEL, start_seq=cfg["start_seq"],
                            malformed_every=cfg["malformed_every"], file_start_index=cfg["start_seq"],
                            event_time_start=EVENT_TIME_START + timedelta(hours=first_hour), event_time_step=step,
                            rate_per_second=2000)
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


def _report_file(identity: str) -> str:
    return f"{ROOT}/reports/{identity.replace(':', '_').replace('/', '--')}.json"


def _sink_rows_between(start: datetime, end: datetime) -> int:
    """Rows of the sink (committed or not: the demo's sink has no uncommitted batch after a graceful stop)
    whose ``event_time`` lies in ``[start, end)``."""
    import pyarrow.dataset as ds

    if not os.path.isdir(OUTPUT):
        return 0
    dataset = ds.dataset(OUTPUT, format="parquet", partitioning="hive", exclude_invalid_files=True,
                         ignore_prefixes=["_", "."])
    times = dataset.to_table(columns=["event_time"]).column("event_time").to_pylist()
    utc = [t if t.tzinfo else t.replace(tzinfo=timezone.utc) for t in times if t is not None]
    return sum(1 for t in utc if start <= t < end)


def report_period(payload: dict[str, Any]) -> str:
    """The downstream report of one closed hour (an Asset event's ``extra["payload"]``): the event's input rows
    (the input lines of the committed batches that ran while the watermark was in the hour, the core's count)
    and the rows the sink holds with an ``event_time`` in the hour, written to ``reports/<identity>.json``
    (keyed by the period's identity, so a repeated event rewrites the same report); returns a one-line account."""
    start, end = (datetime.fromisoformat(payload[k].replace("Z", "+00:00")) for k in ("period_start", "period_end"))
    sink_rows = _sink_rows_between(start, end)
    report = {"identity": payload["identity"], "stream": payload["stream"], "version": payload["version"],
              "batches": payload["batches"], "input_rows": payload["input_rows"], "sink_rows_in_hour": sink_rows,
              "proved_by_batch": payload["batch_id"], "watermark": payload["watermark"]}
    os.makedirs(f"{ROOT}/reports", exist_ok=True)
    with open(_report_file(payload["identity"]), "w") as fh:
        json.dump(report, fh, indent=1)
    rows_in = ("input rows unknown" if payload["input_rows"] is None
               else f"{payload['input_rows']} input rows in the {payload['batches']} batch(es) counted in it")
    return (f"hour {start:%Y-%m-%dT%H:%M}/{end:%H:%M}Z (proved by committed batch {payload['batch_id']}, "
            f"watermark {payload['watermark']}): {rows_in}, {sink_rows} sink rows with event_time in the hour")


async def _closed_periods(trigger: SparkStreamCompletenessTrigger) -> list[dict[str, Any]]:
    """Run ``trigger.run()`` until it has emitted every period already closed: the next event does not come
    within a poll + ``persist_delay`` + 3 s (after its last event the trigger writes its cursor and sleeps a
    poll; a period whose last batch's counts are not yet known is held back one poll)."""
    import asyncio

    payloads: list[dict[str, Any]] = []
    events = trigger.run()
    try:
        while True:
            event = await asyncio.wait_for(anext(events), trigger.poll_interval + trigger.persist_delay + 3)
            payloads.append(event.payload)
    except TimeoutError:
        pass
    finally:
        await events.aclose()
    return payloads


@task
def downstream_periods(stop: dict[str, Any]) -> list[str]:
    """Stands in for the triggerer (``airflow dags test`` runs none): the downstream DAG's watcher trigger emits
    the hours closed in the sink since its cursor, and the downstream report runs for each (appended to
    periods.txt). Fails unless every hour closed up to the stream's last committed watermark (by the core,
    from the checkpoint) is reported exactly once."""
    import asyncio

    from airflow_streaming.checkpoint.committed import read_committed
    from airflow_streaming.completeness import closed_periods, iso_ms, parse_rule
    from airflow_streaming.control.local import LocalStorage

    already = {name for name in os.listdir(f"{ROOT}/reports")} if os.path.isdir(f"{ROOT}/reports") else set()
    payloads = asyncio.run(_closed_periods(PERIODS.watchers[0].trigger))
    repeated = [p["identity"] for p in payloads if os.path.basename(_report_file(p["identity"])) in already]
    lines = [f"[demo] downstream {PERIODS_DAG_ID} ran for {report_period(p)}" for p in payloads]
    rule = parse_rule(PERIOD_RULE)
    committed = [b for b in read_committed(LocalStorage(), SPEC["checkpoint_location"]).batches if b.committed]
    closed = {e.identity for e in closed_periods(rule, committed, None)}
    newest = max(committed, key=lambda b: b.batch_id)
    watermark = max(b.watermark_ms for b in committed)
    open_hour = rule.period_at(watermark)
    lines.append(f"[demo] hour {iso_ms(open_hour.start)[:16]}/{iso_ms(open_hour.end)[11:16]}Z is not closed (last "
                 f"committed batch {newest.batch_id} ran with watermark {iso_ms(watermark)}): no downstream run "
                 f"for it or later hours yet")
    with open(f"{ROOT}/periods.txt", "a") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    reports = f"{ROOT}/reports"
    reported = {json.loads(Path(reports, n).read_text())["identity"]
                for n in os.listdir(reports)} if os.path.isdir(reports) else set()
    if repeated or reported != closed:
        raise ValueError(f"hours closed up to watermark {iso_ms(watermark)}: {sorted(closed)}; reported: "
                         f"{sorted(reported)}, repeated: {repeated}")
    return lines


@task
def report_periods(triggering_asset_events: Any = None) -> list[str]:
    """The downstream report, once per Asset event (one per closed hour of the demo stream)."""
    lines = [report_period(event.extra["payload"])
             for events in (triggering_asset_events or {}).values() for event in events]
    print("\n".join(lines))
    return lines


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
    periods1 = downstream_periods.override(task_id="downstream_periods_phase1")(stop1.output)
    periods = downstream_periods.override(task_id="downstream_periods_phase2")(stop2.output)
    ensure_stopped = SparkStreamStopOperator(task_id="ensure_stopped", spec=SPEC)

    feed1 >> deploy >> wait1 >> stop1 >> periods1 >> restart >> feed2 >> wait2 >> stop2 >> report >> periods
    periods >> ensure_stopped.as_teardown(setups=[deploy, restart])


with DAG(
    dag_id=PERIODS_DAG_ID,
    schedule=[PERIODS],
    catchup=False,
    tags=["airflow-streaming", "example"],
    doc_md="The demo stream's downstream batch DAG: one run per hour of event time closed in its sink (an Asset "
           "event of its AssetWatcher, once the stream's watermark passed the hour); see streaming_lifecycle_demo.",
) as periods_dag:
    report_periods()
