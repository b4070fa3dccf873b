"""The health rules judge a run by the trigger its job really started its queries with (issue 34).

A user script's ``.trigger(processingTime="1 minute")`` reaches the status document through the driver
runtime (``spark_jobs/runtime/writer_capture.py``; the real-Spark proof is in
``tests/integration/test_job_trigger.py``); these tests hold the pure rules: how a trigger is described,
read back, and used by :func:`airflow_streaming.health.verdict.evaluate`.
"""

from __future__ import annotations

import json

import pytest
from test_health_verdict import NOW, codes, make_doc, prog, run

from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlFileError, QueryStatus, StatusDocument
from airflow_streaming.health.job_trigger import (
    describe,
    ends_by_itself,
    job_trigger_interval,
    parse_interval,
    valid,
)
from airflow_streaming.health.verdict import HealthState


@pytest.mark.parametrize(("text", "seconds"), [
    ("30 seconds", 30.0), ("1 minute", 60.0), ("1 minute 30 seconds", 90.0), ("interval 5 s", 5.0),
    ("500 milliseconds", 0.5), ("2 hours", 7200.0), ("0 seconds", 0.0), ("10s", 10.0), ("1.5 minutes", 90.0),
])
def test_spark_interval_strings_are_read(text, seconds):
    assert parse_interval(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "5", "5 fortnights", "seconds 5", "5 seconds later", "interval"])
def test_what_is_not_an_interval_is_none_not_a_guess(text):
    assert parse_interval(text) is None


def test_each_kind_of_trigger_call_is_described_as_spark_would_run_it():
    assert describe() == {"kind": "processing_time", "interval_s": 0.0}  # no .trigger(): as fast as possible
    assert describe(processingTime="1 minute") == {"kind": "processing_time", "interval_s": 60.0}
    assert describe(availableNow=True) == {"kind": "available_now", "interval_s": None}
    assert describe(once=True) == {"kind": "once", "interval_s": None}
    assert describe(continuous="2 seconds") == {"kind": "continuous", "interval_s": 2.0}
    assert describe(processingTime="whenever") == {"kind": "processing_time", "interval_s": None}


def _doc_with(*triggers):
    return {"queries": [{"id": f"q{i}", "trigger": t, "active": True} for i, t in enumerate(triggers)]}


def test_a_run_is_judged_by_its_slowest_trigger_and_by_the_spec_when_none_is_reported():
    assert job_trigger_interval(_doc_with({"kind": "processing_time", "interval_s": 60.0},
                                          {"kind": "processing_time", "interval_s": 5.0}), 5.0) == (60.0, "job")
    assert job_trigger_interval(_doc_with(None), 7.0) == (7.0, "spec")  # a driver of an older release
    assert job_trigger_interval(_doc_with({"kind": "available_now", "interval_s": None}), 7.0) == (7.0, "spec")
    assert job_trigger_interval(None, 3.0) == (3.0, "spec")
    assert ends_by_itself(_doc_with({"kind": "available_now", "interval_s": None}, {"kind": "once", "interval_s": None}))
    assert not ends_by_itself(_doc_with({"kind": "available_now", "interval_s": None},
                                        {"kind": "processing_time", "interval_s": 1.0}))
    assert not ends_by_itself(_doc_with(None))


@pytest.mark.parametrize("garbage", [{"kind": "sometimes"}, {"kind": "processing_time", "interval_s": -1},
                                     {"kind": "once", "interval_s": "5"}, ["processing_time"], "1 minute",
                                     {"kind": "processing_time", "interval_s": True}])
def test_garbage_in_a_status_documents_trigger_is_a_named_error(garbage):
    assert not valid(garbage)
    doc = json.loads(StatusDocument(stream="s", version="v1", run_id="r", state=contract.RUNNING, pid=1, host="h",
                                    started_at=1.0, heartbeat_at=1.0,
                                    queries=[QueryStatus(id="q", run_id="r", name="q", active=True)]).to_json())
    doc["queries"][0]["trigger"] = garbage
    with pytest.raises(ControlFileError, match=r"queries\[0\]: trigger must be"):
        StatusDocument.from_dict("status.json", doc)


def test_a_trigger_round_trips_through_the_status_document():
    trigger = {"kind": "processing_time", "interval_s": 30.0}
    doc = StatusDocument(stream="s", version="v1", run_id="r", state=contract.RUNNING, pid=1, host="h",
                         started_at=1.0, heartbeat_at=1.0,
                         queries=[QueryStatus(id="q", run_id="r", name="q", active=True, trigger=trigger)])
    assert StatusDocument.from_json("status.json", doc.to_json()).queries[0].trigger == trigger


def _slow_trigger_doc(trigger):
    """A script with a 20-second trigger, steady input: a batch every 20 s, each taking 8 s."""
    progress = [prog(NOW - 9 - (5 - i) * 20, i, duration_ms=8000) for i in range(6)]
    doc = make_doc(progress)
    doc["queries"][0]["trigger"] = trigger
    return doc


def test_a_slow_trigger_is_healthy_when_judged_by_the_jobs_trigger_and_not_by_the_spec_default():
    # The spec's default (5 s) reads FALLING_BEHIND: batches of 8 s > 5 s. The job's 20 s does not.
    judged_by_spec = run(_slow_trigger_doc(None), trigger_interval=5.0)
    assert judged_by_spec.state is HealthState.FALLING_BEHIND, judged_by_spec
    assert "BATCH_LONGER_THAN_TRIGGER" in codes(judged_by_spec.reasons)
    judged_by_job = run(_slow_trigger_doc({"kind": "processing_time", "interval_s": 20.0}), trigger_interval=5.0)
    assert judged_by_job.state is HealthState.HEALTHY, judged_by_job
    assert judged_by_job.metrics["trigger_interval_s"] == 20.0 and judged_by_job.metrics["trigger_from"] == "job"


def test_a_job_that_finished_by_itself_is_a_finished_run_not_a_failure():
    doc = make_doc([prog(NOW - 10, 0)], state=contract.STOPPED,
                   exit={"code": 0, "reason": "script finished", "last_committed_batch": 0, "finished": True})
    doc["queries"][0]["trigger"] = {"kind": "available_now", "interval_s": None}
    verdict = run(doc, driver_alive=False)
    assert verdict.state is HealthState.STOPPED and codes(verdict.reasons) == ["FINISHED"], verdict
    assert "available_now" in verdict.reasons[0].message
    stopped = make_doc([prog(NOW - 10, 0)], state=contract.STOPPED,
                       exit={"code": 0, "reason": "graceful stop", "last_committed_batch": 0})
    assert codes(run(stopped, driver_alive=False).reasons) == ["STOPPED"]
