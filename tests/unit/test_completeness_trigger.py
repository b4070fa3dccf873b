"""The completeness event trigger driven with asyncio over a hand-built checkpoint (Spark's file formats)."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from airflow.triggers.base import BaseEventTrigger

from airflow_streaming.completeness import HOUR_MS, iso_ms, parse_rule
from airflow_streaming.control import contract
from airflow_streaming.hooks.completeness import CURSOR_SLOT, cursor_path
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec
from airflow_streaming.spec_hooks import forget_all
from airflow_streaming.triggers.completeness import SparkStreamCompletenessTrigger

QUERY = "6f1c2d3e-0000-4000-8000-000000000037"
RULE = {"period": "hourly"}
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def offsets(wm: int) -> bytes:
    meta = {"batchWatermarkMs": wm, "batchTimestampMs": 1_700_000_000_000, "conf": {"spark.sql.shuffle.partitions": "2"}}
    return f'v1\n{json.dumps(meta)}\n{{"logOffset":3}}'.encode()


COMMIT = b'v1\n{"nextBatchWatermarkMs":0}'


def cursor_identity(path: str) -> str:
    """The ``identity`` of the newest valid slot of the cursor file at ``path`` (read as a person would)."""
    data = open(path, "rb").read()
    slots = [data[k * CURSOR_SLOT:(k + 1) * CURSOR_SLOT].split(b" ", 2) for k in (0, 1)]
    return max((int(seq), json.loads(doc)) for _, seq, doc in slots if seq.isdigit())[1]["identity"]


class Stream:
    """A stream's spec, control directory and checkpoint written as its driver and Spark write them."""

    def __init__(self, tmp_path):
        forget_all()
        self.spec = {"name": "s1", "application": "events_etl", "checkpoint_location": str(tmp_path / "ckpt"),
                     "control_location": str(tmp_path / "control"), "master": "local[2]", "version": "v7"}
        self.hook = SparkStreamHook(StreamSpec.from_dict(self.spec))
        self.ckpt = tmp_path / "ckpt"
        os.makedirs(self.ckpt / "offsets")
        os.makedirs(self.ckpt / "commits")
        (self.ckpt / "metadata").write_text(json.dumps({"id": QUERY}))
        self.progress: list[dict] = []
        self.cursor = cursor_path(self.hook.paths, parse_rule(RULE))

    def batch(self, batch_id: int, wm: int, rows: int = 10, commit: bool = True, reported: int | None = None) -> None:
        """Plan batch ``batch_id`` with watermark ``wm``, commit it, write its progress report (with
        ``eventTime.watermark`` = ``reported`` when given: Spark's report carries ``wm``)."""
        (self.ckpt / "offsets" / str(batch_id)).write_bytes(offsets(wm))
        self.progress.append({"id": QUERY, "batchId": batch_id, "numInputRows": rows,
                              "stateOperators": [{"numRowsDroppedByWatermark": 1}]})
        if reported is not None:
            self.progress[-1]["eventTime"] = {"watermark": iso_ms(reported)}
        if commit:
            self.commit(batch_id)
        doc = contract.StatusDocument(
            stream="s1", version="v7", run_id="r1", state=contract.RUNNING, pid=1, host="h", started_at=1.0,
            heartbeat_at=2.0, queries=[contract.QueryStatus(QUERY, "r1", "s1", True, recent_progress=self.progress)])
        contract.write_status(self.hook.storage.unguarded, self.hook.paths, doc)

    def commit(self, batch_id: int) -> None:
        (self.ckpt / "commits" / str(batch_id)).write_bytes(COMMIT)

    def trigger(self, rule: dict | None = None, persist_delay: float = 0.0) -> SparkStreamCompletenessTrigger:
        return SparkStreamCompletenessTrigger(spec=self.spec, rule=rule or RULE, poll_interval=0.05,
                                         persist_delay=persist_delay)


def collect(trigger: SparkStreamCompletenessTrigger, seconds: float = 1.0, expect: int | None = None) -> list[dict]:
    """Run the trigger (then cancel it, as a triggerer stopping does); its events' payloads. It runs ``seconds``,
    and with ``expect`` until that many events came (at most 30 s: a busy machine polls late) and ``seconds``
    more, so that an extra event would be seen too."""
    got: list[dict] = []

    async def drive() -> None:
        async for event in trigger.run():
            got.append(event.payload)

    async def main() -> None:
        task = asyncio.create_task(drive())
        deadline = time.monotonic() + 30.0
        while expect is not None and len(got) < expect and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(seconds)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    return got


