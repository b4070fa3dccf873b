"""The lifecycle record: legal step transitions, persistence, history, probation and catch-up rules."""

from __future__ import annotations

import json

import pytest

from airflow_streaming.lifecycle.record import (
    HISTORY_LIMIT,
    TERMINAL,
    TRANSITIONS,
    Action,
    LifecycleRecord,
    Probation,
    Step,
    TransitionError,
    append_history,
    caught_up,
    previous_spec,
    probation_outcome,
)

V1 = {"name": "s1", "version": "v1", "application": "events_etl"}
V2 = {"name": "s1", "version": "v2", "application": "events_etl"}
V3 = {"name": "s1", "version": "v3", "application": "events_etl"}


def record(step: Step = Step.PLANNED, from_spec=V1, to_spec=V2, **kw) -> LifecycleRecord:
    return LifecycleRecord(stream="s1", action=Action.UPGRADE, from_spec=from_spec, to_spec=to_spec, step=step, **kw)


# --------------------------------------------------------------------------- transitions

def test_advance_through_an_upgrade_records_every_step():
    r = record()
    path = [Step.CHECKED, Step.STOPPING, Step.STOPPED, Step.SNAPSHOTTED, Step.STARTING, Step.PROBATION, Step.SUCCEEDED]
    for i, step in enumerate(path):
        assert not r.done
        r.advance(step, detail=f"d{i}", now=1000.0 + i)
    assert r.done and r.step == Step.SUCCEEDED
    assert [s["step"] for s in r.steps] == ["PLANNED"] + [s.value for s in path]
    assert r.steps[-1] == {"step": "SUCCEEDED", "at": 1006.0, "detail": "d6"}
    assert r.step_started_at == r.updated_at == 1006.0


@pytest.mark.parametrize("current, bad", [
    (Step.PLANNED, Step.ROLLING_BACK),
    (Step.SNAPSHOTTED, Step.PROBATION),
    (Step.RETIRING, Step.ROLLING_BACK),
    (Step.RESTORED, Step.ROLLED_BACK),
    (Step.PROBATION, Step.PROBATION),
])
def test_illegal_step_raises_and_leaves_the_record_unchanged(current, bad):
    r = record(current)
    before = r.to_dict()
    with pytest.raises(TransitionError, match=f"{bad.value} may not follow {current.value}"):
        r.advance(bad)
    assert r.to_dict() == before


@pytest.mark.parametrize("terminal", sorted(TERMINAL, key=lambda s: s.value))
def test_terminal_steps_have_no_successor(terminal):
    assert not TRANSITIONS.get(terminal)
    r = record(terminal)
    for step in Step:
        with pytest.raises(TransitionError):
            r.advance(step)


