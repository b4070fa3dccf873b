#!/usr/bin/env python
"""NameNode load of one watched stream on HDFS, and the Airflow side's CPU per health poll.

Usage (from the project root; it starts Spark, so under the Spark lock)::

    flock /tmp/airflow-streaming-spark.lock .venv/bin/python bench/namenode_bench.py [--runs 3] [--window 120] \
        [--polls 200] [--json bench/results/namenode.json]

No NameNode can run on these machines: the NameNode here is the WebHDFS-protocol STAND-IN of the tests
(``tests/webhdfs_standin.py``), which counts every request per endpoint (NameNode / DataNode) and
operation, and logs the client (User-Agent: the driver's JVM ``Java/...``, the Airflow side's
``python-requests/...``).

What runs, at DEFAULT settings (spec defaults: trigger 5 s, heartbeat 5 s, lease ttl 120 s; the
remote-storage pacing of ``airflow_streaming.control.contract``):

- stand-in A holds the control location; stand-in B holds the checkpoint (so that the control traffic
  is counted alone on A, and Spark's own checkpoint traffic on B);
- one real ``events_etl`` stream (``local[2]``), fed one input file every 5 s, so that every trigger
  runs a batch and reports progress (the busiest case for status writes);
- the Airflow side: ``SparkStreamHealthTrigger``'s ``poll_once`` every 10 s in this process (a new hook
  per poll, as the triggerer does), its CPU measured with ``time.thread_time`` (this thread only: the
  stand-in's threads are not counted).

Per window of ``--window`` seconds (``--runs`` windows after a warm-up): requests per second on A by
client and endpoint, per control file, Spark's requests per batch on B, and the poll CPU. Then
``--polls`` polls of the stopped stream in a row (no driver traffic) for a steadier CPU figure.

``--smoke`` (CI): one window of 15 s after 5 s of warm-up, 20 back-to-back polls; JSON to a temp dir.

"Before" is a model, not a measurement: without this change the driver had no HDFS backend at all.
It multiplies the MEASURED requests per operation (marker check, status write, lease renewal) by the
rates the local-file defaults would have had on HDFS (marker every 1 s, a status write every heartbeat
and every progress event, a lease renewal every heartbeat).

"NameNode operations (RPC equivalent)" estimates what the same work costs a NameNode when the driver
uses ``hdfs://`` RPC: a small file write is create + addBlock + complete (+ rename), a read one
getBlockLocations, every other request one call.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests", ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from airflow_streaming.control import contract  # noqa: E402
from airflow_streaming.hooks.streaming_job import SparkStreamHook  # noqa: E402
from airflow_streaming.spec import StreamSpec  # noqa: E402
from airflow_streaming.triggers.health import poll_once  # noqa: E402
from harness import add_smoke_argument, smoke_results, stop_cleanly_on_sigterm, stop_processes_under  # noqa: E402
import stream_actions  # noqa: E402 - tests/stream_actions.py (harness puts tests/ on the path)
from spark_jobs.event_generator import generate_events  # noqa: E402
from webhdfs_standin import WebHdfsStandIn  # noqa: E402

POLL_SECONDS = 10.0
FEED_SECONDS = 5.0
#: NameNode RPCs per WebHDFS NameNode request, for a driver on hdfs:// (a DataNode request adds none).
RPC_EQUIVALENT = {"CREATE": 3, "OPEN": 1, "RENAME": 1, "DELETE": 1, "GETFILESTATUS": 1, "LISTSTATUS": 1,
                  "MKDIRS": 1}
_TEMP = re.compile(r"^\.(.+)\.[0-9a-f]{32}\.tmp$")


def control_file(path: str) -> str:
    """The control file a request is about (``status.json`` for its temp ``.status.json.<uuid>.tmp``)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    match = _TEMP.match(name)
    return match.group(1) if match else name


def client(entry: Any) -> str:
    agent = entry.headers.get("user-agent", "")
    return "driver" if agent.startswith("Java") else "airflow" if "python-requests" in agent else agent or "?"