def while_running(trigger: SparkStreamCompletenessTrigger, change, before: float = 0.4, after: float = 0.6
                  ) -> list[dict]:
    """Run ``trigger``; after ``before`` seconds (nothing emitted yet) apply ``change``; its payloads after
    ``after`` more seconds (then it is cancelled, as a triggerer stopping does)."""
    got: list[dict] = []

    async def main() -> None:
        async def drive() -> None:
            async for event in trigger.run():
                got.append(event.payload)
        task = asyncio.create_task(drive())
        await asyncio.sleep(before)
        assert got == []
        change()
        await asyncio.sleep(after)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    return got


def hour(k: int) -> int:
    return T0 + k * HOUR_MS


def identity(k: int) -> str:
    return f"{iso_ms(hour(k))}/{iso_ms(hour(k + 1))}"


def test_each_closed_period_once_in_order_and_a_restart_resumes(tmp_path):
    s = Stream(tmp_path)
    s.batch(0, 0)
    s.batch(1, hour(0) + 1)
    s.batch(2, hour(2) + 5)  # closes hours 0 and 1
    first = collect(s.trigger(), expect=2)
    assert [e["identity"] for e in first] == ["2026-01-01T00:00:00.000Z/2026-01-01T01:00:00.000Z",
                                              "2026-01-01T01:00:00.000Z/2026-01-01T02:00:00.000Z"]
    assert first[0] == {**first[0], "stream": "s1", "version": "v7", "period": "hourly", "batch_id": 2,
                        "period_start": "2026-01-01T00:00:00.000Z", "input_rows": 20, "late_rows": 2, "batches": 2}
    assert cursor_identity(s.cursor) == first[1]["identity"]

    # A restart (a new trigger from the same kwargs): nothing twice, then only the newly closed hour.
    assert collect(s.trigger(), 0.5) == []
    s.batch(3, hour(3))
    again = collect(s.trigger(), expect=1)
    assert [e["identity"] for e in again] == ["2026-01-01T02:00:00.000Z/2026-01-01T03:00:00.000Z"]


def test_an_uncommitted_batch_emits_nothing_until_it_commits(tmp_path):
    s = Stream(tmp_path)
    s.batch(0, hour(0) + 1)
    s.batch(1, hour(1) + 1, commit=False)  # would close hour 0, but the sink does not hold it yet
    assert collect(s.trigger(), 0.5) == []
    assert not os.path.exists(s.cursor)
    s.commit(1)
    assert [e["batch_id"] for e in collect(s.trigger(), 0.5, expect=1)] == [1]


def test_a_running_trigger_sees_a_later_commit(tmp_path):
    s = Stream(tmp_path)
    s.batch(0, hour(0) + 1)
    got = while_running(s.trigger(), lambda: s.batch(1, hour(1) + 1))
    assert [e["period_end"] for e in got] == ["2026-01-01T01:00:00.000Z"]


def test_counts_of_a_period_that_spans_two_driver_runs_come_from_what_the_watch_saw(tmp_path):
    """The status document holds only the current driver run's progress: after a kill or an upgrade the first
    run's reports are gone from it. A running watch remembers the reports it saw, so a period whose batches
    ran under two drivers still has its counts (seen on the real-Airflow e2e stream: they were null)."""
    s = Stream(tmp_path)
    s.batch(0, 0, rows=7)
    s.batch(1, hour(0) + 1, rows=11)

    def new_driver_run() -> None:
        s.progress.clear()  # a new driver run: its status shows only its own batches
        s.batch(2, hour(1) + 5, rows=13)  # closes hour 0 (batches 0 and 1: the first run's)

    got = while_running(s.trigger(), new_driver_run)
    assert [(e["identity"], e["input_rows"], e["late_rows"]) for e in got] == [(identity(0), 18, 2)]
    # A watch that never saw the first run's reports does not guess: the count is unknown, never wrong.
    os.unlink(s.cursor)
    assert [(e["identity"], e["input_rows"]) for e in collect(s.trigger(), 0.5, expect=1)] == [(identity(0), None)]


@pytest.mark.parametrize("garbage", [b"{not json", b'{"rule": {"period": "daily"}, "start": 0, "end": 86400000}',
                                     b'{"rule": {"period": "hourly"}, "start": 5, "end": 7}',
                                     b"0badc0de 7 {}".ljust(CURSOR_SLOT) * 2])  # two slots, neither valid
