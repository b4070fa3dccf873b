"""The counts of progress reports outlive the driver run: each starting driver carries the counting fields of
the status document it replaces into its own (``earlier_progress``), and the completeness watch reads them.

Real files throughout: the drivers' status documents are written by the driver's own reporter
(:class:`spark_jobs.runtime.reporter.StatusReporter`, as the launcher runs it: ``carry_over`` then ``write``),
the checkpoint in Spark's file formats, the watch is the trigger itself driven with asyncio."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from airflow_streaming.checkpoint.committed import DEFAULT_LAST
from airflow_streaming.completeness import HOUR_MS, iso_ms, parse_rule
from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlPaths, Lease, StatusDocument
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.storage import StorageError
from airflow_streaming.hooks.completeness import REMEMBERED_BATCHES, look
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec
from airflow_streaming.spec_hooks import forget_all
from airflow_streaming.triggers.completeness import SparkStreamCompletenessTrigger
from spark_jobs.runtime.reporter import StatusReporter

QUERY = "6f1c2d3e-0000-4000-8000-00000000ca11"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def hour(k: int) -> int:
    return T0 + k * HOUR_MS


def report(batch: int, rows: int, late: int = 1, run: str = "r1", query: str = QUERY) -> dict:
    """A progress report as Spark's listener gives it (the fields the reporter and the watch read, and others)."""
    return {"id": query, "runId": run, "name": "s1", "batchId": batch, "numInputRows": rows,
            "timestamp": f"2026-01-01T00:00:{batch % 60:02d}.{batch // 60:03d}Z",
            "inputRowsPerSecond": 1.0, "durationMs": {"triggerExecution": 5},
            "stateOperators": [{"numRowsTotal": 3, "numRowsDroppedByWatermark": late}],
            "eventTime": {"min": iso_ms(T0 + batch * 1000), "max": iso_ms(T0 + batch * 1000 + 5)},
            "sources": [{"description": "FileStreamSource", "numInputRows": rows}]}


def driver(control: str, run: str, stream: str = "s1", storage: LocalStorage | None = None) -> StatusReporter:
    """A driver run's reporter, started as the launcher starts it: carry the previous document over, write."""
    now = time.time()
    doc = StatusDocument(stream=stream, version="v1", run_id=run, state=contract.RUNNING, pid=os.getpid(), host="h",
                         started_at=now, heartbeat_at=now)
    rep = StatusReporter(storage or LocalStorage(), ControlPaths(control), doc, Lease(run, 1, None, "h", now, now, 120.0),
                         5.0)
    rep.carry_over()
    rep.write()
    return rep


def on_disk(control: str) -> StatusDocument:
    doc = contract.read_status(LocalStorage(), ControlPaths(control))
    assert doc is not None
    return doc


def batches_of(entries: list[dict]) -> list[int]:
    return [e["batchId"] for e in entries]


def test_a_new_driver_carries_the_counts_of_every_earlier_run_and_its_own_overflow(tmp_path):
    control = str(tmp_path / "control")
    first = driver(control, "r1")
    for batch in range(25):  # 20 stay in recent_progress; the 5 before go to earlier_progress at once
        first.on_progress(report(batch, rows=batch + 1))
    doc = on_disk(control)
    assert batches_of(doc.earlier_reports()[0]) == [0, 1, 2, 3, 4]
    assert [p["batchId"] for p in doc.queries[0].recent_progress] == list(range(5, 25))

    second = driver(control, "r2")  # killed, restarted, upgraded: a new run replaces status.json
    earlier, ignored = on_disk(control).earlier_reports()
    assert ignored == 0 and batches_of(earlier) == list(range(25)) and on_disk(control).queries == []
    assert earlier[7] == {"id": QUERY, "batchId": 7, "numInputRows": 8,
                          "stateOperators": [{"numRowsDroppedByWatermark": 1}], "eventTime": {"min": iso_ms(T0 + 7000)}}
    second.on_progress(report(24, rows=99, run="r2"))  # a replay of the first run's last batch: the new report wins
    second.on_progress(report(25, rows=100, run="r2"))

    driver(control, "r3")  # the third run carries what the second carried, and the second's own reports
    earlier = on_disk(control).earlier_reports()[0]
    assert batches_of(earlier) == list(range(26))
    assert [e["numInputRows"] for e in earlier[23:]] == [24, 99, 100]


