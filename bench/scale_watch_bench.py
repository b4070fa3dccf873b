#!/usr/bin/env python
"""A thousand streams (issue 23, goal 3): one triggerer loop watching them, and one supervisor pass over them.

Usage (from the project root; no Spark)::

    .venv/bin/python bench/scale_watch_bench.py [--streams 1000] [--poll 5] [--runs 3] [--measure 30] \
        [--json bench/results/scale_watch.json]
    .venv/bin/python bench/scale_watch_bench.py --smoke      # 20 streams, one short run, results in a temp dir

The streams (``tests/synthetic_fleet.py``): control directories under a temp dir with what a real run
writes through the real writers - sealed ``deployed.json``, ``RUNNING``, ``driver.json`` and
``lease.json`` naming a live local process (``sh -c 'read x' --run-id <id>`` stand-ins for
spark-submit, one per stream, its command line carrying ``--run-id``, ``--stream`` and ``--control-dir``
like a driver's: liveness is checked through /proc like a live local driver's), and a
``status.json`` with 20 Spark-shaped progress entries. This process plays the drivers: it rewrites
every stream's ``status.json`` once per heartbeat (5 s, the spec default; atomic replace + fsync, as the
driver's reporter does), in every configuration, the baseline included. Each stream also has a
checkpoint written as Spark writes it (``metadata``, ``offsets/<N>`` with ``batchWatermarkMs``,
``commits/<N>`` with ``nextBatchWatermarkMs``, ``.crc`` files, temp file + rename, the newest 100 batches
kept): every heartbeat plans and commits one batch per stream, its watermark advancing by one
``--close-every``-th of a minute, so that each stream closes a period of the rule ``every:1m`` once every
``--close-every`` heartbeats (default 12: once a minute per stream, ~17 period closes a second over 1,000
streams at a 5 s heartbeat; far more often than the hourly periods of a real stream).

Each configuration runs in a fresh worker process (its CPU and memory only; the writer is this process):

- ``baseline``: the same asyncio loop, nothing watched;
- ``health``: N ``SparkStreamHealthTrigger(mode="watch")`` with ``poll_interval`` P, each ``run()``
  consumed by a task of ONE event loop (like the triggerer), starts spread over the first P seconds;
- ``lifecycle``: N ``SparkStreamLifecycleTrigger`` waiting on a new version's probation (the longest
  lifecycle wait: a healthy run keeps it waiting), same loop and spread;
- ``completeness``: N ``SparkStreamCompletenessTrigger(rule={"period": "every:1m"})`` (the Asset
  watchers of issue 37) with ``poll_interval`` P and the default ``persist_delay``, same loop and spread;
  their cursors are set before each run to the newest period closed (a watcher that has been running);
- ``health+completeness``: both, 2N triggers in the one loop (what the triggerer carries when every
  stream has a health watch and an Asset watcher);
- ``health+completeness@defaults``: the same with the completeness watchers at their trigger's default
  poll (10 s; the health watches at P), its completeness latency in polls of 10 s;
- ``supervisor``: ``SparkStreamSupervisorOperator.execute`` over the N specs (healthy streams, live
  drivers), timed pass by pass.

Measured per trigger configuration, after a warm-up of P + 5 s: CPU (``time.process_time`` over the
window / wall, i.e. cores), RSS (``VmRSS`` sampled every second, median) against the RSS before the
triggers were created; then ``--flips`` streams are switched to FAILED by the writer at random times over
5 s and the time until the trigger's ``run()`` yields its event is the detection latency (in seconds
and in polls, latency / P). For the completeness watchers, every period a commit closes during the
measurement and the flips' wait (up to 2P + 1 s before its end) is matched with the event the trigger
yields for it (its ``identity``) up to a drain of 4P + 10 s after that wait (a later event, or none, is
missed): the completeness latency is commit written -> event yielded (the cursor's
``persist_delay`` comes after the yield and is not in it); events for no closed period, or twice for one,
are counted as unexpected. Net figures subtract the baseline of the same run. Runs rotate the order.
Every process started here is stopped by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for entry in (str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from harness import add_smoke_argument  # noqa: E402

FLIP_SPREAD_S = 5.0
COMPLETENESS_RULE = {"period": "every:1m"}
TRIGGER_KINDS = ("health", "lifecycle", "completeness", "health+completeness", "health+completeness@defaults")
#: ``health+completeness@defaults``: the completeness watchers at their trigger's own default poll (10 s).
DEFAULTS_KIND = "health+completeness@defaults"
SUPERVISOR_INTERVAL_S = 60.0  # dags/stream_supervisor.py: every minute


def log(msg: str) -> None:
    print(f"[scale-watch {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def vmrss_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def med(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# =========================================================================== worker (the triggerer / the supervisor)


def _triggers(kind: str, specs: list[dict[str, Any]], poll: float) -> list[Any]:
    if kind == "health+completeness":
        return _triggers("health", specs, poll) + _triggers("completeness", specs, poll)
    if kind == DEFAULTS_KIND:
        from airflow_streaming.triggers.completeness import SparkStreamCompletenessTrigger

        return _triggers("health", specs, poll) + [SparkStreamCompletenessTrigger(s, COMPLETENESS_RULE) for s in specs]
    if kind == "completeness":
        from airflow_streaming.triggers.completeness import SparkStreamCompletenessTrigger

        return [SparkStreamCompletenessTrigger(s, COMPLETENESS_RULE, poll_interval=poll) for s in specs]
    if kind == "health":
        from airflow_streaming.triggers.health import SparkStreamHealthTrigger

        return [SparkStreamHealthTrigger(s, "watch", poll, watch_seconds=86400.0) for s in specs]
    from airflow_streaming.lifecycle.waits import PROBATION, Wait
    from airflow_streaming.triggers.lifecycle import SparkStreamLifecycleTrigger

    run_ids = json.loads(Path(os.environ["SCALE_RUN_IDS"]).read_text())
    deadline = time.time() + 86400
    return [SparkStreamLifecycleTrigger(
        Wait(PROBATION, s, run_ids[s["name"]], deadline,
             {"started_at": time.time(), "probation": {"window_s": 86400.0, "min_batches": 10**9}}).to_dict(),
        holders={}, poll_interval=poll) for s in specs]


#: True while a trigger worker measures (a profile of the rounds covers that window only).
MEASURING = [False]


def worker_triggers(cfg: dict[str, Any]) -> dict[str, Any]:
    import asyncio
    import gc
    import threading

    import airflow_streaming.health.verdict  # noqa: F401 - imported before "RSS before": one-off, not per stream
    import airflow_streaming.hooks.streaming_job  # noqa: F401
    import airflow_streaming.lifecycle.record  # noqa: F401
    import airflow_streaming.hooks.completeness  # noqa: F401
    import airflow_streaming.triggers.completeness  # noqa: F401
    from airflow_streaming.triggers.health import poll_once

    specs, kind, poll = cfg["specs"], cfg["kind"], cfg["poll"]
    rng = random.Random(cfg["seed"])
    poll_once(specs[0])  # loads what a poll loads lazily
    gc.collect()
    out: dict[str, Any] = {"rss_before_kib": vmrss_kib()}

    async def main() -> None:
        events: dict[str, float] = {}
        periods: list[tuple[str, str, float]] = out.setdefault("completeness_events", [])

        async def consume(trigger: Any, name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            if type(trigger).__name__ == "SparkStreamCompletenessTrigger":
                async for event in trigger.run():  # every period, for as long as the run lasts
                    periods.append((name, event.payload.get("identity"), time.time()))
            async for event in trigger.run():
                events[name] = time.time()
                out.setdefault("event_payloads", {})[name] = event.payload.get("status")
                return

        triggers = _triggers(kind, specs, poll) if kind != "baseline" else []
        triggers_specs = specs
        tasks = [asyncio.create_task(consume(t, triggers_specs[k % len(specs)]["name"], rng.uniform(0, poll)))
                 for k, t in enumerate(triggers)]
        await asyncio.sleep(cfg["warmup"])
        out["measure_start"] = time.time()
        rss = []
        gc_time = [0.0, 0.0]  # seconds in the garbage collector during the window; when the running one began

        def gc_timer(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                gc_time[1] = time.process_time()
            else:
                gc_time[0] += time.process_time() - gc_time[1]

        gc_before = [g["collections"] for g in gc.get_stats()]
        gc.callbacks.append(gc_timer)
        cpu0, wall0 = time.process_time(), time.monotonic()
        MEASURING[0] = True
        while time.monotonic() - wall0 < cfg["measure"]:
            rss.append(vmrss_kib())
            await asyncio.sleep(min(1.0, cfg["measure"] - (time.monotonic() - wall0)) or 0.01)
        cpu1, wall1 = time.process_time(), time.monotonic()
        MEASURING[0] = False
        gc.callbacks.remove(gc_timer)
        out["gc"] = {"cpu_s": round(gc_time[0], 3),
                     "collections": [g["collections"] - b for g, b in zip(gc.get_stats(), gc_before)]}
        out.update({"cpu_s": cpu1 - cpu0, "wall_s": wall1 - wall0, "rss_median_kib": statistics.median(rss),
                    "threads": threading.active_count(), "events_before_flips": dict(events)})
        # Ask the writer (the parent) to flip streams, then wait for the events.
        sys.stdout.write("measured\n")
        sys.stdout.flush()
        await asyncio.sleep(cfg["flip_spread"] + 2 * poll + 2.0)
        out["events"] = events
        out["end"] = time.time()
        if any(type(t).__name__ == "SparkStreamCompletenessTrigger" for t in triggers):
            # The periods closed up to ``end`` - 2P - 1 s are counted; their events may come later than that on a
            # starved machine (a 2-core CI run with the Spark tests beside: ~5 polls, all then counted as missed
            # although none was lost). Collect for a bounded drain more: an event in it counts, with its
            # latency; one that never comes within it is missed.
            await asyncio.sleep(cfg.get("drain", 0.0))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    return out


def worker_supervisor(cfg: dict[str, Any]) -> dict[str, Any]:
    import logging
    import types

    from airflow_streaming.operators.supervise import SparkStreamSupervisorOperator

    logging.getLogger("airflow_streaming").setLevel(logging.INFO)
    op = SparkStreamSupervisorOperator(task_id="supervise", specs=cfg["specs"])
    ti = types.SimpleNamespace(dag_id="stream_supervisor", task_id="supervise", run_id="scheduled__bench",
                               try_number=1, log_url=None, xcom_push=lambda **kw: None)
    passes = []
    for _ in range(cfg["passes"]):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        results = op.execute({"ti": ti})
        passes.append({"wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0,
                       "actions": sorted({r["action"] for r in results}), "health": sorted({r["health"] for r in results})})
    sys.stdout.write("measured\n")
    sys.stdout.flush()
    return {"passes": passes}


def worker_main(cfg_path: str) -> int:
    cfg = json.loads(Path(cfg_path).read_text())
    try:
        profile_to = os.environ.get("SCALE_WATCH_PROFILE")  # a cProfile of the worker (where its CPU goes)
        if profile_to:
            import cProfile

            import threading

            from airflow_streaming.triggers import poll_rounds

            # The rounds: CPU time of the thread that runs them (not wall time: a read that waits is not CPU).
            profiler, rounds, one_at_a_time = cProfile.Profile(), cProfile.Profile(time.thread_time), threading.Lock()
            run_round = poll_rounds._run_round

            def profiled_round(calls: Any) -> Any:  # the rounds' threads: where the polls' reads and parses run
                if not MEASURING[0]:
                    return run_round(calls)
                with one_at_a_time:
                    return rounds.runcall(run_round, calls)

            poll_rounds._run_round = profiled_round
            result = profiler.runcall(worker_supervisor if cfg["kind"] == "supervisor" else worker_triggers, cfg)
            profiler.dump_stats(f"{profile_to}.{cfg['kind']}")
            rounds.dump_stats(f"{profile_to}.{cfg['kind']}.rounds")
        else:
            result = worker_supervisor(cfg) if cfg["kind"] == "supervisor" else worker_triggers(cfg)
        result["ok"] = True
    except Exception:  # noqa: BLE001 - reported to the orchestrator
        result = {"ok": False, "error": traceback.format_exc()}
    Path(cfg["result_path"]).write_text(json.dumps(result))
    return 0 if result["ok"] else 1


# =========================================================================== orchestrator (and the drivers' writer)


def _closed_by(rule: Any, before_ms: int, after_ms: int) -> list[str]:
    """The identities of the periods of ``rule`` a watermark moving from ``before_ms`` to ``after_ms`` closes."""
    from airflow_streaming.completeness import iso_ms

    closed = []
    end = rule.period_at(after_ms).start
    while end > before_ms:
        start = rule.period_at(end - 1).start
        closed.append(f"{iso_ms(start)}/{iso_ms(end)}")
        end = start
    return closed[::-1]


def set_cursors(fleet: list[Any], rule: Any) -> None:
    """Each stream's completeness cursor at the newest period its checkpoint shows closed, written by the
    product's own writer twice (a watcher that has been running: a two-slot file whose next write goes in
    place; a cursor of the one-document form would make every stream's first write of the run a whole-file
    replace, the path of a cursor left by the code before)."""
    from airflow_streaming.completeness import PeriodEvent, PeriodKey
    from airflow_streaming.control.local import LocalStorage
    from airflow_streaming.hooks.completeness import cursor_path, write_cursor

    storage = LocalStorage()
    for stream in fleet:
        end = rule.period_at(stream.watermark_ms).start
        start = rule.period_at(end - 1).start
        path = cursor_path(stream.paths, rule)
        if os.path.exists(path):
            os.unlink(path)
        event = PeriodEvent(PeriodKey(start, end), rule.period, False, stream.batch, end, 0, None, None)
        for _ in range(2):
            write_cursor(storage, path, rule, event)


def run_config(kind: str, fleet: list[Any], storage: Any, args: argparse.Namespace, base: str, seed: int,
               run_ids_path: str) -> dict[str, Any]:
    from airflow_streaming.completeness import parse_rule

    n = len(fleet)
    rule = parse_rule(COMPLETENESS_RULE)
    closes: dict[tuple[str, str], float] = {}
    tag = f"{kind}_{seed}"
    cfg = {"kind": kind, "specs": [f.spec.to_dict() for f in fleet], "poll": args.poll, "seed": seed,
           "warmup": args.poll + args.warmup, "measure": args.measure, "passes": args.passes,
           "flip_spread": args.flip_spread, "drain": DRAIN_POLLS * completeness_poll(kind, args.poll) + DRAIN_S,
           "result_path": f"{base}/result_{tag}.json"}
    Path(f"{base}/cfg_{tag}.json").write_text(json.dumps(cfg))
    for stream in fleet:  # every run starts from running streams
        if stream.doc.state != "RUNNING":
            stream.doc.state, stream.doc.exit, stream.doc.last_exception = "RUNNING", None, None
            stream.doc.queries[0].active = True
        stream.beat(storage)
    set_cursors(fleet, rule)
    rng = random.Random(seed)
    flips: dict[str, float] = {}
    flipped_at: dict[str, float] = {}
    env = {**os.environ, "SCALE_RUN_IDS": run_ids_path, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    with open(f"{base}/worker_{tag}.log", "wb") as err:
        proc = subprocess.Popen([sys.executable, __file__, "--worker", f"{base}/cfg_{tag}.json"], stdout=subprocess.PIPE,
                                stderr=err, env=env, cwd=str(ROOT))
    try:
        slot = fleet[0].spec.heartbeat_interval / n
        next_t, i, budget = time.monotonic(), 0, time.monotonic() + args.poll * 4 + args.measure + 600
        while proc.poll() is None and time.monotonic() < budget:
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, next_t - time.monotonic()))
            if ready:
                line = proc.stdout.readline()
                if line.strip() == b"measured" and kind not in ("supervisor", "baseline", "completeness") and args.flips:
                    chosen = rng.sample(range(n), min(args.flips, n))
                    start = time.monotonic()
                    flips = {fleet[k].spec.name: start + rng.uniform(0, args.flip_spread) for k in chosen}
                continue
            now = time.monotonic()
            for name, at in list(flips.items()):
                if at <= now and name not in flipped_at:
                    flipped_at[name] = next(f for f in fleet if f.spec.name == name).fail(storage)
            stream = fleet[i % n]
            i += 1
            if stream.spec.name not in flipped_at:
                before, at = stream.watermark_ms, time.time()
                stream.beat(storage)
                for identity in _closed_by(rule, before, stream.watermark_ms):
                    closes[(stream.spec.name, identity)] = at
            next_t += slot
            if next_t < time.monotonic() - 1.0:
                next_t = time.monotonic()  # fell behind: no burst
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    result = json.loads(Path(cfg["result_path"]).read_text())
    if not result.get("ok"):
        raise RuntimeError(f"{kind}: worker failed:\n{result.get('error')}\n"
                           f"{Path(f'{base}/worker_{tag}.log').read_text(errors='replace')[-2000:]}")
    if flipped_at:
        events = result.get("events", {})
        result["latencies_s"] = {name: (events[name] - t) if name in events else None for name, t in flipped_at.items()}
    if "completeness" in kind:
        got: dict[tuple[str, str], float] = {}
        unexpected = 0
        for name, identity, t in result.pop("completeness_events", []):
            if (name, identity) in got or (name, identity) not in closes:
                unexpected += 1
            got.setdefault((name, identity), t)
        last = result["end"] - 2 * completeness_poll(kind, args.poll) - 1.0
        result["completeness_latencies_s"] = [
            (got[key] - t) if key in got else None for key, t in closes.items() if result["measure_start"] <= t <= last]
        result["completeness_unexpected"] = unexpected
        result["completeness_events_total"] = len(got)
    result["kind"], result["streams"] = kind, n
    return result


#: After the window, completeness events are still collected for DRAIN_POLLS polls + DRAIN_S seconds: a later one is
#: missed (the trigger's own persist_delay of 2 s follows each event, so a backlog of k periods takes k x 2 s).
DRAIN_POLLS, DRAIN_S = 4, 10.0


def completeness_poll(kind: str, poll: float) -> float:
    """The completeness watchers' poll interval in a configuration."""
    if kind != DEFAULTS_KIND:
        return poll
    from airflow_streaming.triggers.completeness import SparkStreamCompletenessTrigger

    return SparkStreamCompletenessTrigger({"name": "x"}, COMPLETENESS_RULE).poll_interval


