#!/usr/bin/env python
"""Asset event latency (issue 37): a period closed in the sink -> the downstream DAG run queued, on a real Airflow.

Usage (from the project root; no Spark)::

    .venv/bin/python bench/asset_event_latency_bench.py [--polls 2,10] [--runs 3] [--periods 6] \
        [--json bench/results/asset_event_latency.json]
    .venv/bin/python bench/asset_event_latency_bench.py --smoke   # 2 s poll, two periods, results in a temp dir

What runs: ``tests/airflow_stack.py``'s real Airflow (PostgreSQL, api-server, scheduler with the
LocalExecutor, dag-processor, triggerer), as ``tests/integration/test_asset_completeness.py`` starts it,
once for the whole bench. Its DAGs folder holds, per poll interval P of ``--polls``, a DAG
``latency_poll<P>`` scheduled on an Asset whose ``AssetWatcher`` runs
:class:`~airflow_streaming.triggers.completeness.SparkStreamCompletenessTrigger` (rule ``every:1m``,
``poll_interval`` P, the default ``persist_delay``) on a stream of its own, and a DAG
``latency_baseline`` scheduled on an Asset with no watcher; each DAG has one ``EmptyOperator`` task.

The streams are ``tests/synthetic_fleet.py``'s (no JVM): this process plays their drivers and writes
each one's checkpoint as Spark writes it (``offsets/<N>`` with ``batchWatermarkMs``, then ``commits/<N>``,
temp file + rename, ``.crc``) and its ``status.json`` with the batch's progress report, one batch every
``--batch-interval`` s (x0.5-1.5 jitter). The watermark advances a ``--batches-per-period``-th of a
minute per batch, so a period of ``every:1m`` closes every ``--batches-per-period`` batches; the cursors
start at the newest period closed (a watcher that has been running). Before each closing batch the
writer waits a random 0-P s, so the commit falls at any phase of the trigger's poll.

Measured, per period: the commit file of the batch that closes it (its mtime) -> the Asset event stored
(its ``timestamp``) -> the downstream DAG run queued (``queued_at`` of the ``dag_run`` row, read from the
metadata database) -> the run started (its ``start_date``). The run's triggering Asset event must carry
the period's ``identity`` (checked through ``/api/v2/dags/<dag>/dagRuns/<run>/upstreamAssetEvents``); a
period with no run within 3P + 60 s is missed. The baseline, in the same run and interleaved (one after
each period): Airflow's own latency for an Asset event that needs no watcher - ``POST
/api/v2/assets/events`` for the baseline DAG's Asset after a random 0-2 s wait (any phase of the
scheduler's loop; request sent -> event stored -> run queued -> started). The next period or event
starts only once the previous run started. ``--runs`` rounds of ``--periods`` periods per poll interval;
figures are the medians of the rounds' medians, and the max over all periods; the ratio completeness /
baseline and the difference (what the watcher adds) use the medians of queued. Every process started
here is stopped by pid (the stack's processes and the stand-in drivers). Without PostgreSQL (or its
Python drivers) it prints ``skipped: <reason>`` and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
for entry in (str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from harness import add_smoke_argument, smoke_results, stop_cleanly_on_sigterm  # noqa: E402

os.environ.setdefault("AIRFLOW__AIRFLOW_STREAMING__CONTROL_SEAL_KEY", "latency-bench-" + os.urandom(8).hex())

RULE = {"period": "every:1m"}
BASELINE_DAG = "latency_baseline"
BASELINE_URI = "bench://latency/baseline"

DAG_FILE = '''
import json
import os

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetWatcher
from airflow_streaming.triggers.completeness import SparkStreamCompletenessTrigger

CONFIG = json.loads(open(os.environ["LATENCY_BENCH_CONFIG"]).read())
START = pendulum.datetime(2026, 1, 1, tz="UTC")

for watched in CONFIG["watched"]:
    spec = watched["spec"]
    asset = Asset(name=watched["dag_id"], uri=f"stream://{spec['name']}/every-1m", watchers=[AssetWatcher(
        name=watched["dag_id"], trigger=SparkStreamCompletenessTrigger(
            spec=spec, rule=CONFIG["rule"], poll_interval=watched["poll"]))])
    with DAG(dag_id=watched["dag_id"], schedule=[asset], start_date=START, catchup=False) as dag:
        EmptyOperator(task_id="report")
    globals()[watched["dag_id"]] = dag

with DAG(dag_id=CONFIG["baseline_dag"], schedule=[Asset(name=CONFIG["baseline_dag"], uri=CONFIG["baseline_uri"])],
         start_date=START, catchup=False) as baseline:
    EmptyOperator(task_id="report")
'''


def log(msg: str) -> None:
    print(f"[asset-latency {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def med(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _epoch(value: Any) -> float | None:
    """A timestamp of the database (aware ``datetime``) or of the API (ISO text) as epoch seconds."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value.timestamp()


