"""Row counts of periods longer than the checkpoint window: the driver's running sums (``counters``) and the
counts kept with the cursor (``counted_through``).

The random runs drive the real pieces: the driver's :func:`contract.count_report` over the reports as the
listener delivers them (some lost: a driver killed between a commit and its report; some delivered twice), a
new driver run continuing them through :func:`contract.carry_counters` (a JSON round trip, as the status file),
:func:`closed_periods` on a window of the newest few batches only (so that a period spans more batches than the
window), and the cursor through :func:`write_cursor`/:func:`read_cursor` on disk across trigger restarts. The
truth of each period is computed here from the generated batches: a count given is always it."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from airflow_streaming.completeness import (
    CommittedBatch,
    CountedThrough,
    Counters,
    PeriodKey,
    closed_periods,
    parse_rule,
)
from airflow_streaming.control import contract
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.hooks.completeness import read_cursor, write_cursor

M = 60_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
QUERY = "q-1"


def report(batch: int, rows: int, late: int, run: str, query: str = QUERY) -> dict:
    return {"id": query, "runId": run, "batchId": batch, "numInputRows": rows,
            "stateOperators": [{"numRowsDroppedByWatermark": late}]}


@dataclasses.dataclass
class Stream:
    """A generated run: per batch its watermark, rows and late rows; which reports were lost or repeated."""

    wm: list[int]
    rows: list[int]
    late: list[int]
    lost: set[int]
    twice: set[int]
    new_run_at: set[int]

    @classmethod
    def random(cls, rng: random.Random, n: int, step: int) -> Stream:
        wm, marks = 0, []
        for i in range(n):
            if i >= 2 and rng.random() < 0.85:  # the first batches run before there is a watermark
                wm = max(wm, T0) + rng.choice((0, step // 3, step, step, 2 * step, 40 * step if rng.random() < 0.03 else 0))
            marks.append(wm)
        lost = {i for i in range(n) if rng.random() < 0.03}
        twice = {i for i in range(n) if rng.random() < 0.05}
        runs = {i for i in range(1, n) if rng.random() < 0.05}
        return cls(marks, [rng.randint(0, 9) for _ in range(n)], [rng.randint(0, 2) for _ in range(n)], lost, twice,
                   runs)

    def truth(self, rule, key: PeriodKey) -> tuple[int, int, int] | None:
        """Batches, rows and late rows of period ``key`` (``None``: not complete in the first ``len`` batches)."""
        n = len(self.wm)
        if rule.by_batches:
            if key.end - 1 >= n:
                return None
            ids = list(range(key.start, key.end))
        else:
            proof = next((i for i in range(n) if self.wm[i] >= key.end), None)
            if proof is None:
                return None
            position = {}
            later = None
            for i in reversed(range(n)):
                later = self.wm[i] if self.wm[i] > 0 else later
                if later is not None:
                    position[i] = self.wm[i] or later
            ids = [i for i in range(proof) if key.start <= position.get(i, key.end) < key.end]
        return len(ids), sum(self.rows[i] for i in ids), sum(self.late[i] for i in ids)


def run_watch(stream: Stream, rule, window: int, rng: random.Random, tmp_path) -> tuple[list, int, set]:
    """The stream grows batch by batch; the driver reports (maybe late by one batch), the watch looks after each
    batch at the newest ``window`` batches, sometimes restarted from its cursor on disk. Returns the events, how
    many of them had their counts from the running sums alone (the window could not know them), and the keys of
    those that followed an old cursor (one without counts)."""
    storage, path = LocalStorage(), str(tmp_path / "cursor.json")
    counters: dict = {}
    run = "run-0"
    delivered: dict[int, dict] = {}
    events, after, from_sums, after_old = [], None, 0, set()
    old = False
    waited: set = set()
    for n in range(1, len(stream.wm) + 1):
        b = n - 1
        if b in stream.new_run_at:  # a new driver: carries the previous status document's counters over
            run = f"run-{b}"
            counters = contract.carry_counters(json.loads(json.dumps(counters)))
        for batch in ([b - 1] if b else []) + [b]:  # each report is delivered a batch late, or at once
            if batch in stream.lost or batch in delivered or (batch == b and rng.random() < 0.3):
                continue
            rep = report(batch, stream.rows[batch], stream.late[batch], run)
            delivered[batch] = rep
            counters = contract.count_report(counters, rep)
            if batch in stream.twice:
                counters = contract.count_report(counters, rep)
        seen = [CommittedBatch(i, stream.wm[i], True, *((delivered[i]["numInputRows"], stream.late[i])
                                                         if i in delivered else (None, None)))
                for i in range(max(0, n - window), n)]
        entry = contract.valid_counters(counters.get(QUERY))
        sums = None if entry is None else Counters(f"{QUERY}/{entry['epoch']}", entry["from_batch"],
                                                   entry["through_batch"], entry["input_rows"], entry["late_rows"])
        if rng.random() < 0.1:  # the trigger is recreated: its position is the cursor's
            after = read_cursor(storage, path, rule) if events else None
            if after is not None and rng.random() < 0.1:  # a cursor written by the release before: no counts
                after, old = PeriodKey(after.start, after.end), True
        found = closed_periods(rule, seen, after, sums)
        without_sums = closed_periods(rule, seen, after)
        for k, event in enumerate(found):  # as the trigger: an unknown count at the newest commit waits one look
            if event.input_rows is None and event.batch_id == b and event.key not in waited:
                waited.add(event.key)
                found = found[:k]
                break
        for event, alone in zip(found, without_sums):
            write_cursor(storage, path, rule, event)
            if event.input_rows is not None and alone.input_rows is None:
                from_sums += 1
        if found and old:
            after_old.add(found[0].key)
            old = False
        events += found
        after = found[-1].key if found else after
    return events, from_sums, after_old


@pytest.mark.parametrize("period,step", [({"period": "every:1m"}, 7_000), ({"period": "every:1m"}, 20_000),
                                         ({"period": "batches:7"}, 10_000)])
def test_a_count_given_is_always_the_true_one_and_long_periods_are_counted(tmp_path, period, step):
    rule = parse_rule(period)
    rng = random.Random(37)
    known = total = from_sums = clean = clean_known = 0
    for case in range(150):
        stream = Stream.random(rng, rng.randint(5, 80), step)
        events, counted, after_old = run_watch(stream, rule, window=4, rng=rng, tmp_path=tmp_path / str(case))
        from_sums += counted
        if not stream.lost:  # no report lost: every period after the first is counted (but after an old cursor)
            due = [e for e in events[1:] if e.key not in after_old]
            clean += len(due)
            clean_known += sum(e.input_rows is not None for e in due)
        keys = [e.key for e in events]
        assert keys == sorted(set(keys)), "a period emitted twice or out of order"
        for event in events:
            true = stream.truth(rule, event.key)
            assert true is not None, f"case {case}: {event.key} emitted before it is complete"
            total += 1
            if event.input_rows is not None:
                known += 1
                assert (event.batches, event.input_rows) == true[:2], (case, event, true)
            if event.late_rows is not None:
                assert event.late_rows == true[2], (case, event, true)
    # The window (4 batches) alone knows few of these periods; the running sums most of the others.
    assert from_sums > total // 5 and clean_known == clean > 0, (known, from_sums, total, clean_known, clean)


def batch(i: int, wm: int, rows: int | None = 1, late: int | None = 0) -> CommittedBatch:
    return CommittedBatch(i, wm, True, rows, late)


def test_an_hour_of_many_batches_is_counted_from_the_cursor_and_the_sums():
    """360 batches an hour, a window of 32: the window never sees an hour's first batch."""
    rule = parse_rule({"period": "hourly"})
    hour = 3_600_000
    wm = [0, 0] + [T0 + (i - 2) * 10_000 for i in range(2, 1200)]
    rows = [i % 7 for i in range(len(wm))]
    cum = [sum(rows[: i + 1]) for i in range(len(wm))]
    after = None
    got = []
    for n in range(40, len(wm) + 1, 13):
        sums = Counters("q/r", 0, n - 1, cum[n - 1], 0)
        window = [batch(i, wm[i], rows[i]) for i in range(n - 32, n)]
        for event in closed_periods(rule, window, after, sums):
            got.append((event.key.start, event.batches, event.input_rows))
            after = event.key
    proofs = [next(i for i in range(len(wm)) if wm[i] >= T0 + k * hour) for k in (1, 2, 3)]
    assert [g[0] for g in got] == [T0, T0 + hour, T0 + 2 * hour]
    # The first hour: no cursor before it; its batches 0..proof-1 are never all in the window: unknown.
    assert got[0][2] is None
    assert got[1][1:] == (proofs[1] - proofs[0], cum[proofs[1] - 1] - cum[proofs[0] - 1])
    assert got[2][1:] == (proofs[2] - proofs[1], cum[proofs[2] - 1] - cum[proofs[1] - 1])
    assert got[1][1] == 360