def test_the_carried_counts_are_bounded_to_the_batches_a_watch_can_use(tmp_path):
    """Per query the newest EARLIER_PROGRESS_BATCHES batch ids (the watch reads a checkpoint's newest
    DEFAULT_LAST batches: older counts could never be used), of the EARLIER_PROGRESS_QUERIES queries seen last."""
    assert DEFAULT_LAST <= contract.EARLIER_PROGRESS_BATCHES <= REMEMBERED_BATCHES
    control = str(tmp_path / "control")
    rep = driver(control, "r1")
    for query in range(6):  # a stream given a new checkpoint (a new query id) at each of its upgrades
        for batch in range(60):
            rep.on_progress(report(batch, rows=1, query=f"q{query}"))
    driver(control, "r2")
    earlier = on_disk(control).earlier_reports()[0]
    assert [e["id"] for e in earlier] == [f"q{q}" for q in range(2, 6) for _ in range(contract.EARLIER_PROGRESS_BATCHES)]
    assert batches_of(earlier[-contract.EARLIER_PROGRESS_BATCHES:]) == list(range(60 - 32, 60))


def test_nothing_is_carried_from_another_stream_garbage_or_an_unreadable_document(tmp_path, caplog):
    control = str(tmp_path / "control")
    other = driver(control, "r0", stream="other")
    for batch in range(22):
        other.on_progress(report(batch, rows=1))
    assert driver(control, "r1").doc.earlier_progress == []  # another stream's document: nothing of it

    paths = ControlPaths(control)
    LocalStorage().write_atomic(paths.status, b"{not json")
    assert driver(control, "r2").doc.earlier_progress == []

    class Unreadable(LocalStorage):  # e.g. run_as_user: the previous driver's file cannot be read at all
        def read_bytes(self, path: str) -> bytes | None:
            raise StorageError(13, f"{path}: permission denied")

    rep = driver(control, "r3", storage=Unreadable())
    assert rep.doc.earlier_progress == [] and on_disk(control).run_id == "r3"  # the run starts all the same
    assert "not carried over" in caplog.text

    garbage = {**json.loads(on_disk(control).to_json()),
               "earlier_progress": [report(3, rows=5), "x", {"batchId": "4"}, {"batchId": 5, "numInputRows": "many"},
                                    {"batchId": 6, "stateOperators": [7]}, {"batchId": True}, report(8, rows=9)]}
    LocalStorage().write_atomic(paths.status, json.dumps(garbage).encode())
    assert batches_of(driver(control, "r4").doc.earlier_progress) == [3, 8]


@pytest.mark.parametrize("earlier,kept,ignored", [
    (None, [], 0), ("garbage", [], 1), ({"batchId": 1}, [], 1), ([1, None, {"id": 3, "batchId": 1}], [], 3),
    ([{"batchId": 2, "numInputRows": 4}], [2], 0)])
def test_a_status_document_with_any_earlier_progress_is_read_and_its_garbage_counted(tmp_path, earlier, kept, ignored):
    control = str(tmp_path / "control")
    driver(control, "r1")
    raw = json.loads(on_disk(control).to_json())
    raw["earlier_progress"] = earlier
    LocalStorage().write_atomic(ControlPaths(control).status, json.dumps(raw).encode())
    entries, bad = on_disk(control).earlier_reports()  # never raises: a health poll reads this document too
    assert (batches_of(entries), bad) == (kept, ignored)


# ---------------------------------------------------------------------- the watch across two drivers

def offsets(wm: int) -> bytes:
    meta = {"batchWatermarkMs": wm, "batchTimestampMs": 1_700_000_000_000, "conf": {"spark.sql.shuffle.partitions": "2"}}
    return f'v1\n{json.dumps(meta)}\n{{"logOffset":3}}'.encode()