def summarize(runs: dict[str, list[dict[str, Any]]], n: int, poll: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    base_cpu = med([r["cpu_s"] / r["wall_s"] for r in runs["baseline"]])
    base_drss = med([r["rss_median_kib"] - r["rss_before_kib"] for r in runs["baseline"]])
    out["baseline"] = {"cpu_cores_median": base_cpu, "rss_growth_kib_median": base_drss}
    for kind in TRIGGER_KINDS:
        if kind not in runs:
            continue
        rs = runs[kind]
        cpu = [r["cpu_s"] / r["wall_s"] for r in rs]
        drss = [r["rss_median_kib"] - r["rss_before_kib"] for r in rs]
        lat = [v for r in rs for v in (r.get("latencies_s") or {}).values() if v is not None]
        missed = sum(1 for r in rs for v in (r.get("latencies_s") or {}).values() if v is None)
        out[kind] = {
            "cpu_cores_median": med(cpu), "cpu_cores_raw": cpu,
            "cpu_ratio_vs_baseline": med(cpu) / base_cpu if base_cpu else None,
            "net_cpu_pct_of_core_median": (med(cpu) - base_cpu) * 100,
            "net_rss_kib_per_stream_median": (med(drss) - base_drss) / n,
            "net_rss_kib_per_stream_raw": [(d - base_drss) / n for d in drss],
            "threads_median": med([r["threads"] for r in rs]),
            "latency_s_median": med(lat), "latency_s_max": max(lat) if lat else None,
            "latency_polls_median": med(lat) / poll if lat else None,
            "latency_polls_max": max(lat) / poll if lat else None, "flips_detected": len(lat), "flips_missed": missed,
            "unexpected_events": sum(len(r["events_before_flips"]) for r in rs),
            # The garbage collector's share of the window (a triggerer's heap holds Airflow: a full collection
            # walks all of it): its CPU and the collections of each generation, per run.
            "gc_pct_of_cpu_raw": [round(100 * r["gc"]["cpu_s"] / r["cpu_s"], 1) if r.get("gc") and r["cpu_s"] else None
                                  for r in rs],
            "gc_collections_raw": [r["gc"]["collections"] if r.get("gc") else None for r in rs],
        }
        if "completeness" in kind:
            clat = [v for r in rs for v in r["completeness_latencies_s"] if v is not None]
            out[kind].update({
                "completeness_latency_s_median": med(clat), "completeness_latency_s_max": max(clat) if clat else None,
                "completeness_poll_s": completeness_poll(kind, poll),
                "completeness_latency_polls_median": med(clat) / completeness_poll(kind, poll) if clat else None,
                "completeness_latency_polls_max": max(clat) / completeness_poll(kind, poll) if clat else None,
                "completeness_periods_seen": len(clat),
                "completeness_periods_missed": sum(1 for r in rs for v in r["completeness_latencies_s"] if v is None),
                "completeness_unexpected_events": sum(r["completeness_unexpected"] for r in rs)})
    if "supervisor" in runs:
        passes = [p for r in runs["supervisor"] for p in r["passes"]]
        wall = [p["wall_s"] for p in passes]
        out["supervisor"] = {
            "pass_s_median": med(wall), "pass_s_max": max(wall), "pass_s_raw": wall,
            "pass_cpu_s_median": med([p["cpu_s"] for p in passes]),
            "fraction_of_interval_median": med(wall) / SUPERVISOR_INTERVAL_S,
            "ms_per_stream_median": med(wall) * 1000 / n,
            "actions": sorted({a for p in passes for a in p["actions"]}),
            "health": sorted({h for p in passes for h in p["health"]})}
    return out


def figure_lines(summary: dict[str, Any], n: int, poll: float) -> list[str]:
    lines = []
    for kind in TRIGGER_KINDS:
        s = summary.get(kind)
        if s:
            count = f"{n}+{n}" if kind.startswith("health+completeness") else f"{n}"
            if kind == "completeness":
                detection = ""
            else:
                detection = (f"; detection {_fmt(s['latency_polls_median'])} polls median, "
                             f"{_fmt(s['latency_polls_max'])} max ({s['flips_detected']} detected, "
                             f"{s['flips_missed']} missed); unexpected events {s['unexpected_events']}")
            if "completeness" in kind:
                detection += (f"; completeness watchers @ {s['completeness_poll_s']:g}s poll"
                              f"; completeness event {_fmt(s['completeness_latency_polls_median'])} polls median, "
                              f"{_fmt(s['completeness_latency_polls_max'])} max "
                              f"({s['completeness_periods_seen']} periods seen, {s['completeness_periods_missed']} "
                              f"missed, {s['completeness_unexpected_events']} unexpected)")
            lines.append(f"{kind} triggers x{count} @ {poll:g}s poll: CPU {s['cpu_cores_median'] * 100:.1f}% of a core "
                         f"(baseline {summary['baseline']['cpu_cores_median'] * 100:.1f}%, net "
                         f"{s['net_cpu_pct_of_core_median']:.1f}%, x{s['cpu_ratio_vs_baseline'] or 0:.1f} baseline); "
                         f"net RSS {s['net_rss_kib_per_stream_median']:.1f} KiB/stream" + detection)
    s = summary.get("supervisor")
    if s:
        lines.append(f"supervisor pass x{n} healthy streams: {s['pass_s_median']:.2f}s median (max "
                     f"{s['pass_s_max']:.2f}s, {s['fraction_of_interval_median'] * 100:.1f}% of a "
                     f"{SUPERVISOR_INTERVAL_S:.0f}s interval, {s['ms_per_stream_median']:.1f} ms/stream); actions "
                     f"{s['actions']}, health {s['health']}")
    return lines


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--poll", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--measure", type=float, default=30.0)
    parser.add_argument("--flips", type=int, default=20)
    parser.add_argument("--flip-spread", type=float, default=FLIP_SPREAD_S, help="flips spread over this many seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="warm-up after the first poll interval")
    parser.add_argument("--passes", type=int, default=3, help="supervisor passes per run")
    parser.add_argument("--drivers", type=int, default=20, help="unused: one stand-in driver process per stream (kept for old command lines)")
    parser.add_argument("--kinds", default="health,lifecycle,supervisor,completeness,health+completeness")
    parser.add_argument("--close-every", type=int, default=12,
                        help="heartbeats per period closed per stream (the watermark advances 60 s / this a batch)")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "scale_watch.json"))
    add_smoke_argument(parser)  # 20 (watch) / 30 (page) streams, one short run, results in a temp dir
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker)
    base = tempfile.mkdtemp(prefix="scale-watch-")
    if args.smoke:
        args.streams, args.runs, args.measure, args.flips, args.passes, args.drivers = 20, 1, 2.0, 3, 1, 2
        args.flip_spread, args.warmup = 1.0, 1.0
        args.poll = min(args.poll, 1.0)
        args.close_every = 1
        args.json = f"{base}/scale_watch.json"
    from airflow_streaming.control.local import LocalStorage
    from synthetic_fleet import StandInDrivers, build_fleet

    kinds = ["baseline"] + [k for k in args.kinds.split(",") if k]
    started = datetime.now(timezone.utc)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    try:
        # One stand-in per stream, its command line naming its stream and control directory (as a driver's
        # does since issue 35: the local target's liveness check then needs no scan of all processes).
        launches = [(f"fleet-{i:04d}", f"{base}/control/fleet-{i:04d}") for i in range(args.streams)]
        with StandInDrivers(args.streams, prefix="scale", launches=launches) as drivers:
            t = time.monotonic()
            fleet = build_fleet(base, args.streams, drivers, heartbeat_interval=5.0, trigger_interval=5.0,
                                watermark_step_ms=60_000 // args.close_every)
            log(f"{args.streams} streams built in {time.monotonic() - t:.1f}s under {base}")
            run_ids_path = f"{base}/run_ids.json"
            Path(run_ids_path).write_text(json.dumps({f.spec.name: f.doc.run_id for f in fleet}))
            storage = LocalStorage()
            for run in range(args.runs):
                order = kinds[run % len(kinds):] + kinds[:run % len(kinds)]
                for kind in order:
                    log(f"run {run + 1}/{args.runs}: {kind}")
                    runs[kind].append(run_config(kind, fleet, storage, args, base, 1000 * run + len(runs[kind]),
                                                 run_ids_path))
        summary = summarize(runs, args.streams, args.poll)
        meta = {"date": started.isoformat(timespec="seconds"), "streams": args.streams, "poll_s": args.poll,
                "runs": args.runs, "measure_s": args.measure, "flips": args.flips, "smoke": args.smoke,
                "completeness_rule": COMPLETENESS_RULE, "close_every_heartbeats": args.close_every,
                "nproc": os.cpu_count(), "python": platform.python_version(),
                "mem_total_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                "loadavg_end": os.getloadavg()}
        for r in (r for rs in runs.values() for r in rs):
            r.pop("event_payloads", None)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=1, default=str))
        for line in figure_lines(summary, args.streams, args.poll):
            print(line)
        print(f"results: {args.json}")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)  # the fleet; in --smoke also the results (a temp dir)


if __name__ == "__main__":
    sys.exit(main())