def test_counts_of_another_epoch_or_a_garbage_through_are_unknown_not_wrong():
    rule = parse_rule({"period": "batches:10"})
    window = [batch(i, 0, rows=2) for i in range(15, 25)]
    since = CountedThrough("q/r1", 0, 9, 20, 0)
    sums = Counters("q/r1", 0, 24, 50, 0)
    # Period 10..19: batches 10..14 are out of the window; cum(9) comes from the cursor, cum(19) from the sums.
    [event] = closed_periods(rule, window, PeriodKey(0, 10, since), sums)
    assert (event.batches, event.input_rows, event.late_rows) == (10, 50 - 10 - 20, 0)
    assert event.key.counted_through == CountedThrough("q/r1", 0, 19, 40, 0)
    # A new epoch (a lost report, a rollback, a new checkpoint): the cursor's counts are of another one.
    for other in (Counters("q/r2", 0, 24, 50, 0), Counters("q/r1", 12, 24, 26, 0), Counters("p/r1", 0, 24, 50, 0)):
        [event] = closed_periods(rule, window, PeriodKey(0, 10, since), other)
        assert event.input_rows is None and event.late_rows is None
    # A report missing between the period's last batch and the sums' last: cum(19) unknown.
    holey = [b for b in window if b.batch_id != 22]
    [event] = closed_periods(rule, holey, PeriodKey(0, 10, since), sums)
    assert event.input_rows is None and event.key.counted_through is None


