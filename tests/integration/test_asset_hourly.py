"""An hourly, watermark-driven stream through real Airflow: one downstream DAG run per closed hour, with the
right counts, across a driver SIGKILL (with a triggerer restart while the stream is down) and an upgrade.

One real Airflow (``tests/airflow_stack.py``: PostgreSQL, api-server, scheduler, dag-processor, triggerer) and
one real stream: the bundled ``device_signals`` (``withWatermark("event_time", "30 seconds")`` + 1-minute
windows per device, appended to Parquet), one file per micro-batch, then ``device_signals_v2``. The DAG
``hourly_report`` is scheduled on an Asset whose ``AssetWatcher`` runs ``SparkStreamCompletenessTrigger`` with
``{"period": "hourly"}``; its task appends the payload of each Asset event to a file.

The feed is synthetic event time, one file per hour of it (50 events, one a minute from hh:05 to hh:54), in
order F0 (hour 0), F1 (hour 1), a SIGKILL of the driver, the triggerer restarted while it is down, the
supervisor's restart (``supervise``, the product's pass), F2 (hour 2), L (20 late events of hour 0, each its
own window and device: all behind the watermark, dropped by Spark), the upgrade to v2 through the lifecycle
runner (gate, stop, start, probation), F3 (hour 3) and F4 (hour 4). The watermark after the file of hour h
is hh:53:30, so hours 0-3 close and hour 4 does not.

A batch's rows count in the hour its watermark lies in (``airflow_streaming/completeness.py``): the file of
hour h+1 runs with the watermark hh:53:30. So what was fed for each closed hour is: hour 0 <- F0 + F1 (100
rows), hour 1 <- F2 (50), hour 2 <- L + F3 (70, 20 late), hour 3 <- F4 (50). Hour 1 spans the kill (its
proof and F2 ran under another driver than the batch that first ran in it) and a trigger recreated between the
two drivers; hour 2 spans the upgrade. Asserted: ``hourly_report`` ran exactly once per closed hour, in order,
never for hour 4; each payload's counts are those fed and those the core computes from the checkpoint (with the
reports the final status document carries); the sink's windows hold each fed event that is not late once.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_stack import AirflowStack, StackOptions, airflow_stack  # noqa: F401 - the fixture
from airflow_streaming.checkpoint.committed import read_committed
from airflow_streaming.completeness import HOUR_MS, closed_periods, iso_ms, parse_rule
from airflow_streaming.hooks.streaming_job import storage_path
from airflow_streaming.lifecycle.record import Action, Probation, Step
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner
from airflow_streaming.lifecycle.supervisor import supervise
from airflow_streaming.supervision.policy import RestartPolicy
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_window_counts
from streams import StreamRegistry, wait_for
import stream_actions

pytestmark = [pytest.mark.spark, pytest.mark.airflow]

STREAM = "hourly-signals"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
DEVICES = 4
PER_HOUR = 50  # events of one hour's file: one a minute, hh:05 .. hh:54
LATE = 20  # late events: 00:10 .. 00:29, each its own window (and so its own group at the stateful operator)

REPORT_DAG = '''
import json
import os
import pendulum
from airflow.sdk import Asset, AssetWatcher, dag, task
from airflow_streaming.triggers.completeness import SparkStreamCompletenessTrigger

SPEC = json.loads(open(os.environ["HOURLY_SPEC"]).read())
HOURLY = Asset(name="hourly-signals_hourly", uri="stream://hourly-signals/hourly", watchers=[AssetWatcher(
    name="hourly-signals_hourly", trigger=SparkStreamCompletenessTrigger(spec=SPEC, rule={"period": "hourly"},
                                                                         poll_interval=1))])


@dag(schedule=[HOURLY], start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def hourly_report():
    @task
    def record(triggering_asset_events=None, run_id=None):
        lines = [json.dumps({"run_id": run_id, "timestamp": str(event.timestamp), "extra": event.extra})
                 for events in triggering_asset_events.values() for event in events]
        with open(os.environ["HOURLY_OUT"], "a") as fh:
            fh.write("".join(line + "\\n" for line in lines))

    record()


hourly_report()
'''


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hourly")


@pytest.fixture(scope="module")
def registry(root: Path):
    streams = StreamRegistry(root)
    try:
        yield streams
    finally:
        streams.kill_all()


@pytest.fixture(scope="module")
def spec(registry: StreamRegistry):
    return registry.spec(STREAM, "device_signals", ["--input", registry.path("input"), "--output",
                                                    registry.path("output"), "--max-files-per-trigger", "1"],
                         trigger_interval=2)


@pytest.fixture(scope="module")
def airflow_stack_options(root: Path, spec) -> StackOptions:
    dags = root / "dags"
    dags.mkdir()
    (dags / "hourly_report.py").write_text(REPORT_DAG)
    (root / "spec.json").write_text(json.dumps(spec.to_dict()))
    return StackOptions(dags_folder=str(dags), env={"HOURLY_SPEC": str(root / "spec.json"),
                                                    "HOURLY_OUT": str(root / "runs.jsonl")})


class Feed:
    """One file per call, with consecutive sequence numbers; remembers each file's event times and rows."""

    def __init__(self, directory: str):
        self.directory, self.seq, self.files = directory, 0, []

    def write(self, name: str, start: datetime, count: int, step_s: float = 60.0) -> None:
        generate_events(self.directory, count=count, files=1, run=name, start_seq=self.seq, devices=DEVICES,
                        event_time_start=start, event_time_step=step_s, file_start_index=len(self.files))
        times = [start + timedelta(seconds=i * step_s) for i in range(count)]
        self.files.append({"name": name, "seqs": list(range(self.seq, self.seq + count)), "times": times})
        self.seq += count

    def hour(self, h: int) -> None:
        self.write(f"h{h}", T0 + timedelta(hours=h, minutes=5), PER_HOUR)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def expected(files: list[dict[str, Any]]) -> tuple[dict[int, tuple[int, int]], int, dict[tuple[str, str], int]]:
    """From the feed alone: per hour (start ms) its ``(rows, late rows)`` (a file's rows count in the hour of
    the watermark its batch ran with: the highest event time before it minus 30 s; a file before any watermark
    in that of the first one), the final watermark, and the window counts the sink must hold."""
    mark, marks, late = 0, [], []
    for f in files:
        marks.append(mark)
        late.append(sum(1 for t in f["times"] if ms(t) <= mark))
        mark = max(mark, max(ms(t) for t in f["times"]) - 30_000)
    first_positive = next(m for m in marks if m > 0)
    hours: dict[int, tuple[int, int]] = {}
    for f, m, dropped in zip(files, marks, late):
        start = (m or first_positive) // HOUR_MS * HOUR_MS
        rows, lates = hours.get(start, (0, 0))
        hours[start] = (rows + len(f["times"]), lates + dropped)
    windows: dict[tuple[str, str], int] = {}
    for f, m in zip(files, marks):
        for seq, t in zip(f["seqs"], f["times"]):
            window = t.replace(second=0, microsecond=0)
            if ms(t) > m and ms(window) + 60_000 <= mark:
                key = (window.replace(tzinfo=None).isoformat(), f"dev-{seq % DEVICES:03d}")
                windows[key] = windows.get(key, 0) + 1
    return {h: v for h, v in hours.items() if h + HOUR_MS <= mark}, mark, windows


