"""Completeness of periods from committed batches: exhaustive properties over small checkpoints, and named cases.

The enumeration covers every sequence of up to four batches over a handful of watermarks (some on a
period boundary exactly) and every commit pattern, and a seeded sample of longer Spark-like runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest

from airflow_streaming.completeness import (
    MAX_EVENTS,
    CommittedBatch,
    PeriodKey,
    closed_periods,
    iso_ms,
    parse_rule,
)
from airflow_streaming.exceptions import SpecError

M = 60_000
H = 60 * M
D = 24 * H
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
EVERY_2M = parse_rule({"period": "every:2m"})
BIG = parse_rule({"period": "every:2m", "max_events": 10_000})

# Watermarks (relative to T0): none yet, inside the first period, on a boundary exactly, one ms short of
# one, far ahead (several empty periods at once).
WATERMARKS = (0, T0 + 30_000, T0 + 2 * M - 1, T0 + 2 * M, T0 + 4 * M, T0 + 11 * M)


def batches(spec) -> list[CommittedBatch]:
    """``spec``: (watermark, committed) per batch id, in id order; rows = 10 + id, late = id % 2."""
    return [CommittedBatch(i, wm, c, 10 + i, i % 2) for i, (wm, c) in enumerate(spec)]


def small_checkpoints():
    for n in range(1, 5):
        for wms in itertools.product(WATERMARKS, repeat=n):
            for flags in itertools.product((True, False), repeat=n):
                yield batches(list(zip(wms, flags)))


def spark_like_runs(count=300, seed=37):
    """Watermarks that never go back, every batch committed but maybe the last (as Spark leaves them)."""
    rng = random.Random(seed)
    for _ in range(count):
        n = rng.randint(1, 30)
        wm, spec = 0, []
        for i in range(n):
            if i and rng.random() < 0.8:
                wm = max(wm, T0 + rng.randint(0, 40) * 15_000 + rng.choice((0, 0, 1, -1)))
            spec.append((wm, i < n - 1 or rng.random() < 0.7))
        # Some batches know their earliest event time (from progress), possibly hours before the watermark.
        yield [dataclasses.replace(b, first_event_ms=T0 + rng.randint(-150, 40) * 30_000) if rng.random() < 0.5 else b
               for b in batches(spec)]


def drain(rule, ckpt, after=None) -> list:
    """Call repeatedly, passing the last event back (a watcher that restarts after every event)."""
    out = []
    while events := closed_periods(rule, ckpt, after):
        out += events
        after = events[-1].key
    assert closed_periods(rule, ckpt, after) == []
    return out


def oracle_rows(ckpt, event) -> tuple[int, int] | None:
    """Rows and late rows of a period, the slow way, from a checkpoint listed completely from batch 0:
    a batch counts where its watermark lies, a batch before any watermark where the next positive
    watermark lies; None when one of those batches is not committed (its rows are not in the sink)."""
    rows = late = 0
    for i, b in enumerate(ckpt):
        if b.batch_id >= event.batch_id:
            break
        position = b.watermark_ms or next((c.watermark_ms for c in ckpt[i:] if c.watermark_ms), None)
        if position is not None and event.key.start <= position < event.key.end:
            if not b.committed:
                return None
            rows, late = rows + b.input_rows, late + b.late_rows
    return rows, late


def check_events(rule, ckpt, after, events) -> None:
    by_id = {b.batch_id: b for b in ckpt}
    committed = sorted((b for b in ckpt if b.committed), key=lambda b: b.batch_id)
    for e in events:
        proof = by_id[e.batch_id]
        # Never a period whose proof is not committed, nor proved by a watermark short of its end.
        assert proof.committed and proof.watermark_ms >= e.key.end and e.watermark_ms == proof.watermark_ms
        # The proof is the FIRST committed batch whose watermark reaches the end.
        assert not any(b.watermark_ms >= e.key.end for b in committed if b.batch_id < proof.batch_id)
        assert e.key.end - e.key.start == rule.length and (e.key.start - rule.origin_ms) % rule.length == 0
        if after is not None:
            assert e.key.start >= after.end
        if ckpt and ckpt[0].batch_id == 0 and all(b.input_rows is not None for b in ckpt):
            # Listed completely: known counts are right; with watermarks that never go back (as Spark
            # keeps them) they are known exactly when every counted batch is committed.
            want, got = oracle_rows(ckpt, e), (e.input_rows, e.late_rows)
            monotonic = all(a.watermark_ms <= b.watermark_ms for a, b in itertools.pairwise(ckpt))
            assert got == want if got != (None, None) else (want is None or not monotonic)
    # In order, no duplicates, no gaps (empty periods included).
    assert all(a.key.end == b.key.start for a, b in itertools.pairwise(events))
    if events and after is None:
        # A first call starts at the first positive watermark, or at the earliest event time of the batches
        # before it, at most max_events periods back.
        first = next(b for b in committed if b.watermark_ms > 0)
        events_before = [b.first_event_ms for b in committed if b.batch_id < first.batch_id and b.first_event_ms]
        start = min([first.watermark_ms, *events_before])
        back = rule.period_at(first.watermark_ms).start - rule.max_events * rule.length
        assert events[0].key.start <= max(start, back) < events[0].key.end
    if events:
        # Complete: the next period is not proved (or the cap stopped the call).
        nxt = events[-1].key.end + rule.length
        assert len(events) == rule.max_events or not any(b.watermark_ms >= nxt for b in committed)


def test_exhaustive_small_checkpoints():
    seen = 0
    for ckpt in small_checkpoints():
        events = closed_periods(BIG, ckpt, None)
        check_events(BIG, ckpt, None, events)
        # The same checkpoint always gives the same events, whatever the order it is listed in.
        assert closed_periods(BIG, list(reversed(ckpt)), None) == events
        # A restart (called again with the last event) emits nothing new.
        if events:
            assert closed_periods(BIG, ckpt, events[-1].key) == []
        # Capped calls continued from the last event give exactly the uncapped events.
        assert drain(dataclasses.replace(BIG, max_events=1), ckpt) == events
        # Every `after` on the grid: only later periods, each proved.
        for start in range(T0 - 2 * M, T0 + 12 * M, 2 * M):
            after = PeriodKey(start, start + 2 * M)
            later = closed_periods(BIG, ckpt, after)
            check_events(BIG, ckpt, after, later)
            if events and events[0].key.start <= after.end:
                assert later == [e for e in events if e.key.start >= after.end]
            elif events:  # `after` lies before the first period a first call reports: those come last
                assert later[len(later) - len(events):] == events
        seen += 1
    assert seen == sum(12 ** n for n in range(1, 5))


def test_growing_checkpoint_emits_each_period_once_with_the_final_extra():
    """A stream checked after every batch (the watcher passes its last event back each time) emits
    exactly what one look at the final checkpoint emits: same periods, same proof, same counts."""
    runs = list(spark_like_runs()) + [c for c in small_checkpoints() if len(c) == 4][::7]
    for ckpt in runs:
        after, emitted = None, []
        for n in range(1, len(ckpt) + 1):
            events = drain(EVERY_2M, ckpt[:n], after)
            check_events(BIG, ckpt[:n], after, events)
            emitted += events
            after = emitted[-1].key if emitted else None
        assert emitted == closed_periods(BIG, ckpt, None)


def test_counts_are_right_or_unknown_never_wrong():
    """Complete checkpoints give the counts exactly; with the oldest batches cut off (only the last K
    read) or a batch missing (a garbage file left out), a count is the same or None, never another
    number, and the periods emitted are a prefix of the complete ones (a missing batch only delays)."""
    for ckpt in spark_like_runs(200, seed=2):
        full = closed_periods(BIG, ckpt, None)
        for e in full:
            assert oracle_rows(ckpt, e) == (e.input_rows, e.late_rows)
            assert e.batches == sum(1 for b in ckpt if b.batch_id < e.batch_id and
                                    e.key.start <= (b.watermark_ms or next(
                                        (c.watermark_ms for c in ckpt[b.batch_id:] if c.watermark_ms), -1)) < e.key.end)
        if not full:
            continue
        after = PeriodKey(full[0].key.start - 2 * M, full[0].key.start)
        full_keys = {e.key: e for e in full}
        for cut in range(1, len(ckpt)):
            for part in (ckpt[cut:], ckpt[:cut - 1] + ckpt[cut:]):
                got = closed_periods(BIG, part, after)
                assert [e.key for e in got] == [e.key for e in full][:len(got)]
                for e in got:
                    want = full_keys[e.key]
                    assert e.input_rows in (None, want.input_rows) and e.late_rows in (None, want.late_rows)


@pytest.mark.parametrize("wm, closed", [(T0 + H - 1, 0), (T0 + H, 1), (T0 + H + 1, 1), (T0 + 2 * H, 2)])
def test_hourly_boundary_exactly_at_the_watermark(wm, closed):
    rule = parse_rule({"period": "hourly"})
    ckpt = batches([(0, True), (T0 + 5 * M, True), (wm, True)])
    events = closed_periods(rule, ckpt, None)
    assert [e.key for e in events] == [PeriodKey(T0 + k * H, T0 + (k + 1) * H) for k in range(closed)]
    if closed:
        assert events[0].extra() == {
            "period": "hourly", "identity": "2026-01-01T00:00:00.000Z/2026-01-01T01:00:00.000Z",
            "period_start": "2026-01-01T00:00:00.000Z", "period_end": "2026-01-01T01:00:00.000Z",
            "batch_id": 2, "watermark": iso_ms(wm), "watermark_ms": wm, "batches": 2,
            "input_rows": 10 + 11, "late_rows": 1,
        }


def test_a_first_watermark_closing_several_periods_reports_them_from_the_earliest_event():
    rule = parse_rule({"period": "hourly", "max_events": 5})
    ckpt = [CommittedBatch(0, 0, True, 100, 0, T0 + 10 * M), CommittedBatch(1, T0 + 2 * H + 5 * M, True, 3, 0, T0 + 2 * H),
            CommittedBatch(2, T0 + 3 * H, True, 4, 0, None)]
    events = closed_periods(rule, ckpt, None)
    assert [(e.key.start - T0) // H for e in events] == [0, 1, 2]
    assert [(e.batch_id, e.input_rows) for e in events] == [(1, 0), (1, 0), (2, 103)]
    # Without the event time: from the first watermark's period.
    plain = [dataclasses.replace(b, first_event_ms=None) for b in ckpt]
    assert [(e.key.start - T0) // H for e in closed_periods(rule, plain, None)] == [2]
    # An odd old event time looks back at most max_events periods, not to 1999.
    odd = [dataclasses.replace(ckpt[0], first_event_ms=T0 - 365 * D), *ckpt[1:]]
    assert [(e.key.start - T0) // H for e in closed_periods(rule, odd, None)] == [-3, -2, -1, 0, 1]
    # Event times of the batch that ran with the first watermark (late rows, dropped) do not count.
    late = [dataclasses.replace(ckpt[0], first_event_ms=None), dataclasses.replace(ckpt[1], first_event_ms=T0)]
    assert [(e.key.start - T0) // H for e in closed_periods(rule, late, None)] == []


def test_uncommitted_batch_proves_nothing():
    rule = parse_rule({"period": "hourly"})
    ckpt = batches([(0, True), (T0 + 5 * M, True), (T0 + 3 * H, False)])
    assert closed_periods(rule, ckpt, None) == []
    ckpt[2] = CommittedBatch(2, T0 + 3 * H, True, 12, 0)
    assert [e.key.start for e in closed_periods(rule, ckpt, None)] == [T0, T0 + H, T0 + 2 * H]


def test_daily_with_an_origin():
    rule = parse_rule({"period": "daily", "origin": "2026-01-01T06:00:00Z", "timezone": "UTC"})
    ckpt = batches([(0, True), (T0 + 7 * H, True), (T0 + D + 6 * H, True), (T0 + 2 * D + 5 * H, True)])
    events = closed_periods(rule, ckpt, None)
    assert [e.identity for e in events] == ["2026-01-01T06:00:00.000Z/2026-01-02T06:00:00.000Z"]
    assert events[0].batch_id == 2 and events[0].input_rows == 10 + 11
    assert rule.to_dict() == {"period": "daily", "origin": "2026-01-01T06:00:00.000Z"}
    assert parse_rule(rule.to_dict()) == rule


def test_batch_count_periods():
    rule = parse_rule({"period": "batches:3"})
    ckpt = batches([(0, True)] * 7 + [(0, False)])
    events = closed_periods(rule, ckpt, None)
    assert [(e.key.start, e.key.end, e.batch_id) for e in events] == [(0, 3, 2), (3, 6, 5)]
    assert events[1].extra() == {"period": "batches:3", "identity": "batches:3-5", "first_batch_id": 3,
                                 "last_batch_id": 5, "batch_id": 5, "watermark": "1970-01-01T00:00:00.000Z",
                                 "watermark_ms": 0, "batches": 3, "input_rows": 13 + 14 + 15, "late_rows": 2}
    assert closed_periods(rule, ckpt, events[-1].key) == []
    # Batch 8 uncommitted: batches 6..8 are not a complete period; committed, they are.
    ckpt += [CommittedBatch(8, 0, True, None, None)]
    ckpt[7] = CommittedBatch(7, 0, True, 17, 1)
    (last,) = closed_periods(rule, ckpt, events[-1].key)
    assert (last.key, last.input_rows, last.late_rows) == (PeriodKey(6, 9), None, None)  # batch 8's counts unknown
    # Only the newest batches read: the period's counts are unknown, the period is still complete.
    (cut,) = closed_periods(rule, ckpt[7:], PeriodKey(3, 6))
    assert (cut.key, cut.batches, cut.input_rows) == (PeriodKey(6, 9), 2, None)


def test_late_rows_are_counted():
    rule = parse_rule({"period": "every:10m"})
    ckpt = [CommittedBatch(0, 0, True, 100, 0), CommittedBatch(1, T0 + 2 * M, True, 50, 7),
            CommittedBatch(2, T0 + 9 * M, True, 40, 3), CommittedBatch(3, T0 + 10 * M, True, 0, 0)]
    (event,) = closed_periods(rule, ckpt, None)
    assert (event.input_rows, event.late_rows, event.batches, event.batch_id) == (190, 10, 3, 3)
    # Unknown for one batch: unknown for the period.
    ckpt[1] = CommittedBatch(1, T0 + 2 * M, True, 50, None)
    assert closed_periods(rule, ckpt, None)[0].late_rows is None


def test_empty_periods_between_are_emitted():
    rule = parse_rule({"period": "hourly"})
    ckpt = batches([(0, True), (T0 + 10 * M, True), (T0 + 10 * M, True), (T0 + 3 * H + 1, True)])
    events = closed_periods(rule, ckpt, None)
    assert [(e.key.start - T0) // H for e in events] == [0, 1, 2]
    assert [(e.batches, e.input_rows, e.late_rows, e.batch_id) for e in events] == [
        (3, 10 + 11 + 12, 0 + 1 + 0, 3), (0, 0, 0, 3), (0, 0, 0, 3)]


def test_cap_per_call():
    rule = parse_rule({"period": "hourly"})
    ckpt = batches([(0, True), (T0, True), (T0 + 100 * H, True)])
    first = closed_periods(rule, ckpt, None)
    assert len(first) == MAX_EVENTS == 48 and first[-1].key.end == T0 + 48 * H
    rest = drain(rule, ckpt, first[-1].key)
    assert [e.key.start for e in first + rest] == [T0 + k * H for k in range(100)]
    assert len(closed_periods(parse_rule({"period": "hourly", "max_events": 5}), ckpt, None)) == 5


def test_after_off_the_grid_starts_at_the_next_aligned_period():
    rule = parse_rule({"period": "every:15m"})
    ckpt = batches([(0, True), (T0, True), (T0 + H, True)])
    events = closed_periods(rule, ckpt, PeriodKey(T0, T0 + 20 * M))  # e.g. the rule was every:20m before
    assert [e.key.start for e in events] == [T0 + 30 * M, T0 + 45 * M]


def test_no_watermark_yet_no_event():
    assert closed_periods(parse_rule({"period": "hourly"}), batches([(0, True)] * 5), None) == []
    assert closed_periods(parse_rule({"period": "hourly"}), [], None) == []
    assert closed_periods(parse_rule({"period": "batches:2"}), [], None) == []


@pytest.mark.parametrize("raw, field, words", [
    ("hourly", "completeness", "mapping"),
    ({}, "completeness.period", "required"),
    ({"period": "weekly"}, "completeness.period", "unknown period"),
    ({"period": "every:0m"}, "completeness.period", "unknown period"),
    ({"period": "every:5s"}, "completeness.period", "unknown period"),
    ({"period": "batches:-1"}, "completeness.period", "unknown period"),
    ({"period": "hourly", "timezone": "Europe/Paris"}, "completeness.timezone", "UTC"),
    ({"period": "hourly", "origin": "2026-01-01T00:30:00+01:00"}, "completeness.origin", "UTC"),
    ({"period": "hourly", "origin": "2026-01-01T00:30:00"}, "completeness.origin", "UTC"),
    ({"period": "hourly", "origin": "yesterday"}, "completeness.origin", "ISO 8601"),
    ({"period": "hourly", "origin": 5}, "completeness.origin", "ISO 8601"),
    ({"period": "batches:5", "origin": "2026-01-01T00:00:00Z"}, "completeness.origin", "time periods"),
    ({"period": "hourly", "max_events": 0}, "completeness.max_events", "1 to"),
    ({"period": "hourly", "max_events": True}, "completeness.max_events", "1 to"),
    ({"period": "hourly", "every": 3}, "completeness.every", "unknown field"),
])
def test_rule_errors_name_the_field(raw, field, words):
    with pytest.raises(SpecError) as info:
        parse_rule(raw)
    assert info.value.field == field and words in info.value.message


def test_rule_lengths():
    assert parse_rule({"period": "hourly"}).length == H
    assert parse_rule({"period": "daily"}).length == D
    assert parse_rule({"period": "every:90m"}).length == 90 * M
    rule = parse_rule({"period": "batches:10"}, field="assets[0].completeness")
    assert (rule.by_batches, rule.length) == (True, 10)
    with pytest.raises(SpecError, match=r"^assets\[0\]\.completeness\.period: "):
        parse_rule({"period": "often"}, field="assets[0].completeness")
