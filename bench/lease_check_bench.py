#!/usr/bin/env python
"""What the per-batch lease check (fencing at commit, issue 36) costs a batch.

Usage (from the project root)::

    .venv/bin/python bench/lease_check_bench.py [--runs 5] [--checks 200] [--json bench/results/lease_check.json]

Before each ``foreachBatch`` batch writes, the driver runs ``spark_jobs.runtime.lease_check.LeaseCheck.check``:
one read of ``lease.json`` in a thread of its own, bounded by half the ttl, and a comparison with the lease the
driver holds. This bench times that call on the two control storages the product supports, in one process, no
Spark: local files (a temp dir) and WebHDFS (``tests/webhdfs_standin.py``, the WebHDFS-protocol STAND-IN for a
NameNode, on loopback: a real HTTP round trip per read, no network latency). The baseline, measured in the same
run and alternated with the check: the bare read of the same lease (``contract.read_lease``), what a check
without its bounded thread would cost. Each run times ``--checks`` calls of each; the figure is the median over
``--runs`` of each run's mean per call, and the ratio check / bare read.

The check's share of a batch is its cost over a batch's duration: against the 0.77 s of a later batch of the
bundled ETL job measured in BENCHMARKS.md ("Where a warm upgrade's downtime goes"), printed as a share.

``--smoke`` (CI): 1 run of 20 checks each; the same figure lines; JSON to a temp dir.
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import add_smoke_argument, smoke_results  # noqa: E402

#: A later batch of the bundled ETL job (BENCHMARKS.md, "Where a warm upgrade's downtime goes").
BATCH_S = 0.77


def one_run(storage: Any, paths: Any, checks: int, first: str) -> dict[str, float]:
    from airflow_streaming.control import contract
    from spark_jobs.runtime.lease_check import LeaseCheck

    lease = contract.read_lease(storage, paths)
    check = LeaseCheck(storage, paths, lambda: lease, time.monotonic)  # renewed "now": never past half the ttl

    def timed(call: Any) -> float:
        began = time.perf_counter()
        for batch in range(checks):
            call(batch)
        return (time.perf_counter() - began) / checks

    order = [("bare", lambda b: contract.read_lease(storage, paths)), ("check", check.check)]
    if first == "check":
        order.reverse()
    return {name: timed(call) for name, call in order}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--checks", type=int, default=200)
    parser.add_argument("--json", default="bench/results/lease_check.json")
    add_smoke_argument(parser)
    ns = parser.parse_args()
    if ns.smoke:
        ns.runs, ns.checks = 1, 20
        ns.json = str(Path(smoke_results("lease_check")) / "lease_check.json")

    from airflow_streaming.control import contract
    from airflow_streaming.control.local import LocalStorage
    from airflow_streaming.control.webhdfs import WebHdfsStorage
    from airflow_streaming.control.webhdfs_connection import WebHdfsSettings
    from webhdfs_standin import WebHdfsStandIn

    root = tempfile.mkdtemp(prefix="lease-check-bench-")
    standin = WebHdfsStandIn(os.path.join(root, "hdfs")).start()
    try:
        local = (LocalStorage(), contract.ControlPaths(os.path.join(root, "local", "s")))
        remote_storage = WebHdfsStorage(WebHdfsSettings.from_uri(standin.uri))
        remote = (remote_storage, contract.ControlPaths("/control/s"))
        for storage, paths in (local, remote):
            storage.makedirs(paths.root)
            contract.acquire_lease(storage, paths, "run-bench", 120.0)
        results: dict[str, Any] = {}
        for name, (storage, paths) in (("local", local), ("webhdfs", remote)):
            runs = [one_run(storage, paths, ns.checks, "check" if i % 2 else "bare") for i in range(ns.runs)]
            bare = statistics.median(r["bare"] for r in runs)
            check = statistics.median(r["check"] for r in runs)
            results[name] = {"bare_read_ms": round(bare * 1e3, 4), "check_ms": round(check * 1e3, 4),
                             "ratio_check_over_bare": round(check / bare, 3),
                             "share_of_a_batch": round(check / BATCH_S, 6), "raw": runs}
            print(f"{name}: lease check {check * 1e3:.3f} ms per batch (bare read {bare * 1e3:.3f} ms, ratio "
                  f"{check / bare:.2f}); {100 * check / BATCH_S:.3f} % of a {BATCH_S} s batch", flush=True)
    finally:
        standin.stop()
        shutil.rmtree(root, ignore_errors=True)
    doc = {"benchmark": "the per-batch lease check (issue 36)", "config": {"runs": ns.runs, "checks": ns.checks,
                                                                          "batch_s": BATCH_S},
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "loadavg_end": os.getloadavg()}, "results": results}
    Path(ns.json).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.json).write_text(json.dumps(doc, indent=1))
    print(f"wrote {ns.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