def window_figures(log: list[Any], seconds: float) -> dict[str, Any]:
    """Rates of one window from the stand-in's request log."""
    by = Counter()
    for e in log:
        by[(client(e), e.endpoint, e.op, control_file(e.path))] += 1

    def rate(pred: Any) -> float:
        return round(sum(n for k, n in by.items() if pred(*k)) / seconds, 4)

    nn_ops = Counter()
    for (who, endpoint, op, _), n in by.items():
        if endpoint == "nn":
            nn_ops[op] += n
    rpc = sum(RPC_EQUIVALENT.get(op, 1) * n for op, n in nn_ops.items()) / seconds
    files = sorted({k[3] for k in by})
    status_writes = sum(n for (who, ep, op, f), n in by.items() if (who, ep, op, f) == ("driver", "nn", "RENAME",
                                                                                           "status.json"))
    renewals = sum(n for (who, ep, op, f), n in by.items() if (who, ep, op, f) == ("driver", "nn", "RENAME",
                                                                                      "lease.json"))
    marker_checks = sum(n for (who, ep, op, f), n in by.items() if (who, ep, op, f) == ("driver", "nn",
                                                                                        "GETFILESTATUS", "RUNNING"))
    driver_by_file = {f: sum(n for (who, _, _, ff), n in by.items() if who == "driver" and ff == f) for f in files}
    driver_nn_by_file = {f: sum(n for (who, ep, _, ff), n in by.items() if (who, ep, ff) == ("driver", "nn", f))
                         for f in files}
    return {
        "seconds": seconds,
        "nn_per_s": rate(lambda who, ep, op, f: ep == "nn"),
        "dn_per_s": rate(lambda who, ep, op, f: ep == "dn"),
        "total_per_s": rate(lambda who, ep, op, f: True),
        "driver_nn_per_s": rate(lambda who, ep, op, f: who == "driver" and ep == "nn"),
        "airflow_nn_per_s": rate(lambda who, ep, op, f: who == "airflow" and ep == "nn"),
        "driver_total_per_s": rate(lambda who, ep, op, f: who == "driver"),
        "airflow_total_per_s": rate(lambda who, ep, op, f: who == "airflow"),
        "nn_rpc_equivalent_per_s": round(rpc, 4),
        "nn_ops_per_s": {op: round(n / seconds, 4) for op, n in sorted(nn_ops.items())},
        "per_file_per_s": {f: rate(lambda who, ep, op, ff, f=f: ff == f) for f in files},
        "status_writes": status_writes, "lease_renewals": renewals, "marker_checks": marker_checks,
        "driver_requests_by_file": driver_by_file, "driver_nn_by_file": driver_nn_by_file,
        "unknown_clients": sorted({k[0] for k in by if k[0] not in ("driver", "airflow")}),
    }


def before_model(windows: list[dict[str, Any]], trigger: float, heartbeat: float, ttl: float) -> dict[str, Any]:
    """Requests per second the local-file defaults would cost on HDFS, from measured per-operation costs."""
    total = {k: sum(w[k] for w in windows) for k in ("status_writes", "lease_renewals", "marker_checks")}
    old = {"marker_per_s": 1.0 / 1.0, "status_per_s": 1.0 / heartbeat + 1.0 / trigger,
           "renewals_per_s": 1.0 / max(1.0, min(heartbeat, ttl / 6))}
    out: dict[str, Any] = {"old_rates": old}
    for scope in ("nn", "all"):
        req = Counter()
        for w in windows:
            req.update(w["driver_nn_by_file" if scope == "nn" else "driver_requests_by_file"])
        per_status = req["status.json"] / max(1, total["status_writes"])
        per_renewal = (req["lease.json"] + req["lease.json.cas"]) / max(1, total["lease_renewals"])
        per_marker = req["RUNNING"] / max(1, total["marker_checks"])
        driver = old["marker_per_s"] * per_marker + old["status_per_s"] * per_status + \
            old["renewals_per_s"] * per_renewal
        airflow = statistics.median(w["airflow_nn_per_s" if scope == "nn" else "airflow_total_per_s"] for w in windows)
        out[scope] = {"requests_per_marker_check": round(per_marker, 2),
                      "requests_per_status_write": round(per_status, 2),
                      "requests_per_lease_renewal": round(per_renewal, 2), "driver_per_s": round(driver, 3),
                      "airflow_per_s": airflow, "per_stream_per_s": round(driver + airflow, 3)}
    return out