def committed_watermark(hook: Any) -> int:
    """The highest watermark a committed batch of the stream's checkpoint ran with."""
    read = read_committed(hook.checkpoint_storage, storage_path(hook.spec.checkpoint_location).rstrip("/"))
    return max([b.watermark_ms for b in read.batches if b.committed] or [0])


def recorded(root: Path) -> list[dict[str, Any]]:
    path = root / "runs.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return sorted((json.loads(line) for line in lines), key=lambda r: datetime.fromisoformat(r["timestamp"]))


@pytest.mark.long(covered_by="tests/integration/test_asset_completeness.py::"
                           "test_one_downstream_run_per_closed_hour_across_a_triggerer_restart")
def test_one_run_per_closed_hour_with_its_counts_across_a_kill_and_an_upgrade(airflow_stack: AirflowStack, root,  # noqa: F811
                                                                              registry, spec):
    started, marks = time.monotonic(), {}
    hook = registry.hook(spec)
    feed = Feed(registry.path("input"))
    airflow_stack.wait_for_dag("hourly_report")

    feed.hour(0)
    deployed = LifecycleRunner(spec, Action.DEPLOY).run()
    assert deployed.step == Step.SUCCEEDED, deployed.error
    feed.hour(1)
    wait_for(lambda: committed_watermark(hook) >= ms(T0 + timedelta(hours=1, minutes=53)), 120,
             "hour 1's file processed (the watermark past 01:53 committed)")
    marks["hours_0_1"] = time.monotonic() - started

    # Hour 0 is reported (its cursor written) before anything else happens: no restart inside its one-duplicate
    # window. Then the driver dies and the supervisor's pass restarts the stream from its checkpoint; once the
    # new driver has replaced the status document, the triggerer restarts: the new trigger never sees the
    # first driver's reports, yet hour 1 holds a batch of each driver.
    wait_for(lambda: len(recorded(root)) >= 1, 120, "hour 0's hourly_report run", interval=1)
    killed = hook.driver_record()
    os.killpg(killed.submit_pid, signal.SIGKILL)
    wait_for(lambda: hook.health().state.value == "FAILED", 60, "the FAILED verdict")
    restarted = supervise(hook, RestartPolicy(max_attempts=3, backoff_initial_s=1, backoff_max_s=5), lambda e: None,
                          max_wait_s=10)
    assert restarted.action == "RESTARTED", restarted
    wait_for(lambda: (d := hook.status()) is not None and d.run_id == restarted.new_run_id and d.state == "RUNNING",
             180, "the restarted driver running")
    airflow_stack.restart("triggerer")
    feed.hour(2)
    feed.write("late", T0 + timedelta(minutes=10), LATE)
    wait_for(lambda: committed_watermark(hook) >= ms(T0 + timedelta(hours=2, minutes=53)), 180,
             "hour 2's file processed by the restarted driver")
    marks["killed_restarted"] = time.monotonic() - started

    # The upgrade to v2 (the gate, a graceful stop, the start, probation): the next hours' files come once v2
    # runs, so that probation sees batches and hour 2 spans both versions.
    v2 = spec.with_version("v2", application="device_signals_v2")
    result: list[Any] = []
    upgrade = threading.Thread(target=lambda: result.append(LifecycleRunner(
        v2, Action.UPGRADE, LifecycleOptions(probation=Probation(min_batches=1, window_s=180), poll_s=0.5)).run()))
    upgrade.start()
    try:
        wait_for(lambda: (hook.lifecycle_record() or {}).get("step") == "PROBATION" or not upgrade.is_alive(), 300,
                 "v2 in probation")
        feed.hour(3)
        feed.hour(4)
    finally:
        upgrade.join(300)
    assert result and result[0].step == Step.SUCCEEDED, result and result[0].error
    hours, final_mark, windows = expected(feed.files)
    assert sorted(hours) == [ms(T0) + k * HOUR_MS for k in range(4)]  # hours 0-3 close, hour 4 does not
    assert list(hours.values()) == [(100, 0), (50, 0), (70, LATE), (50, 0)]
    wait_for(lambda: committed_watermark(hook) >= final_mark, 180, "hour 4's file processed by v2")
    marks["upgraded"] = time.monotonic() - started

    wait_for(lambda: len(recorded(root)) >= len(hours), 120, "one hourly_report run per closed hour", interval=1)
    wait_for(lambda: read_window_counts(registry.path("output")) == windows, 120, "the closed windows in the sink")
    time.sleep(5)  # five polls of the watcher: nothing more comes
    marks["reported"] = time.monotonic() - started
    status = hook.status()
    assert stream_actions.stop(hook).graceful

    runs = recorded(root)
    payloads = [r["extra"]["payload"] for r in runs]
    print(f"hourly: runs {[(r['run_id'], r['extra']['payload']) for r in runs]}; marks "
          f"{ {k: round(v) for k, v in marks.items()} } s; stack {airflow_stack.timings}", file=sys.stderr)
    assert [p["period_start"] for p in payloads] == [iso_ms(h) for h in hours]  # once each, in order, no hour 4
    assert len({r["run_id"] for r in runs}) == len(runs)
    dag_runs = airflow_stack.api("GET", "/api/v2/dags/hourly_report/dagRuns?limit=100")["dag_runs"]
    assert sorted(r["dag_run_id"] for r in dag_runs) == sorted(r["run_id"] for r in runs), dag_runs
    assert {(r["run_type"], r["state"]) for r in dag_runs} == {("asset_triggered", "success")}, dag_runs
    # Counts: what was fed for each hour, and what the core computes from the checkpoint with the reports the
    # last driver's status document carries (its own and, carried over, those of the drivers before it).
    assert [(p["input_rows"], p["late_rows"]) for p in payloads] == list(hours.values()), payloads
    earlier, ignored = status.earlier_reports()
    reports = [*earlier, *(p for q in status.queries for p in q.recent_progress)]
    read = read_committed(hook.checkpoint_storage, storage_path(spec.checkpoint_location).rstrip("/"), last=10_000,
                          progress=reports)
    assert read.batches[0].batch_id == 0 and not read.skipped and ignored == 0, (read.batches[:2], read.skipped)
    core = closed_periods(parse_rule({"period": "hourly"}), read.batches, None)
    assert [(iso_ms(e.key.start), e.batch_id, e.input_rows, e.late_rows) for e in core] == \
        [(p["period_start"], p["batch_id"], p["input_rows"], p["late_rows"]) for p in payloads]
    assert [p["version"] for p in payloads][0] == spec.version and payloads[-1]["version"] == "v2", payloads
    # The sink: every event that was not late, in its window, once.
    assert read_window_counts(registry.path("output")) == windows
    assert sum(windows.values()) == sum(len(f["times"]) for f in feed.files) - LATE - 2  # 04:53, 04:54 still open
