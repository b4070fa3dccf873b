"""Upgrade downtime of the managed lifecycle vs a bare restart of the same stream, in the same run.

    .venv/bin/python bench/upgrade_bench.py [--runs 3] [--json bench/results/upgrade.json]

One stateful stream (the bundled ``device_signals`` / ``device_signals_v2``, both compatible with the
other's checkpoint) runs under continuous input: a thread writes one small file of events every
0.5 s, so every batch has data and a new driver's first batch is never empty. Each run measures

- bare restart: ``stream_actions.stop(hook)`` + ``stream_actions.submit(hook)`` of the running version (no gate, no snapshot);
- managed upgrade: ``LifecycleRunner(..., Action.UPGRADE).run()`` to the other version (gate in a
  child process while the old driver still runs, graceful stop, checkpoint snapshot, start,
  probation); the direction alternates (v1 -> v2, v2 -> v1, ...) so every upgrade changes version;
- warm upgrade (the stretch goal): the same with ``warm_start=True`` - the new driver is prepared as a
  standby (JVM, session, planned query, warm-up job) beside the old one, which is stopped only then;
  the standby is promoted once the old one exited and the snapshot is taken.

Downtime = mtime of ``commits/N+1`` - mtime of ``commits/N`` in the checkpoint, N = the last batch
committed by the old driver, N + 1 = the first batch committed by the new one. Medians of --runs.

``--job script``: the same with ``bench/team_job.py``, a team's own stateful script (its standby runs the
script up to its start() and replays its plan).

``--smoke`` (CI): one run (a bare restart and a warm upgrade; the cold upgrade's code path is smoke-run by
``runtime_bench.py``), 2 batches between them instead of 5; JSON to a temp dir.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "bench"))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

from airflow_streaming.hooks.streaming_job import SparkStreamHook  # noqa: E402
from airflow_streaming.lifecycle.record import Action, Probation, Step  # noqa: E402
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner  # noqa: E402
from airflow_streaming.spec import StreamSpec  # noqa: E402
from signals import Feeder  # noqa: E402
from harness import add_smoke_argument, smoke_results, stop_cleanly_on_sigterm, stop_processes_under  # noqa: E402
import stream_actions  # noqa: E402 - tests/stream_actions.py (harness puts tests/ on the path)

VERSIONS = {"v1": "device_signals", "v2": "device_signals_v2"}
OPTIONS = LifecycleOptions(probation=Probation(min_batches=2, window_s=180), poll_s=0.2)


EXTRA_CONF: dict[str, str] = {}
"""Set from the command line (``--no-plan-warm-up``: the standby's plan warm-up off, for comparison)."""


TEAM_JOB = os.path.join(REPO, "bench", "team_job.py")
JOB = "device_signals"
"""``--job``: ``device_signals`` (the bundled v1/v2) or ``script`` (``bench/team_job.py``, a team's own stateful
script, as v1 and v2: the same file, another version label)."""


def spec_for(root: str, version: str) -> StreamSpec:
    script = JOB == "script"
    return StreamSpec(name="upgrade", application=TEAM_JOB if script else VERSIONS[version], version=version,
                      checkpoint_location=f"{root}/ckpt", control_location=f"{root}/ctl", master="local[2]",
                      trigger_interval=1, heartbeat_interval=1, stop_timeout=60, startup_timeout=180,
                      application_args=("--input", f"{root}/in", "--output", f"{root}/out",
                                        "--window", "1 minute", "--watermark", "30 seconds",
                                        *(("--checkpoint", f"{root}/ckpt") if script else ())),
                      spark_conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false", **EXTRA_CONF})


def commit_mtime(ckpt: str, batch: int, timeout: float = 300) -> float:
    """mtime of ``commits/<batch>``, waiting until the file exists."""
    path = f"{ckpt}/commits/{batch}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return os.stat(path).st_mtime
        except FileNotFoundError:
            time.sleep(0.05)
    raise TimeoutError(f"{path} did not appear within {timeout}s")


def wait_batches(hook: SparkStreamHook, after: int, count: int, timeout: float = 180) -> int:
    """Wait until the checkpoint has committed batch ``after + count``; return the last committed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = hook.batch_position().last_committed
        if last is not None and last >= after + count:
            return last
        time.sleep(0.2)
    raise TimeoutError(f"batch {after + count} not committed within {timeout}s")


def start_under_input(spec: StreamSpec, feeder: Feeder, run_ids: list[str]) -> SparkStreamHook:
    """Feed 40 events, start ``spec``'s driver, then feed continuously; return once 3 batches committed."""
    feeder.feed(40)
    hook = SparkStreamHook(spec)
    record = stream_actions.submit(hook)
    run_ids.append(record.run_id)
    hook.wait_until_ready(record)
    feeder.start()
    wait_batches(hook, hook.batch_position().last_committed or 0, 3)
    return hook


def bare_restart(spec: StreamSpec, run_ids: list[str]) -> dict[str, float]:
    hook = SparkStreamHook(spec)
    t_stop = time.time()
    report = stream_actions.stop(hook)
    t_stopped = time.time()
    assert report.graceful, f"bare stop was not graceful: {report.to_dict()}"
    n = hook.batch_position().last_committed
    assert n is not None and n == report.position.last_committed
    record = stream_actions.submit(hook)
    t_submitted = time.time()
    run_ids.append(record.run_id)
    old, new = commit_mtime(spec.checkpoint_location, n), commit_mtime(spec.checkpoint_location, n + 1)
    return {"version": spec.version, "batch": n, "downtime_s": round(new - old, 2),
            "commit_to_stop_request_s": round(t_stop - old, 2), "stop_s": round(t_stopped - t_stop, 2),
            "submit_s": round(t_submitted - t_stopped, 2), "submit_to_first_commit_s": round(new - t_submitted, 2)}


def managed_upgrade(target: StreamSpec, run_ids: list[str], warm: bool = False) -> dict[str, float]:
    started = time.time()
    record = LifecycleRunner(target, Action.UPGRADE, dataclasses.replace(OPTIONS, warm_start=warm)).run()
    ended = time.time()
    if record.new_run_id:
        run_ids.append(record.new_run_id)
    steps = [s["step"] for s in record.steps]
    assert record.step == Step.SUCCEEDED, f"upgrade ended {record.step.value}: {record.error}; steps {steps}"
    at = {s["step"]: s["at"] for s in record.steps}
    n = record.stop_batch
    assert n is not None and record.first_new_batch in (None, n + 1), (n, record.first_new_batch)
    old, new = commit_mtime(target.checkpoint_location, n), commit_mtime(target.checkpoint_location, n + 1)
    return {"from": record.from_version, "to": record.to_version, "batch": n, "downtime_s": round(new - old, 2),
            "gate_s": _gate_seconds(record) if warm else round(at["CHECKED"] - at["PLANNED"], 2),
            "snapshot_s": round(at["SNAPSHOTTED"] - at["STOPPED"], 2),
            "total_s": round(ended - started, 2),
            # where the downtime goes: last commit -> stop request -> stopped -> snapshot -> submitted -> commit
            "commit_to_stop_request_s": round(at["STOPPING"] - old, 2),
            "stop_s": round(at["STOPPED"] - at["STOPPING"], 2),
            "submit_s": round(at["PROBATION"] - at["SNAPSHOTTED"], 2),
            "submit_to_first_commit_s": round(new - at["PROBATION"], 2),
            "probation_s": round(at["SUCCEEDED"] - at["PROBATION"], 2),
            "prepare_s": round(at["STOPPING"] - at["PREPARING"], 2) if warm else None,
            "plan_warm_up_s": ((SparkStreamHook(target).standby_state(record.new_run_id or "") or {})
                               .get("plan_warm_up_s") if warm else None),
            "record_id": record.id, "new_run_id": record.new_run_id,
            **first_batch_breakdown(target, record.new_run_id, n + 1, at["PROBATION"])}


def _iso(ts: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def first_batch_breakdown(spec: StreamSpec, run_id: str | None, batch: int, promoted_at: float) -> dict:
    """Where the time from the promotion (or submission) to the first commit goes, from the new run's own
    progress report of its first batch (Spark's ``durationMs``), beside the median of its later batches:
    ``promote_to_batch_start_s`` (the query start in the driver), the first batch's phases, and
    ``steady_batch_ms`` (what a batch of the same run costs once warm)."""
    doc = SparkStreamHook(spec).status()
    progress = [p for q in (doc.queries if doc is not None and doc.run_id == run_id else [])
                for p in (q.recent_progress or [])]
    first = next((p for p in progress if p.get("batchId") == batch), None)
    if first is None:
        return {"first_batch": None}
    later = [p["durationMs"].get("triggerExecution") for p in progress
             if isinstance(p.get("batchId"), int) and p["batchId"] > batch and p.get("numInputRows")]
    return {"promote_to_batch_start_s": round(_iso(first["timestamp"]) - promoted_at, 2),
            "first_batch": {k: first["durationMs"].get(k) for k in
                            ("triggerExecution", "latestOffset", "getBatch", "queryPlanning", "addBatch",
                             "walCommit", "commitOffsets")},
            "steady_batch_ms": statistics.median(later) if later else None}


def _first_batch_text(row: dict) -> str:
    fb = row.get("first_batch")
    if not fb:
        return "first batch: not in the status document"
    phases = ", ".join(f"{k} {v}" for k, v in fb.items() if k != "triggerExecution" and v is not None)
    return (f"promote -> first batch start {row['promote_to_batch_start_s']:.2f} s, first batch "
            f"{fb['triggerExecution']} ms ({phases}), later batches {row['steady_batch_ms']} ms")


def _gate_seconds(record) -> float:
    """Warm start: the gate ran inside the prepared driver; the CHECKED step says how long it took."""
    detail = next(s["detail"] for s in record.steps if s["step"] == "CHECKED")
    match = re.search(r"checked inside the prepared driver in ([0-9.]+)s", detail or "")
    assert match, f"the gate did not run inside the prepared driver: {detail}"
    return round(float(match.group(1)), 2)


def java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
        return (out.stderr or out.stdout).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"


def machine() -> dict[str, object]:
    try:
        import pyspark

        spark = pyspark.__version__
    except ImportError:
        spark = None
    return {"platform": platform.platform(), "nproc": os.cpu_count(), "python": platform.python_version(),
            "java": java_version(), "pyspark": spark}


def cleanup(root: str, run_ids: list[str]) -> None:
    hook = SparkStreamHook(spec_for(root, "v1"))  # same name, control dir and checkpoint for both versions
    try:
        stream_actions.stop(hook)
    except Exception as exc:  # noqa: BLE001 - go on killing what is left
        print(f"stop at cleanup failed: {exc}", file=sys.stderr)
    record = hook.driver_record()
    if record is not None and hook.processes_of_run(record.run_id):
        stream_actions.kill(hook, record, grace=5)
    for run_id in run_ids:
        for pid in hook.processes_of_run(run_id):
            print(f"killing leftover pid {pid} of run {run_id}", file=sys.stderr)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    time.sleep(1)
    stop_processes_under(root)  # a standby or gate driver an upgrade left behind
    left = {r: hook.processes_of_run(r) for r in run_ids if hook.processes_of_run(r)}
    if left:
        print(f"WARNING: processes left: {left}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default="bench/results/upgrade.json")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, checkpoint)")
    parser.add_argument("--settle", type=int, default=5, help="batches committed between two measured restarts")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold upgrade (bare restart and warm only)")
    parser.add_argument("--no-plan-warm-up", action="store_true",
                        help="the standby does not replay its job's plan before promotion (for comparison)")
    parser.add_argument("--job", choices=("device_signals", "script"), default="device_signals",
                        help="the bundled device_signals v1/v2, or bench/team_job.py (a team's own stateful script)")
    add_smoke_argument(parser)
    ns = parser.parse_args()
    global JOB
    JOB = ns.job
    if ns.job == "script" and ns.json == "bench/results/upgrade.json":
        ns.json = "bench/results/upgrade-script.json"
    print(f"job: {ns.job}")
    if ns.no_plan_warm_up:
        EXTRA_CONF["spark.airflow_streaming.warmUp.maxBytes"] = "0"
    if ns.smoke:
        ns.runs, ns.settle, ns.no_cold = 1, 2, True
        ns.json = os.path.join(smoke_results("upgrade"), "upgrade.json")
    stop_cleanly_on_sigterm()

    root = tempfile.mkdtemp(prefix="upgrade-bench-")
    print(f"work dir {root}")
    feeder = Feeder(f"{root}/in", per_file=4, interval=0.5, run="upgrade")
    run_ids: list[str] = []
    bare: list[dict] = []
    upgrades: list[dict] = []
    warm_upgrades: list[dict] = []
    try:
        current = spec_for(root, "v1")
        hook = start_under_input(current, feeder, run_ids)
        for run in range(ns.runs):
            b = bare_restart(current, run_ids)
            bare.append(b)
            print(f"run {run}: bare restart {b['version']} at batch {b['batch']}: downtime {b['downtime_s']:.2f} s "
                  f"(last commit -> stop request {b['commit_to_stop_request_s']:.2f}, stop {b['stop_s']:.2f}, "
                  f"submit {b['submit_s']:.2f}, submit -> first commit {b['submit_to_first_commit_s']:.2f})",
                  flush=True)
            wait_batches(hook, b["batch"] + 1, ns.settle)

            if ns.smoke:  # a cold managed upgrade's code path is smoke-run by runtime_bench (suite time)
                print(f"run {run}: cold upgrade skipped in --smoke (bench/runtime_bench.py --smoke runs one)")
            elif ns.no_cold:
                print(f"run {run}: cold upgrade skipped (--no-cold)")
            else:
                target = spec_for(root, "v2" if current.version == "v1" else "v1")
                u = managed_upgrade(target, run_ids)
                upgrades.append(u)
                current = target
                print(f"run {run}: upgrade {u['from']} -> {u['to']} at batch {u['batch']}: downtime "
                      f"{u['downtime_s']:.2f} s (last commit -> stop request {u['commit_to_stop_request_s']:.2f}, "
                      f"stop {u['stop_s']:.2f}, snapshot {u['snapshot_s']:.2f}, submit {u['submit_s']:.2f}, submit -> "
                      f"first commit {u['submit_to_first_commit_s']:.2f}); gate {u['gate_s']:.2f} s, probation "
                      f"{u['probation_s']:.2f} s, total {u['total_s']:.2f} s", flush=True)
                wait_batches(hook, u["batch"] + 1, ns.settle)

            # Warm start (stretch goal): the new driver is prepared beside the old one before the stop.
            target = spec_for(root, "v2" if current.version == "v1" else "v1")
            w = managed_upgrade(target, run_ids, warm=True)
            warm_upgrades.append(w)
            current = target
            print(f"run {run}: warm upgrade {w['from']} -> {w['to']} at batch {w['batch']}: downtime "
                  f"{w['downtime_s']:.2f} s (last commit -> stop request {w['commit_to_stop_request_s']:.2f}, stop "
                  f"{w['stop_s']:.2f}, snapshot {w['snapshot_s']:.2f}, promote {w['submit_s']:.2f}, promote -> first "
                  f"commit {w['submit_to_first_commit_s']:.2f}); prepared in {w['prepare_s']:.2f} s before the stop (plan "
                  f"warm-up {w['plan_warm_up_s'] if w['plan_warm_up_s'] is not None else 'off'} s), "
                  f"total {w['total_s']:.2f} s; {_first_batch_text(w)}", flush=True)
            wait_batches(hook, w["batch"] + 1, ns.settle)
    finally:
        feeder.stop()
        cleanup(root, run_ids)
        if not ns.keep:
            shutil.rmtree(root, ignore_errors=True)

    def med(rows: list[dict], key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 2)

    median = {"bare_restart_downtime_s": med(bare, "downtime_s")}
    if upgrades:
        median.update({"upgrade_downtime_s": med(upgrades, "downtime_s"), "gate_s": med(upgrades, "gate_s"),
                       "snapshot_s": med(upgrades, "snapshot_s"), "upgrade_total_s": med(upgrades, "total_s")})
    for key in ("commit_to_stop_request_s", "stop_s", "submit_s", "submit_to_first_commit_s"):
        median[f"bare_{key}"] = med(bare, key)
        if upgrades:
            median[f"upgrade_{key}"] = med(upgrades, key)
    median["warm_upgrade_downtime_s"] = med(warm_upgrades, "downtime_s")
    median["warm_prepare_s"] = med(warm_upgrades, "prepare_s")
    median["warm_gate_s"] = med(warm_upgrades, "gate_s")
    median["warm_promote_to_first_commit_s"] = med(warm_upgrades, "submit_to_first_commit_s")
    median["warm_stop_s"] = med(warm_upgrades, "stop_s")
    with_batch = [w for w in warm_upgrades if w.get("first_batch")]
    if with_batch:
        median["warm_promote_to_batch_start_s"] = med(with_batch, "promote_to_batch_start_s")
        median["warm_first_batch_ms"] = statistics.median(w["first_batch"]["triggerExecution"] for w in with_batch)
        steady = [w["steady_batch_ms"] for w in with_batch if w["steady_batch_ms"] is not None]
        median["warm_steady_batch_ms"] = statistics.median(steady) if steady else None
    ratio = round(median["upgrade_downtime_s"] / median["bare_restart_downtime_s"], 3) if upgrades else None
    warm_ratio = round(median["warm_upgrade_downtime_s"] / median["bare_restart_downtime_s"], 3)
    result = {"machine": machine(), "job": ns.job, "runs": ns.runs, "bare_restart": bare, "upgrade": upgrades,
              "warm_upgrade": warm_upgrades, "median": median, "ratio_upgrade_over_bare": ratio,
              "ratio_warm_upgrade_over_bare": warm_ratio, "goal_ratio_max": 1.25}
    print()
    print(f"bare restart downtime (commits/N -> commits/N+1): {median['bare_restart_downtime_s']:.2f} s  "
          f"raw {[r['downtime_s'] for r in bare]}")
    if upgrades:
        print(f"upgrade downtime      (commits/N -> commits/N+1): {median['upgrade_downtime_s']:.2f} s  "
              f"raw {[r['downtime_s'] for r in upgrades]}")
        print(f"ratio upgrade / bare: {ratio:.2f} (goal <= 1.25: {'met' if ratio <= 1.25 else 'NOT met'})")
    print(f"warm upgrade downtime (commits/N -> commits/N+1): {median['warm_upgrade_downtime_s']:.2f} s  "
          f"raw {[r['downtime_s'] for r in warm_upgrades]}")
    print(f"ratio warm upgrade / bare: {warm_ratio:.2f} (goal < 0.2: {'met' if warm_ratio < 0.2 else 'NOT met'}); "
          f"standby prepared in {median['warm_prepare_s']:.2f} s before the stop, promote -> first commit "
          f"{median['warm_promote_to_first_commit_s']:.2f} s")
    if "warm_first_batch_ms" in median:
        print(f"warm upgrade downtime, where it goes (median): stop {median['warm_stop_s']:.2f} s, promote -> first "
              f"batch start {median['warm_promote_to_batch_start_s']:.2f} s, first batch "
              f"{median['warm_first_batch_ms']} ms (later batches of the same run {median['warm_steady_batch_ms']} ms)")
    if upgrades:
        print(f"gate (PLANNED -> CHECKED, before the stop): {median['gate_s']:.2f} s  "
              f"raw {[r['gate_s'] for r in upgrades]}")
    print(f"gate inside the prepared driver (warm start): {median['warm_gate_s']:.2f} s  "
          f"raw {[r['gate_s'] for r in warm_upgrades]} (goal < 2 s: {'met' if median['warm_gate_s'] < 2 else 'NOT met'})")
    if upgrades:
        print(f"snapshot (STOPPED -> SNAPSHOTTED):          {median['snapshot_s']:.2f} s  "
              f"raw {[r['snapshot_s'] for r in upgrades]}")
        print(f"upgrade total wall time:                    {median['upgrade_total_s']:.2f} s  "
              f"raw {[r['total_s'] for r in upgrades]}")
        print("downtime breakdown (median, bare / upgrade): "
              + ", ".join(f"{k} {median['bare_' + k]:.2f} / {median['upgrade_' + k]:.2f}"
                          for k in ("commit_to_stop_request_s", "stop_s", "submit_s", "submit_to_first_commit_s")))
    print(f"machine: {result['machine']}")
    os.makedirs(os.path.dirname(os.path.abspath(ns.json)), exist_ok=True)
    with open(ns.json, "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
