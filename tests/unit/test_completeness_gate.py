"""The completeness look's gate: after new commits it reads the checkpoint fully only when they may close a period."""

from __future__ import annotations

import pytest
from test_completeness_trigger import Stream, hour

from airflow_streaming.completeness import parse_rule
from airflow_streaming.hooks import completeness
from airflow_streaming.hooks.completeness import look


@pytest.fixture
def full_reads(monkeypatch):
    """The checkpoints read fully (``read_committed`` calls), in order."""
    calls: list[str] = []
    real = completeness.read_committed

    def counting(storage, checkpoint, **kw):
        calls.append(checkpoint)
        return real(storage, checkpoint, **kw)

    monkeypatch.setattr(completeness, "read_committed", counting)
    return calls


def step(s: Stream, rule, after, seen):
    found = look(s.hook, rule, after, seen)
    return found, (found.checkpoint, found.newest_commit)


def test_new_commits_inside_the_period_are_not_read_fully_and_a_crossing_one_is(tmp_path, full_reads):
    s, rule = Stream(tmp_path), parse_rule({"period": "hourly"})
    s.batch(0, hour(0) + 1)
    found, seen = step(s, rule, None, None)
    assert found.events == [] and len(full_reads) == 1
    for batch in (1, 2):  # the watermark moves, within hour 0
        s.batch(batch, hour(0) + 10 * batch)
        found, seen = step(s, rule, None, seen)
        assert found.unchanged and found.newest_commit == batch and found.events == []
    assert len(full_reads) == 1
    s.batch(3, hour(1) + 1)  # closes hour 0
    found, seen = step(s, rule, None, seen)
    assert not found.unchanged and [e.identity for e in found.events] == [
        "2026-01-01T00:00:00.000Z/2026-01-01T01:00:00.000Z"] and len(full_reads) == 2
    after = found.events[-1].key
    s.batch(4, hour(1) + 5)
    found, seen = step(s, rule, after, seen)
    assert found.unchanged and len(full_reads) == 2


def test_the_highest_new_watermark_counts_not_the_newest(tmp_path, full_reads):
    s, rule = Stream(tmp_path), parse_rule({"period": "hourly"})
    s.batch(0, hour(0) + 1)
    _, seen = step(s, rule, None, None)
    s.batch(1, hour(1) + 1)  # crosses...
    s.batch(2, hour(0) + 2)  # ...and the newest commit does not (two commits between looks)
    found, _ = step(s, rule, None, seen)
    assert [e.batch_id for e in found.events] == [1] and len(full_reads) == 2


def test_an_unreadable_new_offsets_file_means_a_full_read_that_reports_it(tmp_path, full_reads):
    s, rule = Stream(tmp_path), parse_rule({"period": "hourly"})
    s.batch(0, hour(0) + 1)
    _, seen = step(s, rule, None, None)
    s.batch(1, hour(0) + 2)
    (s.ckpt / "offsets" / "1").write_bytes(b"v1\n")
    found, _ = step(s, rule, None, seen)
    assert not found.unchanged and len(full_reads) == 2
    assert any("offsets/1" in why for why in found.skipped)


def test_batch_periods_cross_on_the_last_batch_of_a_period(tmp_path, full_reads):
    s, rule = Stream(tmp_path), parse_rule({"period": "batches:3"})
    s.batch(0, 0)
    found, seen = step(s, rule, None, None)
    s.batch(1, 0)
    found, seen = step(s, rule, None, seen)
    assert found.unchanged and len(full_reads) == 1
    s.batch(2, 0)  # the last batch of [0, 3)
    found, seen = step(s, rule, None, seen)
    assert [e.identity for e in found.events] == ["batches:0-2"] and len(full_reads) == 2


