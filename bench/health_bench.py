#!/usr/bin/env python
"""Health-watch benchmark: one triggerer-like process watching 100 streams with ``SparkStreamHealthTrigger``.

Usage (from the project root)::

    .venv/bin/python bench/health_bench.py [--runs 3] [--streams 100] [--measure 30] \
        [--json bench/results/health.json] [--txt bench/results/health.txt]

No Spark is started. The streams are simulated on disk, in a temp dir under $TMPDIR (default /tmp):

- 100 ``StreamSpec`` (application ``events_etl``, trigger 1 s, heartbeat 1 s, absolute temp paths), each
  with a control dir holding a ``driver.json`` (``DriverRecord``, local target) whose handle is one real,
  long-lived child process started here (shared by all streams: pid and start time from
  ``contract.process_start_time``; its command line carries every stream's ``--run-id``), so the liveness
  check of ``SparkStreamHook.health()`` (the local target's pid + start time + run-id identity) reads
  /proc like for a live local driver;
- a ``status.json`` (``StatusDocument``, RUNNING, ready) with 20 progress entries shaped like the real
  Spark 4.2 progress recorded in ``tests/fixtures/status/etl_dag_phase1_running.json``;
- a *writer* process that rewrites every ``status.json`` about once per second through
  ``contract.write_status`` (atomic replace + fsync, like the driver's status reporter): new
  ``heartbeat_at``, one more progress entry (the oldest dropped beyond 20). All 100 are rewritten in
  every configuration, also the 0-stream baseline.

One *configuration* runs in a fresh worker process (clean memory numbers): one asyncio event loop
(like the triggerer's) with N ``SparkStreamHealthTrigger(mode="watch", watch_seconds=3600,
poll_interval=P)`` tasks, each consuming its ``run()`` generator. Trigger starts are spread uniformly
over the first P seconds (a triggerer's sensors defer at different times; with no spread all 100 would
poll in lock-step). Configurations: N=0 (baseline: same loop, same writer, nothing watched), N=100
with P=5 s, N=100 with P=1 s. Each worker:

1. starts the writer (its child: its CPU is not in the worker's numbers), waits until it has written
   all documents, runs one ``poll_once`` (loads lazily imported modules; checks the verdict is HEALTHY);
2. RSS before (``VmRSS``), creates the triggers, warm-up of P + 5 s;
3. measured period (``--measure`` s): process CPU time (``time.process_time``, user+sys of this process)
   and ``VmRSS`` sampled every second (median); ``poll_verdict`` calls are counted through a thin wrapper;
4. detection latency: 10 randomly chosen watched streams are flipped to FAILED (state FAILED, exit
   code 3) by the writer at random times over 5 s; flip time = wall clock right after the atomic
   replace returned in the writer; event time = wall clock when the trigger's ``run()`` yielded its
   TriggerEvent in the worker. Latency = event - flip.

Each configuration is repeated ``--runs`` times (order rotated per run). Reported: medians and raw
values, ratios vs the baseline, net CPU and memory per watched stream ((config - baseline) / N),
latency median and max (all flips of all runs pooled; per-run medians as raw values), the machine.
Every process started here is stopped by its pid / process group, also on errors and on SIGTERM.

``--smoke`` (what CI runs, ``tests/integration/test_bench_smoke.py``): the same three configurations and
report with 10 streams, one run, 3 s measured, 2 flips; JSON and text go to a temp dir, never to
bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = "bench/results/health.json"
DEFAULT_TXT = "bench/results/health.txt"

WATCH_SECONDS = 3600.0
FLIP_SPREAD_SECONDS = 5.0
WARMUP_SECONDS = 5.0  # after the first poll interval

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness import add_smoke_argument, smoke_results, stop_group  # noqa: E402
from health_report import fmt, med, render, summarize  # noqa: E402
from health_writer import HEARTBEAT_SECONDS, TRIGGER_SECONDS, writer_main  # noqa: E402


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def vmrss_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


# =========================================================================== worker (the triggerer)


def worker_main(config_path: str) -> int:
    """One configuration in this fresh process; writes its result JSON to cfg['result_path']."""
    import asyncio
    import gc
    import itertools
    import threading

    from airflow_streaming.triggers import health as trig
    from airflow_streaming.triggers.health import SparkStreamHealthTrigger

    # Modules poll_once imports lazily: imported before the "before" RSS (one-off, not per stream).
    import airflow_streaming.health.thresholds  # noqa: F401
    import airflow_streaming.health.verdict  # noqa: F401
    import airflow_streaming.hooks.streaming_job  # noqa: F401
    import airflow_streaming.spec  # noqa: F401

    cfg = json.loads(Path(config_path).read_text())
    specs = json.loads(Path(cfg["specs_path"]).read_text())
    n, poll, flips_wanted = cfg["streams"], cfg["poll_interval"], cfg["flips"]
    warmup, measure = cfg["warmup"], cfg["measure"]
    rng = random.Random(cfg["seed"])

    writer = subprocess.Popen([sys.executable, __file__, "--writer", config_path],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    result: dict[str, Any] = {"streams": n, "poll_interval": poll}
    try:
        line = writer.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"writer did not start (said {line!r}, exit {writer.poll()})")
        check = trig.poll_once(specs[0])
        if check["state"] != "HEALTHY":
            raise RuntimeError(f"simulated stream is not HEALTHY before the run: {check['state']} {check['reasons']}")
        gc.collect()
        rss_before = vmrss_kib()

        calls = itertools.count()
        poll_times: list[tuple[float, float]] = []
        original = trig.poll_verdict

        def counted_poll_verdict(*args: Any) -> Any:
            next(calls)
            t0 = time.perf_counter()
            try:
                return original(*args)
            finally:
                poll_times.append((t0, time.perf_counter() - t0))

        trig.poll_verdict = counted_poll_verdict  # run() looks poll_verdict up in the module at each poll

        async def main() -> dict[str, Any]:
            events: dict[str, tuple[float, dict[str, Any]]] = {}
            flipped: set[str] = set()
            all_detected = asyncio.Event()

            async def consume(trigger: SparkStreamHealthTrigger, delay: float) -> None:
                await asyncio.sleep(delay)
                async for event in trigger.run():
                    name = trigger.spec["name"]
                    events[name] = (time.time(), event.payload)
                    if flipped and flipped <= events.keys():
                        all_detected.set()

            triggers = [SparkStreamHealthTrigger(s, "watch", poll, watch_seconds=WATCH_SECONDS) for s in specs[:n]]
            tasks = [asyncio.create_task(consume(t, rng.uniform(0, poll))) for t in triggers]
            await asyncio.sleep(warmup)

            # ---- measured period
            rss: list[int] = []
            calls0 = next(calls)
            cpu0, wall0 = time.process_time(), time.monotonic()
            pc0 = time.perf_counter()
            end = wall0 + measure
            while True:
                rss.append(vmrss_kib())
                left = end - time.monotonic()
                if left <= 0:
                    break
                await asyncio.sleep(min(1.0, left))
            cpu1, wall1 = time.process_time(), time.monotonic()
            pc1 = time.perf_counter()
            calls1 = next(calls)
            out: dict[str, Any] = {
                "cpu_s": cpu1 - cpu0, "wall_s": wall1 - wall0, "polls": calls1 - calls0 - 1,
                "rss_before_kib": rss_before, "rss_median_kib": statistics.median(rss), "rss_max_kib": max(rss),
                "threads": threading.active_count(), "events_before_flips": len(events),
                "poll_wall_ms_median": (statistics.median(d for t0, d in poll_times if pc0 <= t0 <= pc1) * 1000
                                        if any(pc0 <= t0 <= pc1 for t0, _ in poll_times) else None),
            }
            if events:
                out["unexpected_events"] = {k: v[1].get("status") for k, v in events.items()}

            # ---- detection latency
            flip_sent: dict[str, float] = {}
            if n and flips_wanted:
                candidates = [s["name"] for s in specs[:n] if s["name"] not in events]
                chosen = rng.sample(candidates, min(flips_wanted, len(candidates)))
                offsets = sorted(rng.uniform(0, cfg["flip_spread"]) for _ in chosen)
                flipped.update(chosen)
                start = time.monotonic()
                for name, off in zip(chosen, offsets):
                    await asyncio.sleep(max(0.0, start + off - time.monotonic()))
                    flip_sent[name] = time.time()
                    writer.stdin.write(f"flip {name}\n".encode())
                    writer.stdin.flush()
                try:
                    await asyncio.wait_for(all_detected.wait(), timeout=poll + 15.0)
                except asyncio.TimeoutError:
                    pass
            out["events"] = {k: {"t": t, "status": p.get("status"), "state": (p.get("verdict") or {}).get("state")}
                             for k, (t, p) in events.items()}
            out["flip_sent"] = flip_sent
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return out

        result.update(asyncio.run(main()))
        trig.poll_verdict = original
        if n and not result["polls"]:  # the wrapper no longer sees the trigger's polls: the figures would be wrong
            raise RuntimeError(f"{n} watched streams, no poll counted in {measure:.0f} s: is poll_verdict still "
                               "what SparkStreamHealthTrigger.run calls?")
        stdout, _ = writer.communicate(timeout=30)  # closes the writer's stdin: it reports and exits
        wreport = json.loads(stdout.decode().strip().splitlines()[-1])
        result["writer"] = {k: v for k, v in wreport.items() if k != "flips"}
        flips = wreport["flips"]
        result["latencies"] = {
            name: (result["events"][name]["t"] - t) if name in result["events"] else None for name, t in flips.items()}
        result["flip_states"] = {name: result["events"].get(name, {}).get("state") for name in flips}
        result["ok"] = True
    except Exception:  # noqa: BLE001 - report to the orchestrator
        result["ok"] = False
        result["error"] = traceback.format_exc()
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=10)
    Path(cfg["result_path"]).write_text(json.dumps(result))
    return 0 if result["ok"] else 1


# =========================================================================== orchestrator


def machine_info() -> dict[str, Any]:
    import airflow

    info: dict[str, Any] = {"nproc": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
                            "python": platform.python_version(), "airflow": airflow.__version__,
                            "platform": platform.platform(), "loadavg_start": os.getloadavg()}
    model = None
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info["cpu_model"] = model
    try:
        with open("/proc/meminfo") as fh:
            info["mem_total_gib"] = round(int(fh.readline().split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return info


def simulated_driver_command(run_ids: list[str]) -> list[str]:
    """One long-lived process that stands for the drivers of every stream: a local driver is identified by
    its pid, its start time AND ``--run-id <id>`` on its command line (``airflow_streaming.control.process``),
    so it carries every stream's run id, as each real spark-submit carries its own."""
    command = [sys.executable, "-c", "import time; time.sleep(1800)"]
    for run_id in run_ids:
        command += ["--run-id", run_id]
    return command


