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
