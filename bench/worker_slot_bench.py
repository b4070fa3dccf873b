"""Worker-slot seconds per upgrade: the lifecycle waiting in the task (before) vs in the trigger (after).

    .venv/bin/python bench/worker_slot_bench.py [--runs 3] [--json bench/results/worker_slot.json]

One stateful stream (``device_signals`` <-> ``device_signals_v2``) under continuous input. Each run
upgrades it twice, alternating the version:

- blocking (how every upgrade ran before): ``LifecycleRunner(..., Action.UPGRADE).run()`` - the whole
  upgrade (gate, stop, snapshot, start, probation) holds the caller, i.e. an Airflow worker slot;
- deferrable: the same with ``LifecycleOptions(defer=True)``, driven as Airflow drives a deferrable
  operator: the call runs until it defers, :class:`SparkStreamLifecycleTrigger` waits in an event loop (the
  triggerer's job), the call resumes with the handed-over locks.

Worker-slot seconds = the time spent inside the calls. Medians of --runs; ratio deferrable/blocking.

``--smoke`` (CI): one run (one blocking and one deferrable upgrade); JSON to a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "bench"))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

from airflow_streaming.hooks.streaming_job import SparkStreamHook  # noqa: E402
from airflow_streaming.lifecycle.operations import deploy_stream, stop_stream  # noqa: E402
from airflow_streaming.lifecycle.record import Action, Probation, Step  # noqa: E402
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner  # noqa: E402
from airflow_streaming.lifecycle.waits import WaitNeeded  # noqa: E402
from airflow_streaming.spec import StreamSpec  # noqa: E402
from airflow_streaming.triggers.lifecycle import SparkStreamLifecycleTrigger  # noqa: E402
from signals import Feeder  # noqa: E402
from harness import add_smoke_argument, smoke_results, stop_cleanly_on_sigterm, stop_processes_under  # noqa: E402
import stream_actions  # noqa: E402 - tests/stream_actions.py (harness puts tests/ on the path)

VERSIONS = {"v1": "device_signals", "v2": "device_signals_v2"}
PROBATION = Probation(min_batches=2, window_s=180)


def spec_for(root: str, version: str) -> StreamSpec:
    return StreamSpec(name="slots", application=VERSIONS[version], version=version,
                      checkpoint_location=f"{root}/ckpt", control_location=f"{root}/ctl", master="local[2]",
                      trigger_interval=1, heartbeat_interval=1, stop_timeout=60, startup_timeout=180,
                      application_args=("--input", f"{root}/in", "--output", f"{root}/out",
                                        "--window", "1 minute", "--watermark", "30 seconds"),
                      spark_conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})


async def _first_event(trigger: SparkStreamLifecycleTrigger) -> Any:
    async for event in trigger.run():
        return event
    raise RuntimeError("the trigger ended without an event")


def drive(call: Any) -> tuple[Any, float, float, int]:
    """(result, worker seconds, trigger seconds, deferrals) of a deferrable call driven as Airflow does."""
    resume, worker, trigger, deferrals = None, 0.0, 0.0, 0
    while True:
        started = time.monotonic()
        try:
            result = call(resume)
            return result, worker + time.monotonic() - started, trigger, deferrals
        except WaitNeeded as wait:
            worker += time.monotonic() - started
            waited = time.monotonic()
            event = asyncio.run(_first_event(SparkStreamLifecycleTrigger(wait.wait.to_dict(), wait.holders, 0.5)))
            trigger += time.monotonic() - waited
            deferrals += 1
            if event.payload["status"] != "over":
                raise RuntimeError(f"trigger: {event.payload}")
            resume = event.payload["holders"]


def upgrade(target: StreamSpec, deferrable: bool) -> dict[str, Any]:
    options = LifecycleOptions(probation=PROBATION, poll_s=0.5, defer=deferrable)
    if deferrable:
        record, worker, trigger, deferrals = drive(
            lambda resume: LifecycleRunner(target, Action.UPGRADE, options, resume=resume).run())
    else:
        started = time.monotonic()
        record = LifecycleRunner(target, Action.UPGRADE, options).run()
        worker, trigger, deferrals = time.monotonic() - started, 0.0, 0
    assert record.step == Step.SUCCEEDED, f"upgrade ended {record.step.value}: {record.error}"
    total = worker + trigger
    return {"to": target.version, "deferrable": deferrable, "worker_slot_s": round(worker, 2),
            "triggerer_s": round(trigger, 2), "total_s": round(total, 2), "deferrals": deferrals}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default=os.path.join(REPO, "bench", "results", "worker_slot.json"))
    add_smoke_argument(parser)
    ns = parser.parse_args()
    if ns.smoke:
        ns.runs = 1
        ns.json = os.path.join(smoke_results("worker_slot"), "worker_slot.json")
    stop_cleanly_on_sigterm()
    root = tempfile.mkdtemp(prefix="worker-slot-bench-")
    feeder = Feeder(f"{root}/in", per_file=4, interval=0.5)
    feeder.feed(40)
    rows: list[dict[str, Any]] = []
    version = "v1"
    try:
        deploy_stream(spec_for(root, version), LifecycleOptions(probation=PROBATION))
        feeder.start()
        for run in range(ns.runs):
            for deferrable in (False, True):
                version = "v2" if version == "v1" else "v1"
                row = upgrade(spec_for(root, version), deferrable)
                print(f"run {run + 1}: {'deferrable' if deferrable else 'blocking  '} upgrade to {version}: worker "
                      f"slot {row['worker_slot_s']:.1f} s, triggerer {row['triggerer_s']:.1f} s, "
                      f"{row['deferrals']} deferral(s)", flush=True)
                rows.append(row)
    finally:
        feeder.stop()
        try:
            stop_stream(spec_for(root, version))
        finally:
            hook = SparkStreamHook(spec_for(root, version))
            record = hook.driver_record()
            if record is not None and hook.alive(record):
                stream_actions.kill(hook, record)
            stop_processes_under(root)  # a standby or gate driver an upgrade left behind
            shutil.rmtree(root, ignore_errors=True)

    def med(deferrable: bool, key: str) -> float:
        return round(statistics.median(r[key] for r in rows if r["deferrable"] == deferrable), 2)

    median = {"blocking_worker_slot_s": med(False, "worker_slot_s"), "blocking_total_s": med(False, "total_s"),
              "deferrable_worker_slot_s": med(True, "worker_slot_s"), "deferrable_total_s": med(True, "total_s"),
              "deferrable_triggerer_s": med(True, "triggerer_s")}
    ratio = round(median["deferrable_worker_slot_s"] / median["blocking_worker_slot_s"], 3)
    result = {"machine": f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "runs": ns.runs, "upgrades": rows, "median": median, "ratio_worker_slot_deferrable_over_blocking": ratio}
    print(f"\nworker-slot seconds per upgrade: blocking {median['blocking_worker_slot_s']:.1f} s, deferrable "
          f"{median['deferrable_worker_slot_s']:.1f} s (ratio {ratio:.2f}); the deferrable upgrade waited "
          f"{median['deferrable_triggerer_s']:.1f} s in the trigger; total {median['blocking_total_s']:.1f} s vs "
          f"{median['deferrable_total_s']:.1f} s")
    os.makedirs(os.path.dirname(os.path.abspath(ns.json)), exist_ok=True)
    with open(ns.json, "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