class Checkpoint:
    def __init__(self, root) -> None:
        self.root = root
        os.makedirs(root / "offsets")
        os.makedirs(root / "commits")
        (root / "metadata").write_text(json.dumps({"id": QUERY}))

    def batch(self, batch_id: int, wm: int) -> None:
        (self.root / "offsets" / str(batch_id)).write_bytes(offsets(wm))
        (self.root / "commits" / str(batch_id)).write_bytes(b'v1\n{"nextBatchWatermarkMs":0}')


def first_events(trigger: SparkStreamCompletenessTrigger, expect: int) -> list[dict]:
    """The trigger's first ``expect`` events (at most 30 s), then it is cancelled as a triggerer stopping does."""
    got: list[dict] = []

    async def main() -> None:
        async def drive() -> None:
            async for event in trigger.run():
                got.append(event.payload)
        task = asyncio.create_task(drive())
        deadline = time.monotonic() + 30.0
        while len(got) < expect and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    return got


def test_a_watch_started_after_a_driver_change_knows_the_counts_of_the_period_spanning_it(tmp_path):
    """The e2e's null count: a period whose batches ran under two drivers, watched by a trigger created after
    the second driver replaced the status document (a triggerer restart, the trigger moved). Its counts are
    those of both drivers' reports."""
    forget_all()
    spec = {"name": "s1", "application": "events_etl", "checkpoint_location": str(tmp_path / "ckpt"),
            "control_location": str(tmp_path / "control"), "master": "local[2]", "version": "v1"}
    hook = SparkStreamHook(StreamSpec.from_dict(spec))
    control = hook.paths.root
    ckpt = Checkpoint(tmp_path / "ckpt")
    first = driver(control, "r1")
    for batch, wm, rows in [(0, 0, 7), (1, hour(0) + 1, 11)]:
        ckpt.batch(batch, wm)
        first.on_progress(report(batch, rows=rows, late=batch))
    # SIGKILL: no exit record. The next driver (a restart, an upgrade, a standby taking over) starts.
    second = driver(control, "r2")
    ckpt.batch(2, hour(1) + 5)  # closes hour 0, whose batches 0 and 1 are the first driver's
    second.on_progress(report(2, rows=13, late=4, run="r2"))
    assert [q.run_id for q in on_disk(control).queries] == ["r2"]  # the first run's reports are gone from it

    rule = parse_rule({"period": "hourly"})
    found = look(hook, rule, None, None)  # a look with no memory: what a new trigger sees first
    assert [(e.key.start, e.input_rows, e.late_rows, e.batches) for e in found.events] == [(hour(0), 18, 1, 2)]
    trigger = SparkStreamCompletenessTrigger(spec=spec, rule={"period": "hourly"}, poll_interval=0.05,
                                             persist_delay=0.0)
    got = first_events(trigger, expect=1)
    assert [(e["period_start"], e["input_rows"], e["late_rows"]) for e in got] == [(iso_ms(hour(0)), 18, 1)]


def test_a_look_reports_the_garbage_entries_it_left_out(tmp_path):
    forget_all()
    spec = {"name": "s1", "application": "events_etl", "checkpoint_location": str(tmp_path / "ckpt"),
            "control_location": str(tmp_path / "control"), "master": "local[2]", "version": "v1"}
    hook = SparkStreamHook(StreamSpec.from_dict(spec))
    ckpt = Checkpoint(tmp_path / "ckpt")
    rep = driver(hook.paths.root, "r1")
    rep.doc.earlier_progress = ["junk", report(0, rows=3)]
    ckpt.batch(0, hour(0) + 1)
    ckpt.batch(1, hour(1) + 1)
    rep.on_progress(report(1, rows=4))
    found = look(hook, parse_rule({"period": "hourly"}), None, None)
    assert [(e.input_rows, e.late_rows) for e in found.events] == [(3, 1)]
    assert any("1 earlier_progress entry" in s for s in found.skipped), found.skipped


# ---------------------------------------------------------------------- running counts (counters)

def timed_report(batch: int, rows: int, late: int = 1, run: str = "r1") -> dict:
    """A report whose timestamp grows with the batch (the reporter skips one not newer than its run's last)."""
    return {**report(batch, rows, late, run), "timestamp": iso_ms(T0 + batch * 1000)}