def test_every_step_is_reachable_from_planned_and_every_non_terminal_one_can_finish():
    def reachable(start: Step) -> set[Step]:
        seen, todo = set(), [start]
        while todo:
            for nxt in TRANSITIONS.get(todo.pop(), frozenset()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    from_planned = reachable(Step.PLANNED) | {Step.PLANNED}
    assert from_planned == set(Step), f"unreachable steps: {set(Step) - from_planned}"
    for step in from_planned - TERMINAL:
        assert reachable(step) & TERMINAL, f"{step} can never reach a terminal step"


# --------------------------------------------------------------------------- persistence

def test_to_dict_from_dict_round_trips_through_json():
    r = record(probation=Probation(min_batches=3, window_s=42.5), owner="alice", allow_warnings=True)
    r.advance(Step.CHECKED, now=1.0)
    r.advance(Step.STOPPING, now=2.0)
    r.advance(Step.STOPPED, "stopped at batch 7", now=3.0)
    r.stop_batch, r.old_run_id = 7, "run-old"
    r.snapshot = {"snapshot_dir": "/ctl/s1/snapshots/x", "files": ["a", "b"]}
    back = LifecycleRecord.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r
    assert back.probation == Probation(3, 42.5) and back.step is Step.STOPPED and back.action is Action.UPGRADE
    # A record written by a newer version with extra keys still loads.
    assert LifecycleRecord.from_dict({**r.to_dict(), "added_later": 1}) == r


def test_from_dict_without_probation_uses_the_default():
    d = record().to_dict()
    del d["probation"]
    assert LifecycleRecord.from_dict(d).probation == Probation()


# --------------------------------------------------------------------------- history

@pytest.mark.parametrize("path, running", [
    ([Step.STARTING, Step.PROBATION, Step.SUCCEEDED], "v2"),
    ([Step.REFUSED], "v1"),
    ([Step.STARTING, Step.ROLLING_BACK, Step.ROLLED_BACK], "v1"),
    ([Step.FAILED], None),
    ([Step.STARTING, Step.ROLLING_BACK, Step.RESTORED, Step.RESTARTING_OLD, Step.ROLLBACK_FAILED], None),
])
def test_history_entry_fields_and_running_version_per_outcome(path, running):
    r = record(owner="alice", verdict="COMPATIBLE", created_at=100.0)
    r.stop_batch, r.first_new_batch, r.new_run_id = 7, 8, "run-new"
    r.snapshot = {"snapshot_dir": "/snap/1"}
    for i, step in enumerate(path):
        r.advance(step, now=200.0 + i)
    e = r.history_entry()
    assert e["running_version"] == running
    assert e["outcome"] == path[-1].value
    assert (e["id"], e["action"], e["stream"], e["owner"], e["verdict"]) == (r.id, "upgrade", "s1", "alice", "COMPATIBLE")
    assert (e["from_version"], e["to_version"], e["from_spec"]) == ("v1", "v2", V1)
    assert (e["started_at"], e["ended_at"]) == (100.0, 200.0 + len(path) - 1)
    assert (e["last_batch_before"], e["first_batch_after"], e["new_run_id"], e["snapshot"]) == (7, 8, "run-new", "/snap/1")
    json.dumps(e)  # the history file is JSON


def test_first_deploy_refused_runs_nothing():
    r = record(from_spec=None)
    r.advance(Step.REFUSED)
    assert r.history_entry()["from_version"] is None and r.running_version() is None


def test_append_history_replaces_the_same_id_and_moves_it_last():
    history = [{"id": "a", "n": 1}, {"id": "b", "n": 1}, {"id": "c", "n": 1}]
    out = append_history(history, {"id": "b", "n": 2})
    assert out == [{"id": "a", "n": 1}, {"id": "c", "n": 1}, {"id": "b", "n": 2}]
    assert len(history) == 3 and history[1] == {"id": "b", "n": 1}  # input untouched


def test_append_history_is_bounded_and_drops_the_oldest():
    history = [{"id": str(i)} for i in range(HISTORY_LIMIT)]
    out = append_history(history, {"id": "new"})
    assert len(out) == HISTORY_LIMIT
    assert out[0] == {"id": "1"} and out[-1] == {"id": "new"}


def entry(frm, to, outcome="SUCCEEDED", from_spec="auto"):
    spec = {"version": frm} if from_spec == "auto" and frm else from_spec
    return {"id": f"{frm}-{to}-{outcome}", "outcome": outcome, "from_version": frm, "to_version": to,
            "from_spec": spec}


def test_previous_spec_is_the_from_spec_of_the_last_successful_move_to_the_current_version():
    history = [entry(None, "v1", from_spec=None), entry("v1", "v2"), entry("v2", "v3", "ROLLED_BACK"),
               entry("v2", "v2"),  # a restart of v2 is not a move to v2
               entry("v2", "v3", "REFUSED")]
    assert previous_spec(history, "v2") == {"version": "v1"}
    # Moved v1 -> v2 -> v3 -> v2 (rollback): before v2 it ran v3.
    assert previous_spec(history + [entry("v2", "v3"), entry("v3", "v2")], "v2") == {"version": "v3"}


@pytest.mark.parametrize("history, current", [
    ([], "v1"),
    ([entry(None, "v1", from_spec=None)], "v1"),                # first deploy: nothing before
    ([entry("v1", "v2", "ROLLED_BACK"), entry("v1", "v2", "REFUSED")], "v2"),
    ([entry("v1", "v2")], "v3"),                                 # no move to the current version
    ([entry("v1", "v1")], "v1"),                                 # only restarts
])
def test_previous_spec_none(history, current):
    assert previous_spec(history, current) is None


# --------------------------------------------------------------------------- probation

P = Probation(min_batches=3, window_s=100.0)


def outcome(state="RUNNING", health="HEALTHY", batches=3, elapsed=10.0):
    return probation_outcome(state=state, health=health, batches=batches, started_at=1000.0,
                             now=1000.0 + elapsed, probation=P)


def test_probation_passes_on_healthy_with_enough_batches():
    ok, why = outcome(batches=3)
    assert ok is True and "3" in why
    assert outcome(batches=10)[0] is True


@pytest.mark.parametrize("health, batches", [("HEALTHY", 2), ("IDLE", 5), ("FALLING_BEHIND", 5), ("UNKNOWN", 5)])
def test_probation_keeps_waiting_inside_the_window(health, batches):
    ok, why = outcome(health=health, batches=batches, elapsed=99.0)
    assert ok is None and f"{batches}/3" in why and health in why


@pytest.mark.parametrize("state, health", [("FAILED", "HEALTHY"), ("STOPPED", "HEALTHY"), ("RUNNING", "FAILED")])
def test_probation_fails_when_the_new_driver_ended(state, health):
    ok, why = outcome(state=state, health=health, batches=10)
    assert ok is False and "ended" in why


def test_probation_fails_when_the_window_elapsed_with_the_counts():
    ok, why = outcome(health="FALLING_BEHIND", batches=1, elapsed=100.5)
    assert ok is False
    assert "100s elapsed" in why and "FALLING_BEHIND" in why and "1/3" in why


@pytest.mark.parametrize("kw, field", [
    ({"min_batches": 0}, "min_batches"), ({"min_batches": -1}, "min_batches"), ({"min_batches": 1.5}, "min_batches"),
    ({"min_batches": "2"}, "min_batches"), ({"window_s": 0}, "window"), ({"window_s": -5.0}, "window"),
])
def test_probation_validation(kw, field):
    with pytest.raises(ValueError, match=field):
        Probation(**kw)
    assert Probation(min_batches=1, window_s=0.5).min_batches == 1


# --------------------------------------------------------------------------- caught up

def status(batches=5, available=False, progress=None, name="etl"):
    if progress is None:
        progress = [{"sources": [{"description": "FileStreamSource[in]", "endOffset": {"logOffset": 4},
                                  "latestOffset": {"logOffset": 4}}]}]
    return {"totals": {"batches": batches},
            "queries": [{"name": name, "status": {"isDataAvailable": available}, "recent_progress": progress}]}


def src(end, latest, description="KafkaV2[Subscribe[events]]"):
    return {"description": description, "endOffset": end, "latestOffset": latest}


def test_caught_up_when_enough_batches_drained_and_at_the_latest_offsets():
    ok, why = caught_up(status(), min_batches=2)
    assert ok is True and "5 batch" in why


@pytest.mark.parametrize("doc, expected", [
    (None, "no status"),
    (status(batches=1), "1/2"),
    ({"queries": []}, "0/2"),
    (status(available=True, name="etl_q", progress=[{"sources": [{"description": "FileStreamSource[in]",
                                                                  "endOffset": {"logOffset": 4}}]}]),
     "etl_q still has data available"),
    (status(progress=[{"sources": [src({"events": {"0": 5}}, {"events": {"0": 9}})]}]), "KafkaV2[Subscribe[events]] at"),
    # Only the last progress counts: caught up earlier, behind now.
    (status(progress=[{"sources": [src(9, 9)]}, {"sources": [src(9, 12, "rate")]}]), "source rate at 9, latest 12"),
])
def test_not_caught_up(doc, expected):
    ok, why = caught_up(doc, min_batches=2)
    assert ok is False and expected in why


def fed(rows, arrived, processed, description="FileStreamSource[in]"):
    """A progress entry of a file-source batch (no latestOffset) with its input and processing rates."""
    return {"numInputRows": rows, "inputRowsPerSecond": arrived, "processedRowsPerSecond": processed,
            "sources": [{"description": description, "endOffset": {"logOffset": 9}, "latestOffset": None}]}


def test_a_continuously_fed_file_stream_that_keeps_up_has_caught_up():
    """Every trigger finds a new file (isDataAvailable stays true), yet each batch outpaces arrival."""
    ok, why = caught_up(status(available=True, progress=[fed(10, 20.0, 5.0), fed(4, 4.0, 9.5), fed(4, 4.1, 8.0)]),
                        min_batches=2)
    assert ok is True and "keeping up with arriving input" in why


@pytest.mark.parametrize("progress", [
    [fed(4, 4.0, 9.5), fed(100, 100.0, 60.0)],          # the last batch was slower than arrival: a backlog
    [fed(100, 100.0, 60.0), fed(100, 100.0, 55.0)],     # falling behind throughout
    [fed(4, 4.0, 9.5), fed(0, 0.0, 0.0)],               # only one batch with input among the last ones
    [fed(4, 4.0, None), fed(4, 4.0, 9.0)],              # a rate Spark did not report is no evidence
    [fed(4, 4.0, 9.5, description="rate"), {"sources": [src(9, 12, "rate")]}],  # behind a reported latest
])
def test_a_continuously_fed_stream_that_does_not_keep_up_has_not(progress):
    ok, why = caught_up(status(available=True, progress=progress), min_batches=2)
    assert ok is False and ("backlog not drained" in why or "latest 12" in why), why


@pytest.mark.parametrize("progress", [
    [{"sources": [src(3, 9)]}, {"sources": [src(9, 9)]}],        # behind earlier, caught up in the last one
    [{"sources": [{"description": "memory", "endOffset": 3}]}],   # a source without latestOffset is not judged
    [],                                                          # no progress kept: the status decides
])
def test_caught_up_cases(progress):
    assert caught_up(status(progress=progress), min_batches=2)[0] is True


def test_sources_at_their_latest_offsets_have_caught_up_although_data_keeps_arriving():
    """Kafka under steady traffic: every trigger finds new data, yet nothing known was left behind."""
    ok, why = caught_up(status(available=True, progress=[{"sources": [src(9, 9)]}]), min_batches=2)
    assert ok is True and "backlog drained" in why
