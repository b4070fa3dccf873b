"""Driver start and the cold compatibility gate with and without the class-data-sharing archive.

    .venv/bin/python bench/class_archive_bench.py [--runs 3] [--json bench/results/class_archive.json]

Builds (or reuses) the archive of ``airflow_streaming.class_archive``, then alternates, ``--runs``
times, a run without it (the baseline, measured in the same run) and a run with it
(``SPARK_SUBMIT_OPTS=-XX:SharedArchiveFile=...``). Each run submits the bundled stateful job
``device_signals`` on a fresh checkpoint with input waiting (submit -> first committed batch), then -
with that driver still running, as in a cold upgrade - runs the compatibility gate of
``device_signals_v2`` as a child process with its own Spark session (``run_check``), then stops the
driver. Medians, and the ratio with / without.

``--smoke`` (CI): one run of each (the archive the suite built is reused); JSON to a temp dir.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
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

from airflow_streaming import class_archive  # noqa: E402
from airflow_streaming.compat.run import run_check  # noqa: E402
from airflow_streaming.hooks.streaming_job import SparkStreamHook  # noqa: E402
from signals import Feeder  # noqa: E402
from harness import add_smoke_argument, smoke_results, stop_cleanly_on_sigterm, stop_processes_under  # noqa: E402
import stream_actions  # noqa: E402 - tests/stream_actions.py (harness puts tests/ on the path)
from upgrade_bench import commit_mtime, spec_for  # noqa: E402


def one_run(option: str) -> dict[str, float]:
    os.environ["SPARK_SUBMIT_OPTS"] = option
    root = tempfile.mkdtemp(prefix="class-archive-bench-")
    hook = SparkStreamHook(spec_for(root, "v1"))
    try:
        Feeder(f"{root}/in").feed(40)
        started = time.time()
        stream_actions.submit(hook)
        first = commit_mtime(f"{root}/ckpt", 0) - started
        gate_started = time.monotonic()
        report = run_check(spec_for(root, "v2"), allow_warnings=False)
        gate = time.monotonic() - gate_started
        assert report["verdict"] == "COMPATIBLE", report["verdict"]
        assert stream_actions.stop(hook).graceful
        return {"submit_to_first_commit_s": round(first, 2), "cold_gate_s": round(gate, 2)}
    finally:
        record = hook.driver_record()
        if record is not None and hook.alive(record):
            print(stream_actions.kill(hook, record, grace=5), file=sys.stderr)
        stop_processes_under(root)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default=None)
    add_smoke_argument(parser)
    ns = parser.parse_args()
    if ns.smoke:
        ns.runs = 1
        ns.json = os.path.join(smoke_results("class_archive"), "class_archive.json")
    stop_cleanly_on_sigterm()
    built = time.monotonic()
    path = class_archive.build()
    build_s = time.monotonic() - built
    option = class_archive.java_option(path)
    runs: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    for i in range(ns.runs):
        for variant in ("without", "with"):
            result = one_run(option if variant == "with" else "")
            runs[variant].append(result)
            print(f"run {i + 1} {variant:7s} {result}", flush=True)
    summary = {}
    for metric in ("submit_to_first_commit_s", "cold_gate_s"):
        without = statistics.median(r[metric] for r in runs["without"])
        with_ = statistics.median(r[metric] for r in runs["with"])
        summary[metric] = {"without": without, "with": with_, "ratio": round(with_ / without, 2)}
        print(f"{metric}: median without {without:.2f} s, with {with_:.2f} s, ratio {with_ / without:.2f}")
    print(f"archive {path}: {path.stat().st_size / 2**20:.0f} MiB, built or found in {build_s:.1f} s")
    if ns.json:
        with open(ns.json, "w") as fh:
            json.dump({"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                       "runs": runs, "summary": summary, "archive_mib": round(path.stat().st_size / 2**20)},
                      fh, indent=1)


if __name__ == "__main__":
    main()