def test_the_counters_go_on_across_driver_runs_and_begin_again_after_a_lost_report(tmp_path, caplog):
    control = str(tmp_path / "control")
    first = driver(control, "r1")
    for batch in range(50):
        first.on_progress(timed_report(batch, rows=batch, late=batch % 3))
    first.on_progress(timed_report(49, rows=49, late=1))  # delivered again (settle() at exit): not added again
    second = driver(control, "r2")  # killed, restarted: the new run carries the counters over
    for batch in range(50, 100):
        second.on_progress(timed_report(batch, rows=batch, late=batch % 3, run="r2"))
    doc = on_disk(control)
    assert doc.counters_of(QUERY) == {"from_batch": 0, "through_batch": 99, "input_rows": sum(range(100)),
                                      "late_rows": sum(b % 3 for b in range(100)), "epoch": "r1", "run_id": "r2"}
    # Killed between the commit of batch 100 and its report: the next run's first report is of batch 101.
    third = driver(control, "r3")
    third.on_progress(timed_report(101, rows=5, late=0, run="r3"))
    assert on_disk(control).counters_of(QUERY) == {"from_batch": 101, "through_batch": 101, "input_rows": 5,
                                                   "late_rows": 0, "epoch": "r3", "run_id": "r3"}
    raw = json.loads(on_disk(control).to_json())
    raw["counters"] = {QUERY: {"from_batch": "x"}}
    LocalStorage().write_atomic(ControlPaths(control).status, json.dumps(raw).encode())
    assert on_disk(control).counters_of(QUERY) is None  # a health poll reads it: never raised
    assert driver(control, "r4").doc.counters == {} and "not all valid" in caplog.text


def test_an_hour_of_200_batches_is_counted_across_driver_runs_and_a_trigger_recreated(tmp_path):
    """The flagship use: an hourly report with the hour's row count, from a stream whose hour spans 200 batches
    (far more than the 32 a look reads). Real reporter files, checkpoint files, look and cursor on disk; the
    driver changes mid-hour and the watch is recreated (memory lost, position from the cursor) mid-hour."""
    from airflow_streaming.hooks.completeness import cursor_path, read_cursor, write_cursor

    forget_all()
    spec = {"name": "s1", "application": "events_etl", "checkpoint_location": str(tmp_path / "ckpt"),
            "control_location": str(tmp_path / "control"), "master": "local[2]", "version": "v1"}
    hook = SparkStreamHook(StreamSpec.from_dict(spec))
    rule = parse_rule({"period": "hourly"})
    cursor = cursor_path(hook.paths, rule)
    ckpt = Checkpoint(tmp_path / "ckpt")
    rep, run = driver(hook.paths.root, "r1"), "r1"
    per_hour, hours = 200, 4
    marks = [hour(0) + b * (HOUR_MS // per_hour) + 1 for b in range(per_hour * hours + 1)]
    rows = [b % 11 for b in range(len(marks))]
    late = [b % 2 for b in range(len(marks))]
    got, after, memory = [], None, {}
    for b, wm in enumerate(marks):
        if b == 350:  # a new driver run in the middle of hour 1
            rep, run = driver(hook.paths.root, "r2"), "r2"
        ckpt.batch(b, wm)
        rep.on_progress(timed_report(b, rows=rows[b], late=late[b], run=run))
        if b == 500:  # the trigger is recreated in the middle of hour 2: what it knew is the cursor
            after, memory = read_cursor(hook.storage, cursor, rule), {}
        if b % 7 == 0 or b == len(marks) - 1:
            for event in look(hook, rule, after, None, memory).events:
                write_cursor(hook.storage, cursor, rule, event)
                got.append((event.key.start, event.batches, event.input_rows, event.late_rows))
                after = event.key
    # Hour k's batches are those that ran with a watermark in it: ids 200k .. 200k + 199.
    want = [(hour(k), per_hour, sum(rows[per_hour * k:per_hour * (k + 1)]), sum(late[per_hour * k:per_hour * (k + 1)]))
            for k in range(hours)]
    assert got[0][0] == want[0][0] and got[0][2:] == (None, None)  # the first hour: no cursor before it, unknown
    assert got[1:] == want[1:]
