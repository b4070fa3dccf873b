"""Compatibility check timing: checkpoint read, candidate planning, Spark dry run, vs a session start.

    .venv/bin/python bench/compat_bench.py [--runs 5] [--json bench/results/compat.json]

Builds a real stateful checkpoint (dedup + aggregation, 2 partitions) with one local Spark session,
then times, in the same session: the rules-only check (read checkpoint + capture + plan candidate),
the full check with Spark's dry run, and the dry run alone (as reported by the check); the session
start is measured first as the baseline.

``--smoke`` (CI): 100 events, one measured round after the warm-up round; JSON to a temp dir.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import runpy
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from harness import add_smoke_argument, smoke_results, stop_cleanly_on_sigterm  # noqa: E402

SCRIPT = '''
import sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.getOrCreate()
src, ckpt = sys.argv[1:3]
events = spark.readStream.schema("event_id STRING, device_id STRING, signal DOUBLE").json(src)
agg = events.dropDuplicates(["event_id"]).groupBy("device_id").agg(F.count("*").alias("n"), F.sum("signal").alias("s"))
q = agg.writeStream.outputMode("update").format("noop").option("checkpointLocation", ckpt)
q.trigger(availableNow=True).start().awaitTermination()
'''


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", default="bench/results/compat.json")
    parser.add_argument("--events", type=int, default=500, help="events in the checkpoint's input")
    add_smoke_argument(parser)
    ns = parser.parse_args()
    if ns.smoke:
        ns.runs, ns.events = 1, 100
        ns.json = os.path.join(smoke_results("compat"), "compat.json")
    stop_cleanly_on_sigterm()
    work = tempfile.mkdtemp(prefix="compat-bench-")
    try:
        t0 = time.monotonic()
        from pyspark.sql import SparkSession

        # No console progress bar: drawn without a newline on stages over 0.5 s (a busy or fresh machine), it ran
        # into the figure lines printed after it (CI's smoke: "session start" no longer began its line).
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        session_start = time.monotonic() - t0
        spark.sparkContext.setLogLevel("ERROR")
        from airflow_streaming.compat.check import check_compatibility
        from spark_jobs.event_generator import generate_events

        generate_events(os.path.join(work, "src"), count=ns.events, devices=8)
        script = os.path.join(work, "job.py")
        with open(script, "w") as fh:
            fh.write(SCRIPT)
        args = [os.path.join(work, "src"), os.path.join(work, "ckpt")]
        sys.argv = [script, *args]
        runpy.run_path(script, run_name="__main__")
        rules_only, full, dry = [], [], []
        for _ in range(ns.runs + 1):  # the first round warms the JIT and is dropped
            t = time.monotonic()
            check_compatibility(spark, args[1], script, args, dry_run=False)
            rules_only.append(time.monotonic() - t)
            t = time.monotonic()
            report = check_compatibility(spark, args[1], script, args, dry_run=True)
            full.append(time.monotonic() - t)
            dry.append(report.dry_run.seconds)
            assert report.verdict.value == "COMPATIBLE", report.render_text()
        spark.stop()
        med = {k: statistics.median(v[1:]) for k, v in (("rules_only", rules_only), ("full", full), ("dry_run", dry))}
        result = {
            "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "session_start_s": round(session_start, 3),
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "raw_s": {"rules_only": rules_only[1:], "full": full[1:], "dry_run": dry[1:]},
            "dry_run_vs_session_start": round(med["dry_run"] / session_start, 3),
        }
        print(f"session start (baseline)          {session_start:7.2f} s")
        print(f"check, rules only (median of {ns.runs})   {med['rules_only']:7.2f} s")
        print(f"check with Spark dry run          {med['full']:7.2f} s")
        print(f"  of which the dry run            {med['dry_run']:7.2f} s  "
              f"({result['dry_run_vs_session_start']:.3f} x a session start)")
        os.makedirs(os.path.dirname(ns.json), exist_ok=True)
        with open(ns.json, "w") as fh:
            json.dump(result, fh, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