def machine() -> dict[str, Any]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0.0
    try:
        mem = int(Path("/proc/meminfo").read_text().split()[1]) / 1024 / 1024
    except (OSError, ValueError, IndexError):
        pass
    return {"nproc": os.cpu_count(), "cpu_model": model, "mem_total_gib": round(mem, 1),
            "python": platform.python_version(), "platform": platform.platform(), "loadavg": os.getloadavg()}


def timed_poll(spec: dict[str, Any]) -> tuple[float, float, str]:
    """One triggerer poll: (thread CPU seconds, wall seconds, state)."""
    cpu, wall = time.thread_time(), time.perf_counter()
    verdict = poll_once(spec)
    return time.thread_time() - cpu, time.perf_counter() - wall, verdict["state"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="measured windows")
    parser.add_argument("--window", type=float, default=120.0, help="seconds per window")
    parser.add_argument("--warmup", type=float, default=30.0)
    parser.add_argument("--polls", type=int, default=200, help="back-to-back polls of the stopped stream")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "namenode.json"))
    add_smoke_argument(parser)
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.window, args.warmup, args.polls = 1, 15.0, 5.0, 20
        args.json = str(Path(smoke_results("namenode")) / "namenode.json")
    stop_cleanly_on_sigterm()

    work = Path(tempfile.mkdtemp(prefix="namenode-bench-"))
    os.environ["AIRFLOW_STREAMING_LOG_DIR"] = str(work / "driver-logs")
    control_nn = WebHdfsStandIn(str(work / "hdfs-control")).start()
    ckpt_nn = WebHdfsStandIn(str(work / "hdfs-checkpoint")).start()
    spec = StreamSpec.from_dict({
        "name": "etl", "application": "events_etl", "master": "local[2]",
        "control_location": f"{control_nn.uri}/streams", "checkpoint_location": f"{ckpt_nn.uri}/checkpoints/etl",
        "application_args": ["--input", str(work / "in"), "--output", str(work / "out"),
                             "--quarantine", str(work / "q")],
        "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "false"},
        "startup_timeout": 300, "stop_timeout": 120})
    hook = SparkStreamHook(spec)
    stop_feed = threading.Event()
    result: dict[str, Any] = {"meta": {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine(),
        "runs": args.runs, "window_s": args.window, "poll_interval_s": POLL_SECONDS, "feed_every_s": FEED_SECONDS,
        "trigger_s": spec.trigger_interval, "heartbeat_s": spec.heartbeat_interval,
        "effective_status_interval_s": contract.heartbeat_seconds(spec.heartbeat_interval, True),
        "marker_poll_s": contract.REMOTE_MARKER_POLL_SECONDS,
        "lease_renew_s": contract.lease_renew_seconds(spec.heartbeat_interval, 120.0, True),
        "namenode": "WebHDFS-protocol stand-in (tests/webhdfs_standin.py), not a real NameNode"}}
    record = None
    try:
        def feed() -> None:
            i = 0
            while not stop_feed.wait(FEED_SECONDS if i else 0):
                generate_events(str(work / "in"), count=50, files=1, run=f"b{i}", file_start_index=i)
                i += 1

        feeder = threading.Thread(target=feed, name="feeder", daemon=True)
        feeder.start()
        record = stream_actions.submit(hook)
        started = time.monotonic()
        hook.wait_until_ready(record, timeout=300)
        print(f"ready after {time.monotonic() - started:.1f}s (run {record.run_id})", flush=True)
        time.sleep(args.warmup)
        spec_dict = spec.to_dict()
        windows, polls = [], []
        for run in range(args.runs):
            control_nn.reset()
            ckpt_nn.reset()
            doc = hook.status()
            batches_before = doc.totals["batches"] if doc else 0
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.window:
                cpu, wall, state = timed_poll(spec_dict)
                polls.append({"cpu_s": cpu, "wall_s": wall, "state": state})
                time.sleep(max(0.0, POLL_SECONDS - wall))
            seconds = time.monotonic() - t0
            figures = window_figures(list(control_nn.log), seconds)
            doc = hook.status()
            batches = (doc.totals["batches"] if doc else 0) - batches_before
            figures["batches"] = batches
            figures["spark_checkpoint_nn_per_s"] = round(ckpt_nn.total("nn") / seconds, 3)
            figures["spark_checkpoint_requests_per_batch"] = round(ckpt_nn.total() / max(1, batches), 1)
            figures["spark_checkpoint_ops_per_batch"] = {
                f"{endpoint}:{op}": round(n / max(1, batches), 2) for endpoint in ("nn", "dn")
                for op, n in sorted(ckpt_nn.counts(endpoint).items())}
            figures["unsupported"] = control_nn.unsupported + ckpt_nn.unsupported
            windows.append(figures)
            print(f"window {run + 1}: NameNode {figures['nn_per_s']}/s (driver {figures['driver_nn_per_s']}, "
                  f"Airflow {figures['airflow_nn_per_s']}), all {figures['total_per_s']}/s, RPC-eq "
                  f"{figures['nn_rpc_equivalent_per_s']}/s, {batches} batches; Spark checkpoint "
                  f"{figures['spark_checkpoint_requests_per_batch']} req/batch", flush=True)
        stop_feed.set()
        report = stream_actions.stop(hook)
        print(f"stopped: graceful={report.graceful} in {report.seconds:.1f}s", flush=True)

        # Back-to-back polls of the stopped stream: the Airflow side's CPU alone.
        control_nn.reset()
        alone = [timed_poll(spec_dict) for _ in range(args.polls)]
        per_poll_requests = control_nn.total() / max(1, args.polls)

        med = {k: statistics.median(w[k] for w in windows) for k in (
            "nn_per_s", "dn_per_s", "total_per_s", "driver_nn_per_s", "airflow_nn_per_s", "driver_total_per_s",
            "airflow_total_per_s", "nn_rpc_equivalent_per_s", "spark_checkpoint_nn_per_s",
            "spark_checkpoint_requests_per_batch")}
        poll_cpu_running = statistics.median(p["cpu_s"] for p in polls[1:] or polls)
        poll_cpu_alone = statistics.median(c for c, _, _ in alone)
        poll_wall_alone = statistics.median(w for _, w, _ in alone)
        result.update({
            "windows": windows,
            "median": med,
            "before_model": before_model(windows, spec.trigger_interval, spec.heartbeat_interval, 120.0),
            "airflow_poll": {
                "cpu_ms_median_while_running": round(poll_cpu_running * 1000, 2),
                "cpu_ms_median_back_to_back": round(poll_cpu_alone * 1000, 2),
                "wall_ms_median_back_to_back": round(poll_wall_alone * 1000, 2),
                "cpu_ms_p90_back_to_back": round(sorted(c for c, _, _ in alone)[int(0.9 * len(alone))] * 1000, 2),
                "requests_per_poll": round(per_poll_requests, 2),
                "polls_while_running": len(polls), "polls_back_to_back": len(alone),
            },
            "extrapolated_1000_streams": {
                "namenode_requests_per_s": round(1000 * med["nn_per_s"], 0),
                "namenode_rpc_equivalent_per_s": round(1000 * med["nn_rpc_equivalent_per_s"], 0),
                "all_requests_per_s": round(1000 * med["total_per_s"], 0),
                "triggerer_polls_per_s": 1000 / POLL_SECONDS,
                "triggerer_cpu_cores": round(1000 / POLL_SECONDS * max(poll_cpu_running, poll_cpu_alone), 2),
            },
            "stop": report.to_dict(),
        })
        result["meta"]["loadavg_end"] = os.getloadavg()
        target = med["nn_per_s"] <= 1.0
        print(json.dumps({"median": med, "target_met": target, "airflow_poll": result["airflow_poll"],
                          "extrapolated_1000_streams": result["extrapolated_1000_streams"],
                          "before_model": result["before_model"]}, indent=1))
        result["target_nn_per_stream_per_s_met"] = target
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
        print(f"wrote {args.json}")
        return 0
    finally:
        stop_feed.set()
        if record is not None:
            live = hook.driver_record()
            if live is not None and hook.alive(live):
                print(stream_actions.kill(hook, live, grace=5))
        stop_processes_under(str(work))
        control_nn.stop()
        ckpt_nn.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
