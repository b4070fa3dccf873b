#!/usr/bin/env python
"""Cost of a checkpoint snapshot and restore on HDFS (copy path), for a real stateful checkpoint.

Usage (from the project root; it starts Spark, so under the Spark lock)::

    flock /tmp/airflow-streaming-spark.lock .venv/bin/python bench/hdfs_snapshot_bench.py [--runs 3] [--batches 40] \
        [--partitions 20] [--json bench/results/hdfs_snapshot.json]

No NameNode can run here: HDFS is the WebHDFS-protocol STAND-IN of the tests (tests/webhdfs_standin.py),
an HTTP server over a local directory on this machine (loopback, no replication, no real disks in the
path): the seconds below are a floor for a real cluster, the request counts are what a NameNode would
serve.

1. The bundled stateful ``device_signals`` job (1-minute windows per device, 30 s watermark, file sink)
   runs with its checkpoint AND its output on the stand-in, ``--partitions`` shuffle partitions (state
   stores), one input file per batch for ``--batches`` batches, Spark's default state maintenance
   (a ``.snapshot`` every 10 deltas, maintenance every 60 s); then, once maintenance has written a
   ``.snapshot`` in every state store (a checkpoint that has run for a while; without it a restart
   reads every delta and the snapshot keeps them all), a graceful stop.
2. ``take_snapshot`` into a fresh directory on the stand-in, ``--runs`` times (copy threads 8), and once
   with 1 copy thread: files, bytes, seconds, NameNode and DataNode requests; what the whole checkpoint
   tree holds, for comparison.
3. ``restore_snapshot`` of one of them, ``--runs`` times (each moves the live checkpoint aside and copies
   the snapshot back).
4. For scale: the local hard-link snapshot of the same checkpoint copied to a local directory.

``--smoke`` (CI): 4 batches, 2 partitions, state maintenance every 2 s with a snapshot every 2 deltas,
one take (8 threads), the 1-thread baseline and one restore; JSON to a temp dir.
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
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests", ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from airflow_streaming.control.locations import storage_for  # noqa: E402
from airflow_streaming.hooks.streaming_job import SparkStreamHook  # noqa: E402
from airflow_streaming.lifecycle.snapshot import restore_snapshot, take_snapshot  # noqa: E402
from airflow_streaming.spec import StreamSpec  # noqa: E402
from harness import add_smoke_argument, smoke_results, stop_cleanly_on_sigterm, stop_processes_under  # noqa: E402
import stream_actions  # noqa: E402 - tests/stream_actions.py (harness puts tests/ on the path)
from signals import DEVICES, START, STEP  # noqa: E402
from spark_jobs.event_generator import generate_events  # noqa: E402
from webhdfs_standin import WebHdfsStandIn  # noqa: E402


def tree_size(root: str) -> tuple[int, int]:
    files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
    return len(files), sum(os.path.getsize(f) for f in files)


def state_stores_without_snapshot(state_root: str) -> list[str]:
    """The state store directories (``state/<op>/<partition>``) that hold no ``.snapshot`` file yet."""
    missing = []
    for op in sorted(os.listdir(state_root)) if os.path.isdir(state_root) else []:
        for part in sorted(os.listdir(os.path.join(state_root, op))):
            store = os.path.join(state_root, op, part)
            if part.isdigit() and not any(f.endswith(".snapshot") for f in os.listdir(store)):
                missing.append(f"{op}/{part}")
    return missing if os.path.isdir(state_root) else ["(no state directory)"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "hdfs_snapshot.json"))
    add_smoke_argument(parser)
    args = parser.parse_args()
    maintenance: dict[str, Any] = {}
    if args.smoke:
        args.runs, args.batches, args.partitions = 1, 4, 2
        args.json = str(Path(smoke_results("hdfs_snapshot")) / "hdfs_snapshot.json")
        maintenance = {"spark.sql.streaming.stateStore.maintenanceInterval": "2s",
                       "spark.sql.streaming.stateStore.minDeltasForSnapshot": 2}
    stop_cleanly_on_sigterm()

    work = Path(tempfile.mkdtemp(prefix="hdfs-snapshot-bench-"))
    nn = WebHdfsStandIn(str(work / "hdfs")).start()
    inp = work / "in"
    spec = StreamSpec.from_dict({
        "name": "signals", "application": "device_signals", "master": "local[2]",
        "control_location": str(work / "control"), "checkpoint_location": f"{nn.uri}/checkpoints/signals",
        "application_args": ["--input", str(inp), "--output", f"{nn.uri}/out/signals", "--window", "1 minute",
                             "--watermark", "30 seconds", "--max-files-per-trigger", "1"],
        "trigger_interval": 1, "heartbeat_interval": 1, "startup_timeout": 300, "stop_timeout": 120,
        "spark_conf": {"spark.sql.shuffle.partitions": args.partitions, "spark.ui.enabled": "false", **maintenance}})
    hook = SparkStreamHook(spec)
    record = None
    result: dict[str, Any] = {"meta": {"runs": args.runs, "batches": args.batches, "partitions": args.partitions,
                                       "namenode": "WebHDFS-protocol stand-in on loopback, not a real NameNode",
                                       "nproc": os.cpu_count(), "loadavg_start": os.getloadavg()}}
    try:
        for i in range(args.batches):
            seq = i * 40
            generate_events(str(inp), count=40, files=1, run="sig", start_seq=seq, devices=DEVICES * 25,
                            event_time_start=START + timedelta(seconds=seq * STEP), event_time_step=STEP,
                            file_start_index=i)
        record = stream_actions.submit(hook)
        hook.wait_until_ready(record, timeout=300)
        deadline = time.monotonic() + 900
        while (hook.batch_position().last_committed or 0) < args.batches - 1 and time.monotonic() < deadline:
            time.sleep(2)
        waited = time.monotonic()
        state_root = nn.local("/checkpoints/signals/state")
        while (missing := state_stores_without_snapshot(state_root)) and time.monotonic() < deadline:
            time.sleep(1)
        if missing:
            raise RuntimeError(f"state maintenance wrote no .snapshot in {missing} within the deadline")
        print(f"every state store has a .snapshot (waited {time.monotonic() - waited:.0f}s for maintenance)",
              flush=True)
        report = stream_actions.stop(hook)
        n = report.position.last_committed
        print(f"checkpoint at batch {n} (graceful={report.graceful})", flush=True)
        storage, _ = storage_for(f"{nn.uri}/x")
        whole = tree_size(nn.local("/checkpoints/signals"))
        sink_whole = tree_size(nn.local("/out/signals/_spark_metadata"))
        location, sink = f"{nn.uri}/checkpoints/signals", f"{nn.uri}/out/signals"

        def snap(target: str, threads: int) -> dict[str, Any]:
            nn.reset()
            t0 = time.perf_counter()
            manifest = take_snapshot(location, target, sink, snapshot_storage=storage, copy_threads=threads)
            seconds = time.perf_counter() - t0
            return {"seconds": round(seconds, 3), "files": manifest.files, "bytes": manifest.bytes,
                    "nn_requests": nn.total("nn"), "dn_requests": nn.total("dn"), "threads": threads}

        takes = [snap(f"/snapshots/s{i}", 8) for i in range(args.runs)]
        kept_checkpoint = tree_size(nn.local("/snapshots/s0/checkpoint"))
        kept_sink = tree_size(nn.local("/snapshots/s0/sink_metadata"))
        state_whole = tree_size(nn.local("/checkpoints/signals/state"))
        state_kept = tree_size(nn.local("/snapshots/s0/checkpoint/state"))
        single = snap("/snapshots/single", 1)
        from airflow_streaming.lifecycle.snapshot import load_manifest

        manifest = load_manifest("/snapshots/s0", storage)
        restores = []
        for i in range(args.runs):
            nn.reset()
            t0 = time.perf_counter()
            restore_snapshot(manifest, f".aside-{i}", snapshot_storage=storage)
            restores.append({"seconds": round(time.perf_counter() - t0, 3), "nn_requests": nn.total("nn"),
                             "dn_requests": nn.total("dn")})
            storage.delete(f"{manifest.snapshot_dir}/restored.json")  # the next call restores again

        local_copy = work / "local-ckpt"
        shutil.copytree(nn.local("/checkpoints/signals.aside-0"), local_copy)
        t0 = time.perf_counter()
        local = take_snapshot(str(local_copy), str(work / "local-snap"))
        local_seconds = time.perf_counter() - t0

        med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
        result.update({
            "batch_id": n,
            "checkpoint_tree": {"files": whole[0], "bytes": whole[1]},
            "sink_log_tree": {"files": sink_whole[0], "bytes": sink_whole[1]},
            "state_tree": {"files": state_whole[0], "bytes": state_whole[1]},
            "kept": {"checkpoint_files": kept_checkpoint[0], "checkpoint_bytes": kept_checkpoint[1],
                     "state_files": state_kept[0], "state_bytes": state_kept[1],
                     "sink_log_files": kept_sink[0], "sink_log_bytes": kept_sink[1]},
            "take": takes, "take_single_thread": single, "restore": restores,
            "median": {"take_seconds": med(takes, "seconds"), "take_files": med(takes, "files"),
                       "take_bytes": med(takes, "bytes"), "take_nn_requests": med(takes, "nn_requests"),
                       "take_dn_requests": med(takes, "dn_requests"), "restore_seconds": med(restores, "seconds"),
                       "restore_nn_requests": med(restores, "nn_requests")},
            "local_hardlink_snapshot": {"seconds": round(local_seconds, 4), "files": local.files, "bytes": local.bytes},
        })
        result["meta"]["loadavg_end"] = os.getloadavg()
        print(json.dumps({k: result[k] for k in ("batch_id", "checkpoint_tree", "sink_log_tree", "state_tree", "kept",
                                                  "median",
                                                  "take_single_thread", "local_hardlink_snapshot")}, indent=1))
        take_s, single_s = result["median"]["take_seconds"], single["seconds"]
        print(f"take (8 threads, median of {args.runs}) {take_s:.3f} s vs 1 thread (baseline, same run) "
              f"{single_s:.3f} s: {single_s / take_s:.2f}x faster; restore {result['median']['restore_seconds']:.3f} s; "
              f"{result['median']['take_files']} of {whole[0]} files kept")
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
        print(f"wrote {args.json}")
        return 0
    finally:
        if record is not None:
            live = hook.driver_record()
            if live is not None and hook.alive(live):
                print(stream_actions.kill(hook, live, grace=5))
        stop_processes_under(str(work))
        nn.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