def test_a_proof_at_the_window_edge_is_not_taken_for_the_first_one():
    """The trigger was down for hours: the window's oldest batch proves several hours, but it is not their
    first proof. Counting from it would give one hour the rows of several: unknown instead."""
    rule = parse_rule({"period": "hourly"})
    hour = 3_600_000
    window = [batch(i, T0 + 3 * hour + i, rows=1) for i in range(500, 532)]
    since = CountedThrough("q/r", 0, 99, 100, 0)
    events = closed_periods(rule, window, PeriodKey(T0, T0 + hour, since), Counters("q/r", 0, 531, 532, 0))
    assert [e.input_rows for e in events] == [None, None]


# ---------------------------------------------------------------------- the driver's counters

def test_counters_add_each_reported_batch_once_and_begin_an_epoch_at_a_gap_or_a_rollback():
    c: dict = {}
    for b in range(3):
        c = contract.count_report(c, report(b, rows=10 + b, late=1, run="r1"))
    assert c[QUERY] == {"from_batch": 0, "through_batch": 2, "input_rows": 33, "late_rows": 3, "epoch": "r1",
                        "run_id": "r1"}
    assert contract.count_report(c, report(2, rows=99, late=9, run="r1")) == c  # a repeated delivery
    c = contract.count_report(c, report(3, rows=4, late=0, run="r2"))  # the next driver run goes on
    assert c[QUERY]["through_batch"] == 3 and c[QUERY]["input_rows"] == 37 and c[QUERY]["epoch"] == "r1"
    gap = contract.count_report(c, report(5, rows=6, late=0, run="r2"))  # batch 4's report never came
    assert gap[QUERY] == {"from_batch": 5, "through_batch": 5, "input_rows": 6, "late_rows": 0, "epoch": "r2",
                          "run_id": "r2"}
    back = contract.count_report(c, report(1, rows=6, late=0, run="r3"))  # another run, ids went back
    assert back[QUERY]["from_batch"] == 1 and back[QUERY]["epoch"] == "r3"
    other = contract.count_report(c, report(0, rows=1, late=0, run="r4", query="q-2"))  # a new checkpoint
    assert set(other) == {QUERY, "q-2"} and other["q-2"]["from_batch"] == 0
    assert QUERY not in contract.count_report(c, {**report(4, 1, 0, "r2"), "numInputRows": None})


@pytest.mark.parametrize("garbage", [None, "x", [1], {"q": "x"}, {"q": {"from_batch": 3, "through_batch": 1,
                                                                         "input_rows": 1, "late_rows": 0,
                                                                         "epoch": "r", "run_id": "r"}}])
def test_garbage_counters_are_left_out_never_raised(garbage):
    assert contract.carry_counters(garbage) == {}
    c = contract.count_report(garbage, report(0, rows=1, late=0, run="r"))  # type: ignore[arg-type]
    assert list(c) == [QUERY]