class Runs:
    """The ``dag_run`` rows of the metadata database, polled directly (a REST call per poll would load the
    api-server the runs go through)."""

    def __init__(self, port: int, user: str, database: str):
        import psycopg2

        self.conn = psycopg2.connect(host="127.0.0.1", port=port, user=user, dbname=database)
        self.conn.autocommit = True

    def newest_id(self, dag_id: str) -> int:
        with self.conn.cursor() as cur:
            cur.execute("SELECT coalesce(max(id), 0) FROM dag_run WHERE dag_id = %s", (dag_id,))
            return int(cur.fetchone()[0])

    def wait_started(self, dag_id: str, after_id: int, timeout: float) -> dict[str, Any] | None:
        """The first run of ``dag_id`` newer than ``after_id`` once it has started (``None``: none in time)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.conn.cursor() as cur:
                cur.execute("SELECT id, run_id, run_type, queued_at, start_date FROM dag_run WHERE dag_id = %s "
                            "AND id > %s ORDER BY id LIMIT 1", (dag_id, after_id))
                row = cur.fetchone()
            if row and row[4] is not None:
                return {"id": row[0], "run_id": row[1], "run_type": row[2], "queued_at": _epoch(row[3]),
                        "start_date": _epoch(row[4])}
            time.sleep(0.05)
        return None

    def close(self) -> None:
        self.conn.close()


def triggering_events(stack: Any, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    path = f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/upstreamAssetEvents"
    return stack.api("GET", path)["asset_events"]


def sample(start: float, run: dict[str, Any] | None, events: list[dict[str, Any]]) -> dict[str, Any]:
    """Latencies from ``start`` (epoch s) to the event stored, the run queued and the run started."""
    if run is None:
        return {"start": start, "missed": True}
    stored = min((_epoch(e["timestamp"]) for e in events), default=None)
    return {"start": start, "run_id": run["run_id"], "run_type": run["run_type"],
            "to_event_s": round(stored - start, 4) if stored is not None else None,
            "to_queued_s": round(run["queued_at"] - start, 4) if run["queued_at"] is not None else None,
            "to_started_s": round(run["start_date"] - start, 4), "events": len(events)}


def close_period(stream: Any, storage: Any, rule: Any, interval: float, poll: float,
                 rng: random.Random) -> tuple[str, float]:
    """Commit batches until one closes a period of ``rule``; returns its identity and its commit file's mtime.
    The closing batch comes after a random 0-``poll`` s wait (any phase of the trigger's poll)."""
    from scale_watch_bench import _closed_by

    while True:
        before = stream.watermark_ms
        closed = _closed_by(rule, before, before + stream.watermark_step_ms)
        if closed:
            time.sleep(rng.uniform(0, poll))
        stream.beat(storage)
        if closed:
            (identity,) = closed
            commit = os.path.join(stream.spec.checkpoint_location, "commits", str(stream.batch))
            return identity, os.stat(commit).st_mtime
        time.sleep(rng.uniform(0.5, 1.5) * interval)


def measure_period(stack: Any, runs: Runs, stream: Any, storage: Any, rule: Any, dag_id: str, poll: float,
                   args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    after = runs.newest_id(dag_id)
    identity, committed = close_period(stream, storage, rule, args.batch_interval, poll, rng)
    run = runs.wait_started(dag_id, after, 3 * poll + 60)
    events = triggering_events(stack, dag_id, run["run_id"]) if run else []
    result = {**sample(committed, run, events), "identity": identity, "batch": stream.batch}
    got = [e["extra"].get("payload", {}).get("identity") for e in events]
    if run is not None and got != [identity]:
        result["unexpected"] = got
    return result


def measure_baseline(stack: Any, runs: Runs, asset_id: int, n: int, rng: random.Random) -> dict[str, Any]:
    after = runs.newest_id(BASELINE_DAG)
    # Right after the previous run started is right after a pass of the scheduler's loop: a random wait, so
    # that the event falls at any phase of that loop (as a watcher's event does).
    time.sleep(rng.uniform(0, 2))
    sent = time.time()
    resp = stack.api("POST", "/api/v2/assets/events", json_body={"asset_id": asset_id, "extra": {"n": n}}, expect=None)
    if resp.status_code not in (200, 201):
        raise RuntimeError(f"POST /api/v2/assets/events: {resp.status_code} {resp.text[:300]}")
    run = runs.wait_started(BASELINE_DAG, after, 60)
    events = triggering_events(stack, BASELINE_DAG, run["run_id"]) if run else []
    result = sample(sent, run, events)
    if run is not None and [e["extra"].get("n") for e in events] != [n]:
        result["unexpected"] = [e["extra"] for e in events]
    return result


def stats(samples: list[dict[str, Any]], per_run: list[list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {"samples": len(samples), "missed": sum(1 for s in samples if s.get("missed")),
                           "unexpected": sum(1 for s in samples if "unexpected" in s)}
    for key in ("to_event_s", "to_queued_s", "to_started_s"):
        values = [s.get(key) for s in samples if s.get(key) is not None]
        run_medians = [med([s.get(key) for s in run]) for run in per_run]
        out[key] = {"median_of_runs": med(run_medians), "runs": run_medians, "median": med(values),
                    "min": min(values) if values else None, "max": max(values) if values else None}
    return out


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def figure_lines(summary: dict[str, Any]) -> list[str]:
    base = summary["baseline"]
    lines = []
    for s in summary["completeness"].values():
        poll = s["poll_s"]
        lines.append(
            f"completeness @ {poll:g}s poll: commit -> run queued {_fmt(s['to_queued_s']['median_of_runs'])} s median "
            f"(max {_fmt(s['to_queued_s']['max'])}), -> started {_fmt(s['to_started_s']['median_of_runs'])} s median "
            f"(max {_fmt(s['to_started_s']['max'])}), -> event stored {_fmt(s['to_event_s']['median_of_runs'])} s "
            f"median; {s['samples']} periods, {s['missed']} missed, {s['unexpected']} unexpected")
    lines.append(
        f"baseline (REST Asset event, no watcher): post -> run queued {_fmt(base['to_queued_s']['median_of_runs'])} s "
        f"median (max {_fmt(base['to_queued_s']['max'])}), -> started {_fmt(base['to_started_s']['median_of_runs'])} s "
        f"median (max {_fmt(base['to_started_s']['max'])}), -> event stored {_fmt(base['to_event_s']['median_of_runs'])} "
        f"s median; {base['samples']} events, {base['missed']} missed, {base['unexpected']} unexpected")
    for s in summary["completeness"].values():
        lines.append(f"ratio completeness @ {s['poll_s']:g}s poll / baseline (queued): {_fmt(s['ratio_vs_baseline'])}; "
                     f"the watcher adds {_fmt(s['added_s'])} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", default="2,10", help="the triggers' poll intervals, s (one watched stream each)")
    parser.add_argument("--runs", type=int, default=3, help="rounds; each closes --periods periods per poll interval")
    parser.add_argument("--periods", type=int, default=6)
    parser.add_argument("--batches-per-period", type=int, default=4)
    parser.add_argument("--batch-interval", type=float, default=1.0, help="s between batches (x0.5-1.5 jitter)")
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "asset_event_latency.json"))
    add_smoke_argument(parser)  # the 2 s poll only, one round of two periods, results in a temp dir
    args = parser.parse_args(argv)
    polls = [float(p) for p in args.polls.split(",")]
    if args.smoke:
        polls, args.runs, args.periods = [2.0], 1, 2
    from airflow_stack import missing_requirements

    missing = missing_requirements()
    if missing:
        print(f"skipped: {missing}")
        return 0
    stop_cleanly_on_sigterm()
    if args.smoke:
        args.json = os.path.join(smoke_results("asset_event_latency"), "asset_event_latency.json")
    root = Path(tempfile.mkdtemp(prefix="asset-latency-"))
    try:
        return run(root, polls, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)  # the streams, the DAGs, the stack's home and logs


def run(root: Path, polls: list[float], args: argparse.Namespace) -> int:
    from airflow_stack import AirflowStack, StackOptions
    from airflow_streaming.completeness import parse_rule
    from airflow_streaming.control.local import LocalStorage
    from scale_watch_bench import set_cursors
    from synthetic_fleet import StandInDrivers, build_fleet

    rule, storage, rng = parse_rule(RULE), LocalStorage(), random.Random(args.seed)
    started, load_start = datetime.now(timezone.utc), os.getloadavg()
    raw: dict[str, list[list[dict[str, Any]]]] = {f"poll_{p:g}s": [] for p in polls}
    raw["baseline"] = []
    with StandInDrivers(len(polls), prefix="latency") as drivers:
        fleet = build_fleet(root / "fleet", len(polls), drivers, watermark_step_ms=60_000 // args.batches_per_period)
        set_cursors(fleet, rule)
        watched = [{"dag_id": f"latency_poll{p:g}", "poll": p, "spec": s.spec.to_dict()} for p, s in zip(polls, fleet)]
        config = root / "config.json"
        config.write_text(json.dumps({"rule": RULE, "watched": watched, "baseline_dag": BASELINE_DAG,
                                      "baseline_uri": BASELINE_URI}))
        dags = root / "dags"
        dags.mkdir()
        (dags / "latency_dags.py").write_text(DAG_FILE)
        stack = AirflowStack(root / "stack", StackOptions(dags_folder=str(dags),
                                                          env={"LATENCY_BENCH_CONFIG": str(config)}))
        runs: Runs | None = None
        try:
            stack.start()
            for dag_id in [w["dag_id"] for w in watched] + [BASELINE_DAG]:
                stack.wait_for_dag(dag_id)
            assert stack.postgres is not None
            runs = Runs(stack.postgres.port, stack.postgres.user, stack.postgres.database)
            assets = stack.api("GET", f"/api/v2/assets?uri_pattern={quote(BASELINE_URI, safe='')}")["assets"]
            asset_id = next(a["id"] for a in assets if a["uri"] == BASELINE_URI)
            # Warm-up (not measured): each watcher's trigger must be running in the triggerer, each path warm.
            n = 0
            for w, stream in zip(watched, fleet):
                t = time.monotonic()
                after = runs.newest_id(w["dag_id"])
                close_period(stream, storage, rule, args.batch_interval, 0, rng)
                if runs.wait_started(w["dag_id"], after, 300) is None:
                    raise RuntimeError(f"warm-up: no run of {w['dag_id']} in 300 s; triggerer log:\n"
                                       f"{stack.log_tail('triggerer')}\nscheduler log:\n{stack.log_tail('scheduler')}")
                log(f"warm-up: {w['dag_id']} ran after {time.monotonic() - t:.1f}s")
            measure_baseline(stack, runs, asset_id, n, rng)
            for r in range(args.runs):
                for key in raw:
                    raw[key].append([])
                for w, stream in zip(watched, fleet):
                    key = f"poll_{w['poll']:g}s"
                    for _ in range(args.periods):
                        got = measure_period(stack, runs, stream, storage, rule, w["dag_id"], w["poll"], args, rng)
                        raw[key][-1].append(got)
                        n += 1
                        base = measure_baseline(stack, runs, asset_id, n, rng)
                        raw["baseline"][-1].append(base)
                        log(f"run {r + 1} {key} {got['identity']}: queued {got.get('to_queued_s')} s, started "
                            f"{got.get('to_started_s')} s; baseline queued {base.get('to_queued_s')} s")
        finally:
            if runs is not None:
                runs.close()
            stack.stop()
    baseline = stats([s for run in raw["baseline"] for s in run], raw["baseline"])
    completeness = {}
    for p in polls:
        key = f"poll_{p:g}s"
        s = {"poll_s": p, **stats([x for run in raw[key] for x in run], raw[key])}
        q, bq = s["to_queued_s"]["median_of_runs"], baseline["to_queued_s"]["median_of_runs"]
        s["ratio_vs_baseline"] = q / bq if q is not None and bq else None
        s["added_s"] = q - bq if q is not None and bq is not None else None
        completeness[key] = s
    summary = {"rule": RULE, "batches_per_period": args.batches_per_period, "batch_interval_s": args.batch_interval,
               "persist_delay_s": 2.0, "runs": args.runs, "periods_per_run": args.periods,
               "completeness": completeness, "baseline": baseline}
    meta = {"date": started.isoformat(timespec="seconds"), "end": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "smoke": args.smoke, "nproc": os.cpu_count(), "python": platform.python_version(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(), "stack_timings_s": stack.timings,
            "mem_total_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"meta": meta, "summary": summary, "raw": raw}, indent=1))
    for line in figure_lines(summary):
        print(line)
    print(f"results: {args.json}")
    bad = baseline["missed"] + baseline["unexpected"] + sum(s["missed"] + s["unexpected"] for s in completeness.values())
    if bad:
        print(f"FAILED: {bad} period(s) or event(s) missed or with unexpected triggering events (see the raw figures)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