def build_streams(base: str, run_ids: list[str], driver_pid: int) -> tuple[str, str]:
    """Specs and driver records of ``len(run_ids)`` streams under ``base``; returns the two JSON paths."""
    from airflow_streaming.control import contract
    from airflow_streaming.control.contract import ControlPaths, DriverRecord
    from airflow_streaming.control.locations import storage_for
    from airflow_streaming.spec import StreamSpec

    start_time = contract.process_start_time(driver_pid)
    if start_time is None:
        raise RuntimeError(f"simulated driver pid {driver_pid} is not alive")
    host = socket.gethostname()
    specs, records = [], {}
    for i, run_id in enumerate(run_ids):
        spec = StreamSpec(name=f"etl-{i:03d}", application="events_etl",
                          checkpoint_location=f"{base}/checkpoints/etl-{i:03d}", control_location=f"{base}/control",
                          master="local[2]", trigger_interval=TRIGGER_SECONDS, heartbeat_interval=HEARTBEAT_SECONDS)
        storage, control_dir = storage_for(spec.control_dir)
        paths = ControlPaths(control_dir)
        record = DriverRecord(
            run_id=run_id, stream=spec.name, version=spec.version, application=spec.application, host=host,
            command=(f"spark-submit --master local[2] --conf spark.ui.showConsoleProgress=false --name {spec.name}:v1 "
                     f"spark_jobs/launch.py --stream {spec.name} --run-id {run_id} --job events_etl"),
            log_path=paths.log(run_id), submitted_at=time.time(), checkpoint_location=spec.checkpoint_location,
            target="local", handle={"pid": driver_pid, "start_time": start_time})
        storage.write_atomic(paths.driver, record.to_json())
        specs.append(spec.to_dict())
        records[spec.name] = json.loads(record.to_json())
    specs_path, records_path = f"{base}/specs.json", f"{base}/records.json"
    Path(specs_path).write_text(json.dumps(specs))
    Path(records_path).write_text(json.dumps(records))
    return specs_path, records_path