@pytest.fixture
def offsets_reads(monkeypatch):
    """The ``offsets`` files read (paths), in order."""
    from airflow_streaming.control.local import LocalStorage

    calls: list[str] = []
    real = LocalStorage.read_bytes

    def counting(self, path):
        if "/offsets/" in path:
            calls.append(path)
        return real(self, path)

    monkeypatch.setattr(LocalStorage, "read_bytes", counting)
    return calls


def test_a_new_commits_watermark_is_read_from_its_report_in_the_status(tmp_path, full_reads, offsets_reads):
    """Spark writes a batch's progress report after its commit, with the watermark the batch ran with: the gate
    takes it from the status the health poll decoded, and reads no ``offsets`` file for it."""
    s, rule = Stream(tmp_path), parse_rule({"period": "hourly"})
    s.batch(0, hour(0) + 1, reported=hour(0) + 1)
    found, seen = step(s, rule, None, None)
    assert len(full_reads) == 1
    read_by_first_look = len(offsets_reads)
    for batch in (1, 2):
        s.batch(batch, hour(0) + 10 * batch, reported=hour(0) + 10 * batch)
        found, seen = step(s, rule, None, seen)
        assert found.unchanged and found.newest_commit == batch
    assert len(offsets_reads) == read_by_first_look and len(full_reads) == 1
    s.batch(3, hour(1) + 1, reported=hour(1) + 1)  # closes hour 0
    found, seen = step(s, rule, None, seen)
    assert [e.batch_id for e in found.events] == [3] and len(full_reads) == 2
    # A commit whose report is not in the status yet (or has no watermark): its offsets file decides.
    s.batch(4, hour(2) + 1)
    found, _ = step(s, rule, found.events[-1].key, seen)
    assert offsets_reads[-1].endswith("/offsets/4") and [e.batch_id for e in found.events] == [4]


def test_a_report_ahead_of_its_batch_costs_a_read_never_an_event(tmp_path, full_reads):
    """A report's watermark only decides whether to read: a status that claims more than the checkpoint holds
    (no Spark writes one: a driver's garbage) makes a full read, which finds nothing to emit."""
    s, rule = Stream(tmp_path), parse_rule({"period": "hourly"})
    s.batch(0, hour(0) + 1, reported=hour(0) + 1)
    _, seen = step(s, rule, None, None)
    s.batch(1, hour(0) + 5, reported=hour(3))
    found, seen = step(s, rule, None, seen)
    assert not found.unchanged and found.events == [] and len(full_reads) == 2


def test_only_the_reports_of_the_checkpoints_query_count(tmp_path, full_reads, offsets_reads):
    """A status with several queries (a job with two): the reports of the query whose recorded checkpoint is the
    one watched give watermarks; another query's report of the same batch id does not."""
    from test_completeness_trigger import QUERY

    from airflow_streaming.control import contract

    s, rule = Stream(tmp_path), parse_rule({"period": "hourly"})

    def write_status(other_wm):
        mine = contract.QueryStatus(QUERY, "r1", "s1", True, recent_progress=s.progress)
        other = contract.QueryStatus("another-query", "r1", "s2", True, recent_progress=[
            {"id": "another-query", "batchId": b["batchId"], "numInputRows": 1,
             "eventTime": {"watermark": "2026-01-01T05:00:00.000Z"}} for b in s.progress][-other_wm:])
        doc = contract.StatusDocument(
            stream="s1", version="v7", run_id="r1", state=contract.RUNNING, pid=1, host="h", started_at=1.0,
            heartbeat_at=2.0, queries=[mine, other], query_checkpoints={QUERY: f"file:{s.ckpt}"})
        contract.write_status(s.hook.storage.unguarded, s.hook.paths, doc)

    s.batch(0, hour(0) + 1, reported=hour(0) + 1)
    write_status(1)
    _, seen = step(s, rule, None, None)
    reads = len(offsets_reads)
    s.batch(1, hour(0) + 2, reported=hour(0) + 2)
    write_status(2)
    found, _ = step(s, rule, None, seen)
    assert found.unchanged and len(full_reads) == 1 and len(offsets_reads) == reads
