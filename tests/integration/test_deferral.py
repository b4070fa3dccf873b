"""Deferrable lifecycle actions on real Spark: every wait runs in the trigger, not in the caller.

A deploy, a stop and an upgrade run in deferrable mode (``LifecycleOptions(defer=True)``), driven the
way Airflow drives a deferrable operator: the call runs until it defers (``WaitNeeded``), the trigger
(:class:`SparkStreamLifecycleTrigger`) runs in its own event loop until it fires, then the call runs again
with the locks the trigger kept alive. While deferred, the stream's lock names no process (a
supervisor pass cannot take it) and is renewed by the trigger. Output compared with input.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_streaming.control.lifecycle_lock import LifecycleLock, LifecycleLockHeld
from airflow_streaming.lifecycle.operations import deploy_stream, stop_stream
from airflow_streaming.lifecycle.record import Action, Probation, Step
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner
from airflow_streaming.lifecycle.waits import WaitNeeded
from airflow_streaming.triggers.lifecycle import SparkStreamLifecycleTrigger
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from streams import wait_for

pytestmark = pytest.mark.spark


async def _first_event(trigger: SparkStreamLifecycleTrigger) -> Any:
    async for event in trigger.run():
        return event
    raise AssertionError("the trigger ended without an event")


def drive(call, control_dir: str, on_wait=None) -> tuple[Any, list[dict[str, Any]]]:
    """Run ``call(resume)`` as Airflow runs a deferrable task; return its result and the deferrals.

    ``on_wait(kind)`` runs while the call is deferred (e.g. to feed the new version in probation).
    """
    resume = None
    deferrals: list[dict[str, Any]] = []
    while True:
        started = time.monotonic()
        try:
            return call(resume), deferrals
        except WaitNeeded as wait:
            worker_s = time.monotonic() - started
            lock = json.loads(Path(control_dir, "lifecycle.lock").read_text())
            assert lock["deferred"] and lock["pid"] == 0, lock  # no worker process holds it now
            with pytest.raises(LifecycleLockHeld):  # e.g. a supervisor pass meanwhile
                from airflow_streaming.control.local import LocalStorage

                LifecycleLock.acquire(LocalStorage(), control_dir, "supervise", keep_alive=False)
            if on_wait is not None:
                on_wait(wait.wait.kind)
            trigger = SparkStreamLifecycleTrigger(wait.wait.to_dict(), wait.holders, poll_interval=0.5)
            waited = time.monotonic()
            event = asyncio.run(_first_event(trigger))
            assert event.payload["status"] == "over", event.payload
            deferrals.append({"kind": wait.wait.kind, "worker_s": round(worker_s, 2),
                              "trigger_s": round(time.monotonic() - waited, 2)})
            resume = event.payload["holders"]


@pytest.mark.long(covered_by="tests/integration/test_real_airflow.py::"
                           "test_lifecycle_through_the_rest_api_on_real_airflow_services")
def test_deploy_stop_and_upgrade_wait_in_the_trigger_not_in_the_worker(streams):
    spec = streams.etl_spec()
    hook = streams.hook(spec)
    inp = streams.path("input", "etl")
    fed = [generate_events(inp, count=300, files=3, run="a")]
    deferrable = LifecycleOptions(defer=True, poll_s=0.5)

    identity, deferrals = drive(lambda resume: deploy_stream(spec, deferrable, resume), hook.paths.root)
    assert identity["state"] == "RUNNING" and [d["kind"] for d in deferrals] == ["ready"]
    assert deferrals[0]["trigger_s"] > deferrals[0]["worker_s"]  # the start is waited for in the trigger

    wait_for(lambda: (d := hook.status()) is not None and d.totals["input_rows"] >= 300, 90, "input processed")
    v2 = spec.with_version("v2", application="events_etl_v2")
    streams.hook(v2)
    options = LifecycleOptions(defer=True, poll_s=0.5, probation=Probation(min_batches=1, window_s=180))

    def feed_v2(kind: str) -> None:  # the new version proves itself on new input while deferred
        if kind == "probation":
            fed.append(generate_events(inp, count=200, files=2, run="b", file_start_index=10))

    record, deferrals = drive(lambda resume: LifecycleRunner(v2, Action.UPGRADE, options, resume=resume).run(),
                              hook.paths.root, on_wait=feed_v2)
    assert record.step == Step.SUCCEEDED, record.error
    kinds = [d["kind"] for d in deferrals]
    assert kinds[0] == "file" and "gone" in kinds and kinds[-1] == "probation", kinds  # gate, stop, probation
    assert [s["step"] for s in record.steps if s["step"] != "RESUMED"] == [
        "PLANNED", "CHECKED", "STOPPING", "STOPPED", "SNAPSHOTTED", "STARTING", "PROBATION", "SUCCEEDED"]
    assert sum(d["trigger_s"] for d in deferrals) > sum(d["worker_s"] for d in deferrals)
    wait_for(lambda: set(read_etl_output(streams.path("output", "etl")).event_ids) >=
             {i for b in fed for i in b.event_ids}, 120, "v2 processes everything")

    report, deferrals = drive(lambda resume: stop_stream(v2, LifecycleOptions(defer=True), resume), hook.paths.root)
    assert report["graceful"] and report["clean"] and [d["kind"] for d in deferrals] == ["gone"], report
    assert hook.running_driver() is None and not Path(hook.paths.root, "lifecycle.lock").exists()
    output = read_etl_output(streams.path("output", "etl"))
    assert output.duplicates == {} and set(output.event_ids) == {i for b in fed for i in b.event_ids}