def test_a_garbage_cursor_emits_nothing_and_says_so(tmp_path, capsys, garbage):
    s = Stream(tmp_path)
    s.batch(0, hour(0) + 1)
    s.batch(1, hour(3) + 1)
    os.makedirs(os.path.dirname(s.cursor))
    with open(s.cursor, "wb") as fh:
        fh.write(garbage)
    capsys.readouterr()
    assert collect(s.trigger(), 0.5) == []
    errors = [line for line in capsys.readouterr().out.splitlines() if "emits nothing" in line]
    assert len(errors) == 1, errors  # logged once, not at every poll
    assert "error" in errors[0] and s.cursor in errors[0]
    assert open(s.cursor, "rb").read() == garbage  # left for the operator to look at
    os.unlink(s.cursor)  # deleted: reported again from what the checkpoint shows
    assert len(collect(s.trigger(), 0.5, expect=3)) == 3


def test_stopped_between_the_yield_and_the_cursor_write_repeats_that_one_period(tmp_path):
    s = Stream(tmp_path)
    s.batch(0, hour(0) + 1)
    s.batch(1, hour(3) + 1)  # closes hours 0, 1, 2
    # Stopped (cancelled, as a triggerer stopping does) inside the persist delay of the first event.
    (only,) = collect(s.trigger(persist_delay=30.0), 0.5, expect=1)
    assert not os.path.exists(s.cursor)
    again = collect(s.trigger(), expect=3)
    assert [e["identity"] for e in again] == [only["identity"], identity(1), identity(2)]  # one duplicate
    assert again[0] == only
    assert collect(s.trigger(), 0.3) == []


def test_a_watermark_far_ahead_is_caught_up_max_events_at_a_time(tmp_path):
    s = Stream(tmp_path)
    s.batch(0, hour(0) + 1)
    s.batch(1, hour(5) + 1)  # closes hours 0 to 4
    rule = {"period": "hourly", "max_events": 2}
    got = collect(s.trigger(rule), 1.0, expect=5)
    assert [e["identity"] for e in got] == [identity(k) for k in range(5)]


def test_a_cursor_that_cannot_be_written_is_retried_and_the_trigger_goes_on(tmp_path, capsys, monkeypatch):
    s = Stream(tmp_path)
    s.batch(0, hour(0) + 1)
    s.batch(1, hour(1) + 1)
    faults = tmp_path / "faults.json"  # the real write fails (airflow_streaming.faults: a disk full)
    faults.write_text(json.dumps([{"point": "storage.write", "match": "/completeness/", "action": "error",
                                   "errno": "ENOSPC"}]))
    monkeypatch.setenv("AIRFLOW_STREAMING_FAULTS", str(faults))
    capsys.readouterr()
    got: list[dict] = []

    async def main() -> None:
        async def drive() -> None:
            async for event in s.trigger().run():
                got.append(event.payload)
        task = asyncio.create_task(drive())
        await asyncio.sleep(0.5)
        assert len(got) == 1 and not os.path.exists(s.cursor)  # emitted once, not again at every poll
        faults.write_text("[]")
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [e["identity"] for e in got] == [identity(0)]
    assert "cursor not written" in capsys.readouterr().out
    assert cursor_identity(s.cursor) == identity(0)  # written at a later poll


def test_serialize_round_trip_and_a_stable_hash(tmp_path):
    s = Stream(tmp_path)
    t = SparkStreamCompletenessTrigger(spec=s.spec, rule={"period": "every:15m", "max_events": 5}, poll_interval=3)
    classpath, kwargs = t.serialize()
    again = SparkStreamCompletenessTrigger(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    assert classpath == f"{SparkStreamCompletenessTrigger.__module__}.SparkStreamCompletenessTrigger"
    reordered = SparkStreamCompletenessTrigger(spec=dict(reversed(list(s.spec.items()))),
                                          rule={"max_events": 5, "period": "every:15m"}, poll_interval=3.0)
    assert BaseEventTrigger.hash(*reordered.serialize()) == BaseEventTrigger.hash(classpath, kwargs)
    other = SparkStreamCompletenessTrigger(spec=s.spec, rule={"period": "hourly"}, poll_interval=3)
    assert BaseEventTrigger.hash(*other.serialize()) != BaseEventTrigger.hash(classpath, kwargs)


def test_a_bad_rule_fails_when_the_trigger_is_built(tmp_path):
    from airflow_streaming.exceptions import SpecError

    with pytest.raises(SpecError, match="completeness.period"):
        SparkStreamCompletenessTrigger(spec=Stream(tmp_path).spec, rule={"period": "fortnightly"})
