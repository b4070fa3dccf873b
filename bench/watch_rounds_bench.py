#!/usr/bin/env python
"""The CPU of a thousand streams' health polls and completeness looks, without the triggerer around them.

Usage (from the project root; no Spark, no Airflow services)::

    .venv/bin/python bench/watch_rounds_bench.py [--streams 1000] [--beats 24] [--runs 1] [--json FILE]

``bench/scale_watch_bench.py`` measures the whole triggerer (2,000 triggers on an event loop, the poll rounds'
threads, the garbage collector) while a writer process rewrites every stream's files: the figure the goal is
stated in, but one that moves with the writer's pace (the number of period events in a window) and with
whatever else the machine runs - on a busy day two runs of the same code differ by 2-3 points of a core. This
bench holds the work fixed, to compare two versions of the code: the same synthetic fleet
(``tests/synthetic_fleet.py``: sealed ``deployed.json``, status documents of 20 real-shaped progress reports, a
Spark-shaped checkpoint whose watermark closes a period of ``every:1m`` every 12 batches per stream), and then
``--beats`` rounds of, in order:

1. every stream's driver writes one batch and its status (not timed);
2. every stream's health poll (``poll_verdict``), and every other beat its completeness look (``look``) with the
   cursor written for each period found - as the triggerer's rounds run them (one round memo per stream: the look
   reads the status its health poll decoded). Timed in ``time.process_time``.

Files count as settled at once (``LocalStorage.SETTLED_S`` = 0: in a triggerer the files are seconds old when
read). Printed: the median CPU of a health round (the **baseline**, measured in the same run) and of a health +
look round, the looks' share per look, the events found, and what the same rounds would cost a triggerer as a
share of a core at a 5 s health poll and a 10 s look (rounds only: no event loop, no collector beyond what the
rounds themselves trigger). The median over ``--runs``.

``--smoke`` (CI): 20 streams, 4 beats, 1 run; JSON to a temp dir.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for entry in (str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")):
    if entry not in sys.path:
        sys.path.insert(0, entry)
from harness import add_smoke_argument, smoke_results  # noqa: E402

RULE = {"period": "every:1m"}
HEALTH_POLL_S, LOOK_POLL_S = 5.0, 10.0


def one_run(streams: int, beats: int) -> dict[str, Any]:
    from synthetic_fleet import StandInDrivers, build_fleet

    from airflow_streaming.completeness import parse_rule
    from airflow_streaming.control.local import LocalStorage
    from airflow_streaming.hooks import completeness as watch
    from airflow_streaming.round_memo import set_round_memo
    from airflow_streaming.spec_hooks import hook_for
    try:
        from airflow_streaming.triggers.health import poll_verdict
    except ImportError:  # the code before poll_verdict (an A/B against an older checkout): its poll, as dicts
        from airflow_streaming.triggers.health import poll_once as poll_verdict

    rule = parse_rule(RULE)
    base = tempfile.mkdtemp(prefix="watch-rounds-")
    settled = LocalStorage.SETTLED_S
    LocalStorage.SETTLED_S = 0.0
    try:
        launches = [(f"fleet-{i:04d}", f"{base}/control/fleet-{i:04d}") for i in range(streams)]
        with StandInDrivers(streams, launches=launches) as drivers:
            fleet = build_fleet(base, streams, drivers, watermark_step_ms=60_000 // 12)
            storage = LocalStorage()
            specs = [f.spec.to_dict() for f in fleet]
            state: dict[str, list[Any]] = {s["name"]: [None, None, {}] for s in specs}

            def poll(spec: dict[str, Any], with_look: bool) -> int:
                set_round_memo({})
                try:
                    verdict = poll_verdict(spec)
                    health = verdict["state"] if isinstance(verdict, dict) else verdict.state.value
                    assert health == "HEALTHY", verdict
                    if not with_look:
                        return 0
                    after, seen, memory = state[spec["name"]]
                    hook = hook_for(spec)
                    found = watch.look(hook, rule, after, seen, memory)
                    for event in found.events:
                        watch.write_cursor(hook.storage, watch.cursor_path(hook.paths, rule), rule, event)
                        state[spec["name"]][0] = event.key
                    state[spec["name"]][1] = (found.checkpoint, found.newest_commit)
                    return len(found.events)
                finally:
                    set_round_memo(None)

            for stream in fleet:  # heartbeats fresh again after a slow build (a busy machine: 30-70 s)
                stream.beat(storage)
            for spec in specs:  # the first look lists and reads everything: not what a running watch does
                poll(spec, True)
            health, combined, events = [], [], 0
            for beat in range(beats):
                for stream in fleet:
                    stream.beat(storage)
                with_look = beat % 2 == 1
                started = time.process_time()
                for spec in specs:
                    events += poll(spec, with_look)
                (combined if with_look else health).append(time.process_time() - started)
    finally:
        LocalStorage.SETTLED_S = settled
        shutil.rmtree(base, ignore_errors=True)
    h, c = statistics.median(health), statistics.median(combined)
    return {"health_round_s": h, "health_look_round_s": c, "events": events,
            "look_us": (c - h) / streams * 1e6, "health_us": h / streams * 1e6,
            "health_pct_of_core": h / HEALTH_POLL_S * 100,
            "combined_pct_of_core": (h + c) / LOOK_POLL_S * 100}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--beats", type=int, default=24)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", help="write the results here")
    add_smoke_argument(parser)
    args = parser.parse_args()
    if args.smoke:
        args.streams, args.beats, args.runs = 20, 4, 1
        args.json = args.json or f"{smoke_results('watch_rounds')}/watch_rounds.json"
    runs = [one_run(args.streams, args.beats) for _ in range(args.runs)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"health round x{args.streams} (baseline): {med['health_round_s'] * 1e3:.1f} ms CPU "
          f"({med['health_us']:.0f} us a poll); health + look round: {med['health_look_round_s'] * 1e3:.1f} ms "
          f"(ratio {med['health_look_round_s'] / med['health_round_s']:.2f}; {med['look_us']:.0f} us a look); "
          f"{int(med['events'])} period events", flush=True)
    print(f"as a triggerer's rounds at a {HEALTH_POLL_S:.0f} s health poll and a {LOOK_POLL_S:.0f} s look: "
          f"health {med['health_pct_of_core']:.2f} % of a core, both {med['combined_pct_of_core']:.2f} %", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({
            "meta": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "streams": args.streams, "beats": args.beats,
                     "runs": args.runs, "rule": RULE, "python": platform.python_version(), "smoke": args.smoke},
            "runs": runs, "median": med}, indent=1))
        print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
