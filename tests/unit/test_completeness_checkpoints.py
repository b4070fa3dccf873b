"""A stream with several queries (several recorded checkpoints): a period is complete only when the committed
batches of every checkpoint prove it - the sink of each query holds it. Hand-built checkpoints in Spark's file
formats, the status document as the driver writes it."""

from __future__ import annotations

import json
import os

from airflow_streaming.completeness import HOUR_MS, parse_rule
from airflow_streaming.control import contract
from airflow_streaming.hooks.completeness import look
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec
from airflow_streaming.spec_hooks import forget_all

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
QA, QB = "6f1c2d3e-0000-4000-8000-0000000000aa", "6f1c2d3e-0000-4000-8000-0000000000bb"


def hour(k: int) -> int:
    return T0 + k * HOUR_MS


class Query:
    def __init__(self, root, query_id: str) -> None:
        self.root, self.id = root, query_id
        for sub in ("offsets", "commits"):
            os.makedirs(root / sub)
        (root / "metadata").write_text(json.dumps({"id": query_id}))

    def batch(self, batch_id: int, wm: int, commit: bool = True) -> None:
        meta = {"batchWatermarkMs": wm, "batchTimestampMs": 1_700_000_000_000, "conf": {}}
        (self.root / "offsets" / str(batch_id)).write_bytes(f'v1\n{json.dumps(meta)}\n{{"logOffset":3}}'.encode())
        if commit:
            self.commit(batch_id)

    def commit(self, batch_id: int) -> None:
        (self.root / "commits" / str(batch_id)).write_bytes(b'v1\n{"nextBatchWatermarkMs":0}')


def stream(tmp_path) -> tuple[SparkStreamHook, Query, Query]:
    forget_all()
    spec = {"name": "two", "application": "events_etl", "checkpoint_location": str(tmp_path / "ckpt"),
            "control_location": str(tmp_path / "control"), "master": "local[2]", "version": "v1"}
    hook = SparkStreamHook(StreamSpec.from_dict(spec))
    a, b = Query(tmp_path / "ckpt" / "a", QA), Query(tmp_path / "ckpt" / "b", QB)
    doc = contract.StatusDocument(
        stream="two", version="v1", run_id="r1", state=contract.RUNNING, pid=1, host="h", started_at=1.0,
        heartbeat_at=2.0, query_checkpoints={QA: f"file:{a.root}", QB: f"file:{b.root}"},
        queries=[contract.QueryStatus(QA, "r1", "a", True, recent_progress=[
            {"id": QA, "batchId": i, "numInputRows": 10, "stateOperators": []} for i in range(4)])])
    contract.write_status(hook.storage.unguarded, hook.paths, doc)
    return hook, a, b


def test_an_hour_is_complete_only_once_every_query_committed_past_it(tmp_path):
    hook, a, b = stream(tmp_path)
    rule = parse_rule({"period": "hourly"})
    for i, wm in enumerate([0, hour(0) + 1, hour(1) + 1, hour(2) + 1]):  # query a closed hours 0 and 1
        a.batch(i, wm)
    b.batch(0, 0)
    b.batch(1, hour(1) + 1)  # query b closed hour 0 only
    b.batch(2, hour(3) + 1, commit=False)  # planned past hour 2, not committed: proves nothing
    first = look(hook, rule, None, None)
    assert [e.key.start for e in first.events] == [hour(0)]
    assert (first.events[0].batch_id, first.events[0].input_rows) == (2, 20)  # query a's proof and counts

    # Only query b commits: the first checkpoint did not change, yet the look must not stop at "unchanged".
    b.commit(2)
    again = look(hook, rule, first.events[0].key, (first.checkpoint, first.newest_commit))
    assert not again.unchanged and [e.key.start for e in again.events] == [hour(1)]


def test_a_query_that_committed_nothing_yet_holds_every_period_back(tmp_path):
    hook, a, b = stream(tmp_path)
    for i, wm in enumerate([0, hour(0) + 1, hour(2) + 1]):
        a.batch(i, wm)
    assert look(hook, parse_rule({"period": "hourly"}), None, None).events == []
    b.batch(0, hour(5))
    assert [e.key.start for e in look(hook, parse_rule({"period": "hourly"}), None, None).events] == [hour(0), hour(1)]


def test_batch_count_periods_need_every_query_past_their_last_batch(tmp_path):
    hook, a, b = stream(tmp_path)
    for i in range(6):
        a.batch(i, 0)
    for i in range(3):
        b.batch(i, 0)
    events = look(hook, parse_rule({"period": "batches:2"}), None, None).events
    assert [(e.key.start, e.key.end) for e in events] == [(0, 2)]  # b's batch 2 proves [0, 2), not [2, 4)
