"""A Spark runtime upgrade (3.5 -> the installed 4.x) against restarts on one runtime, in the same run.

    .venv/bin/python bench/runtime_bench.py [--runs 3] [--json bench/results/runtime.json]

Each run starts one stateful stream (the bundled ``device_signals``) on Spark 3.5.7 under continuous input
and measures, on that one stream:

- **bare restart on 3.5** (the baseline): ``stream_actions.stop(hook)`` + ``stream_actions.submit(hook)`` of the same version;
- **runtime upgrade**: ``LifecycleRunner(..., Action.UPGRADE)`` to the same code on the installed Spark 4.x -
  the gate runs in 4.x, then graceful stop, snapshot, start on 4.x, probation;
- **bare restart on 4.x**: the same, on the new line (the second baseline: a cold start of the new Spark);
- **upgrade on one runtime**: then a managed upgrade on 4.x (``device_signals`` -> ``device_signals_v2``),
  the lifecycle's usual cost on an unchanged Spark.

Downtime = mtime of the new run's first ``commits/N+1`` - mtime of the old run's last ``commits/N``. Also
timed: building the 3.5.7 runtime from nothing into an empty cache (venv + ``pip install``; pip's own
download/wheel cache as the host has it) and resolving a cached one. Medians of --runs.

``--smoke`` (CI): one run without the upgrade on one runtime, 2 batches between measurements, JSON to a
temp dir.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from upgrade_bench import (  # noqa: E402
    bare_restart,
    cleanup,
    machine,
    managed_upgrade,
    spec_for,
    start_under_input,
    wait_batches,
)

from airflow_streaming.spark_runtime import installed_version, resolve_runtime  # noqa: E402
from harness import add_smoke_argument, smoke_results, stop_cleanly_on_sigterm, stop_processes_under  # noqa: E402
from signals import Feeder  # noqa: E402

OLD = "3.5.7"


def build_seconds() -> tuple[float, float]:
    """Seconds to build the old runtime into an empty cache, and to resolve it once cached."""
    cache = Path(tempfile.mkdtemp(prefix="runtime-cache-"))
    try:
        started = time.monotonic()
        built = resolve_runtime({"version": OLD}, cache=cache)
        build = time.monotonic() - started
        assert built is not None and built.source == "built", built
        started = time.monotonic()
        cached = resolve_runtime({"version": OLD}, cache=cache, build=False)
        resolve = time.monotonic() - started
        assert cached is not None and cached.source == "cache"
        return round(build, 2), round(resolve * 1000, 2)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def one_run(settle: int, same_runtime: bool = True) -> dict:
    root = tempfile.mkdtemp(prefix="runtime-bench-")
    feeder = Feeder(f"{root}/in", per_file=4, interval=0.5, run="runtime")
    run_ids: list[str] = []
    try:
        old = spec_for(root, "v1").with_version("v1-spark35", spark_runtime=OLD)
        hook = start_under_input(old, feeder, run_ids)
        bare = bare_restart(old, run_ids)
        wait_batches(hook, bare["batch"] + 1, settle)
        new = old.with_version("v1-spark4", spark_runtime=None)
        runtime = managed_upgrade(new, run_ids)
        wait_batches(hook, runtime["batch"] + 1, settle)
        bare_new = same = None
        if same_runtime:  # not in --smoke: the same code paths as above, and they cost suite time
            bare_new = bare_restart(new, run_ids)
            wait_batches(hook, bare_new["batch"] + 1, settle)
            same = managed_upgrade(spec_for(root, "v2"), run_ids)
            wait_batches(hook, same["batch"] + 1, settle)
        return {"bare": bare, "runtime_upgrade": runtime, "bare_new": bare_new, "same_runtime_upgrade": same}
    finally:
        feeder.stop()
        cleanup(root, run_ids)
        stop_processes_under(root)
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default="bench/results/runtime.json")
    parser.add_argument("--settle", type=int, default=5, help="batches committed between two measurements")
    add_smoke_argument(parser)
    ns = parser.parse_args()
    if ns.smoke:
        ns.runs, ns.settle = 1, 2
        ns.json = os.path.join(smoke_results("runtime"), "runtime.json")
    stop_cleanly_on_sigterm()
    resolve_runtime({"version": OLD})  # the stream's own runtime, built once on this host if missing
    builds, resolves, runs = [], [], []
    for run in range(ns.runs):
        build, resolve = build_seconds()
        builds.append(build)
        resolves.append(resolve)
        row = one_run(ns.settle, same_runtime=not ns.smoke)
        runs.append(row)
        b, r, s, n = row["bare"], row["runtime_upgrade"], row["same_runtime_upgrade"], row["bare_new"]
        print(f"run {run}: build {build:.2f} s, resolve {resolve:.2f} ms; bare restart on {OLD} {b['downtime_s']:.2f} s; "
              f"runtime upgrade {OLD} -> {installed_version()} {r['downtime_s']:.2f} s (gate {r['gate_s']:.2f} s, "
              f"stop {r['stop_s']:.2f}, submit -> first commit {r['submit_to_first_commit_s']:.2f})"
              + (f"; bare restart on {installed_version()} {n['downtime_s']:.2f} s" if n else "")
              + (f"; upgrade on {installed_version()} {s['downtime_s']:.2f} s (gate {s['gate_s']:.2f} s)" if s else ""),
              flush=True)

    def med(key: str, field: str) -> float | None:
        rows = [r[key][field] for r in runs if r[key] is not None]
        return round(statistics.median(rows), 2) if rows else None

    median = {"build_s": round(statistics.median(builds), 2), "resolve_cached_ms": round(statistics.median(resolves), 2),
              "bare_restart_downtime_s": med("bare", "downtime_s"),
              "runtime_upgrade_downtime_s": med("runtime_upgrade", "downtime_s"),
              "runtime_upgrade_gate_s": med("runtime_upgrade", "gate_s"),
              "runtime_upgrade_total_s": med("runtime_upgrade", "total_s"),
              "bare_restart_new_downtime_s": med("bare_new", "downtime_s"),
              "same_runtime_upgrade_downtime_s": med("same_runtime_upgrade", "downtime_s"),
              "same_runtime_upgrade_gate_s": med("same_runtime_upgrade", "gate_s")}
    print(f"\nmedians of {ns.runs} run(s), Spark {OLD} -> {installed_version()}:")
    print(f"build the {OLD} runtime (empty cache)     {median['build_s']:.2f} s")
    print(f"resolve the cached runtime             {median['resolve_cached_ms']:.2f} ms")
    print(f"bare restart on {OLD} (baseline)       {median['bare_restart_downtime_s']:.2f} s")
    print(f"runtime upgrade downtime               {median['runtime_upgrade_downtime_s']:.2f} s "
          f"({median['runtime_upgrade_downtime_s'] / median['bare_restart_downtime_s']:.2f} x the baseline)")
    print(f"runtime upgrade gate (in {installed_version()})          {median['runtime_upgrade_gate_s']:.2f} s")
    if median["bare_restart_new_downtime_s"] is not None:
        print(f"bare restart on {installed_version()} (second baseline)   {median['bare_restart_new_downtime_s']:.2f} s; "
              f"runtime upgrade / it: "
              f"{median['runtime_upgrade_downtime_s'] / median['bare_restart_new_downtime_s']:.2f}")
    if median["same_runtime_upgrade_downtime_s"] is not None:
        print(f"upgrade on one runtime downtime        {median['same_runtime_upgrade_downtime_s']:.2f} s "
              f"({median['same_runtime_upgrade_downtime_s'] / median['bare_restart_downtime_s']:.2f} x the baseline)")
    os.makedirs(os.path.dirname(os.path.abspath(ns.json)), exist_ok=True)
    with open(ns.json, "w") as fh:
        json.dump({"machine": machine(), "old_runtime": OLD, "new_runtime": installed_version(), "median": median,
                   "runs": runs, "build_s": builds, "resolve_cached_ms": resolves}, fh, indent=1, default=str)
    print(f"results in {ns.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