def run_config(base: str, label: str, streams: int, poll: float, args: argparse.Namespace, seed: int,
               specs_path: str, records_path: str, procs: list[subprocess.Popen]) -> dict[str, Any]:
    tag = f"{label.replace(' ', '_').replace('=', '')}_{seed}"
    cfg = {"streams": streams, "poll_interval": poll, "flips": args.flips if streams else 0,
           "warmup": poll + args.warmup, "measure": args.measure, "flip_spread": args.flip_spread, "seed": seed,
           "specs_path": specs_path,
           "records_path": records_path, "result_path": f"{base}/result_{tag}.json"}
    cfg_path = f"{base}/config_{tag}.json"
    Path(cfg_path).write_text(json.dumps(cfg))
    budget = cfg["warmup"] + args.measure + args.flip_spread + poll + 15 + 90
    load = os.getloadavg()[0]
    with open(f"{base}/worker_{tag}.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, __file__, "--worker", cfg_path], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=str(ROOT))
        procs.append(proc)
        try:
            proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            log(f"{label}: worker pid {proc.pid} exceeded {budget:.0f}s, stopping it")
        finally:
            stop_group(proc)
            procs.remove(proc)
    try:
        result = json.loads(Path(cfg["result_path"]).read_text())
    except (OSError, ValueError):
        tail = Path(f"{base}/worker_{tag}.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{label}: worker wrote no result; log tail:\n{tail}")
    if not result.get("ok"):
        raise RuntimeError(f"{label}: worker failed:\n{result.get('error')}")
    result["label"], result["seed"], result["loadavg_1m_at_start"] = label, seed, load
    return result


def orchestrate(args: argparse.Namespace) -> int:
    # Like tests/conftest.py: Airflow gets its own throw-away home (removed at the end), no examples.
    own_home = tempfile.mkdtemp(prefix="bench-airflow-home-")
    os.environ["AIRFLOW_HOME"] = own_home
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    base = tempfile.mkdtemp(prefix="health-bench-")
    procs: list[subprocess.Popen] = []

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    started = time.monotonic()
    try:
        mach = machine_info()
        configs = [("baseline", 0, 1.0), (f"{args.streams} streams P=5s", args.streams, 5.0),
                   (f"{args.streams} streams P=1s", args.streams, 1.0)]
        from airflow_streaming.control.contract import new_run_id

        run_ids = [new_run_id() for _ in range(args.streams)]
        driver = subprocess.Popen(simulated_driver_command(run_ids), start_new_session=True)
        procs.append(driver)
        specs_path, records_path = build_streams(base, run_ids, driver.pid)
        log(f"{args.streams} streams under {base}; simulated driver pid {driver.pid}; "
            f"{args.runs} runs x {len(configs)} configurations")
        results: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in configs}
        for run in range(args.runs):
            order = configs[run % len(configs):] + configs[:run % len(configs)]
            for label, streams, poll in order:
                seed = args.seed + 100 * run + int(poll) + streams
                res = run_config(base, label, streams, poll, args, seed, specs_path, records_path, procs)
                results[label].append(res)
                lat = [v for v in res.get("latencies", {}).values() if v is not None]
                log(f"run {run + 1} {label}: CPU {res['cpu_s'] / res['wall_s']:.4f} cores, RSS "
                    f"{res['rss_before_kib'] / 1024:.1f} -> {res['rss_median_kib'] / 1024:.1f} MiB, "
                    f"polls {res['polls']}, latency median {fmt(med(lat), '.2f')} s "
                    f"({len(lat)}/{len(res.get('latencies', {}))} detected), load {res['loadavg_1m_at_start']:.2f}")
        status_bytes = os.path.getsize(f"{base}/control/etl-000/status.json")
        summary = summarize(results, args.streams)
        meta = {"streams": args.streams, "runs": args.runs, "measure": args.measure, "flips": args.flips,
                "status_bytes": status_bytes, "machine": mach, "trigger_interval": TRIGGER_SECONDS,
                "heartbeat_interval": HEARTBEAT_SECONDS, "flip_spread_s": args.flip_spread, "warmup": args.warmup,
                "total_seconds": round(time.monotonic() - started, 1), "loadavg_end": os.getloadavg()}
        text = render(meta, summary)
        print(text, end="")
        for r in (r for runs in results.values() for r in runs):  # keep the JSON readable
            r.pop("events", None)
        payload = {"meta": meta, "summary": summary, "runs": results}
        for path, data in ((args.json, json.dumps(payload, indent=1, default=str) + "\n"), (args.txt, text)):
            if path:
                path = Path(path) if os.path.isabs(path) else ROOT / path
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).write_text(data)
        log(f"done in {time.monotonic() - started:.0f}s; wrote {args.json} and {args.txt}")
        return 0
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc})")
        return 130
    finally:
        for proc in list(procs):
            stop_group(proc)
        shutil.rmtree(own_home, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            log(f"kept {base}")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker_main(sys.argv[2])
    if len(sys.argv) == 3 and sys.argv[1] == "--writer":
        return writer_main(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--measure", type=float, default=30.0, help="measured seconds per configuration run")
    parser.add_argument("--flips", type=int, default=10, help="streams flipped to FAILED per run")
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("--json", default=DEFAULT_JSON)
    parser.add_argument("--txt", default=DEFAULT_TXT)
    parser.add_argument("--warmup", type=float, default=WARMUP_SECONDS, help="warm-up seconds after one poll interval")
    parser.add_argument("--flip-spread", type=float, default=FLIP_SPREAD_SECONDS,
                        help="seconds over which the flips to FAILED are spread")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (status docs, worker logs)")
    add_smoke_argument(parser)
    args = parser.parse_args()
    if args.smoke:  # the three configurations at 10 streams, one run, 3 s measured, 2 flips
        out = smoke_results("health")
        args.runs, args.streams, args.measure, args.flips, args.warmup, args.flip_spread = 1, 10, 3.0, 2, 1.0, 1.0
        args.json, args.txt = f"{out}/health.json", f"{out}/health.txt"
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
