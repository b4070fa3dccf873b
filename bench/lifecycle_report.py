"""The summary, the text report and the consistency checks of ``bench/lifecycle_bench.py`` (managed
stream vs bare spark-submit: medians, ratios, the machine and the configuration)."""

from __future__ import annotations

import statistics
from typing import Any


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


METRICS = [
    # key, label, unit, managed field, bare field
    ("deploy_to_first_progress", "deploy -> first progress", "s", "deploy_to_first_progress_s", "deploy_to_first_progress_s"),
    ("stop", "stop -> driver exit", "s", "stop_s", "stop_s"),
    ("restart_to_first_progress", "restart -> first progress", "s", "restart_to_first_progress_s", "restart_to_first_progress_s"),
]


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for key, label, unit, mf, bf in METRICS:
        m = [r["managed"][mf] for r in runs if r.get("managed", {}).get(mf) is not None]
        b = [r["bare"][bf] for r in runs if r.get("bare", {}).get(bf) is not None]
        summary[key] = {"label": label, "unit": unit, "managed_median": median(m), "bare_median": median(b),
                        "ratio_managed_over_bare": ratio(median(m), median(b)), "managed_raw": m, "bare_raw": b}
    m_all = [ms for r in runs for ms in r.get("managed", {}).get("data_batch_ms", [])]
    b_all = [ms for r in runs for ms in r.get("bare", {}).get("data_batch_ms", [])]
    summary["batch_duration"] = {
        "label": "batchDuration of data batches (status reporter cost)", "unit": "ms",
        "managed_median": median(m_all), "bare_median": median(b_all),
        "ratio_managed_over_bare": ratio(median(m_all), median(b_all)),
        "managed_count": len(m_all), "bare_count": len(b_all),
        "managed_raw": [r.get("managed", {}).get("data_batch_ms", []) for r in runs],
        "bare_raw": [r.get("bare", {}).get("data_batch_ms", []) for r in runs],
    }
    # Steady state: without the first data batch of each driver (JIT, first Parquet write, cold caches).
    steady = lambda side: [  # noqa: E731
        [b[1] for key in ("batches_run1", "batches_run2")
         for b in [x for x in r.get(side, {}).get(key, []) if (x[2] or 0) > 0][1:]]
        for r in runs]
    m_steady, b_steady = steady("managed"), steady("bare")
    m_flat, b_flat = [v for l in m_steady for v in l], [v for l in b_steady for v in l]  # noqa: E741
    summary["batch_duration_steady"] = {
        "label": "batchDuration of data batches, without each driver's first", "unit": "ms",
        "managed_median": median(m_flat), "bare_median": median(b_flat),
        "ratio_managed_over_bare": ratio(median(m_flat), median(b_flat)),
        "managed_count": len(m_flat), "bare_count": len(b_flat), "managed_raw": m_steady, "bare_raw": b_steady,
    }
    extras = {
        "managed_submit_call_s": [r["managed"]["submit_call_s"] for r in runs if "submit_call_s" in r.get("managed", {})],
        "managed_stop_exit_watch_s": [r["managed"].get("stop_exit_watch_s") for r in runs if "stop_s" in r.get("managed", {})],
    }
    summary["managed_submit_call"] = {"label": "managed: time inside hook.submit()", "unit": "s",
                                      "managed_median": median(extras["managed_submit_call_s"]),
                                      "managed_raw": extras["managed_submit_call_s"]}
    watch = [v for v in extras["managed_stop_exit_watch_s"] if v is not None]
    summary["managed_stop_exit_watch"] = {"label": "managed: stop -> exit by 10 ms pid watcher", "unit": "s",
                                          "managed_median": median(watch), "managed_raw": watch}
    return summary


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def render(result: dict[str, Any]) -> str:
    m = result["machine"]
    c = result["config"]
    s = result["summary"]
    out = []
    out.append("=== airflow_streaming lifecycle benchmark: managed events_etl vs bare spark-submit ===")
    out.append(f"machine : nproc={m['nproc']}, RAM {fmt(m['mem_total_gib'])} GiB, CPU {m['cpu_model']}")
    out.append(f"          python {m['python']}")
    out.append(f"          java   {' | '.join(m['java_version'][:2])}")
    out.append(f"          pyspark {m['pyspark']}, {m['platform']}")
    out.append(f"          loadavg start {' '.join(fmt(x) for x in m['loadavg_start'])}"
               f", end {' '.join(fmt(x) for x in result.get('loadavg_end') or [])}")
    out.append(f"config  : runs={c['runs']} (done {len(result['runs'])}), per phase {c['files']} files x "
               f"{c['events_per_file']} events, maxFilesPerTrigger={c['max_files_per_trigger']}, trigger "
               f"{c['trigger_seconds']:g}s, heartbeat {c['heartbeat_seconds']:g}s, master {c['master']}, "
               f"{', '.join(f'{k}={v}' for k, v in c['spark_conf'].items())}, warm-up={c['warmup']}")
    out.append("")
    head = f"{'metric':<44} {'managed':>8} {'bare':>8} {'ratio':>6}  {'managed raw':<24} {'bare raw':<24}"
    out.append(head)
    out.append("-" * len(head))
    for key, *_ in METRICS:
        row = s[key]
        label = f"{row['label']} [{row['unit']}]"
        out.append(f"{label:<44} {fmt(row['managed_median']):>8} {fmt(row['bare_median']):>8} "
                   f"{fmt(row['ratio_managed_over_bare']):>6}  "
                   f"{', '.join(fmt(v) for v in row['managed_raw']):<24} {', '.join(fmt(v) for v in row['bare_raw']):<24}")
    row = s["batch_duration"]
    per_run = lambda lists: ", ".join(f"{fmt(median(l), 0)} (n={len(l)})" for l in lists)  # noqa: E731,E741
    out.append(f"{'batchDuration, data batches [ms]':<44} {fmt(row['managed_median'], 0):>8} "
               f"{fmt(row['bare_median'], 0):>8} {fmt(row['ratio_managed_over_bare']):>6}  "
               f"{per_run(row['managed_raw']):<24} {per_run(row['bare_raw']):<24}")
    row = s["batch_duration_steady"]
    label = "  same, without each driver's 1st batch [ms]"
    out.append(f"{label:<44} {fmt(row['managed_median'], 0):>8} "
               f"{fmt(row['bare_median'], 0):>8} {fmt(row['ratio_managed_over_bare']):>6}  "
               f"{per_run(row['managed_raw']):<24} {per_run(row['bare_raw']):<24}")
    out.append("notes: stop = managed hook.stop() -> exit (StopReport.seconds; graceful, batch boundary) vs bare SIGTERM "
               "-> exit (hard stop); both stopped with the query idle.")
    out.append("       batch raw = per-run median (n = data batches of both phases); the medians are over all data "
               "batches of all runs. ratio = managed / bare.")
    out.append("")
    out.append("managed details (per run):")
    for r in result["runs"]:
        mg = r.get("managed", {})
        if not mg:
            continue
        out.append(
            f"  run {r['run']}: submit() {fmt(mg.get('submit_call_s'))}s / restart submit() "
            f"{fmt(mg.get('restart_submit_call_s'))}s; stop {fmt(mg.get('stop_s'))}s (pid watcher "
            f"{fmt(mg.get('stop_exit_watch_s'))}s) graceful={mg.get('stop_graceful')} killed={mg.get('stop_killed')} "
            f"exit={mg.get('stop_exit_code')} clean={mg.get('stop_position_clean')} "
            f"last_committed={mg.get('stop_last_committed_batch')}; restart first batch "
            f"{mg.get('restart_first_batch_id')} (expected {mg.get('restart_expected_batch_id')}); "
            f"2nd stop {fmt(mg.get('stop_after_restart_s'))}s graceful={mg.get('stop_after_restart_graceful')} "
            f"clean={mg.get('stop_after_restart_clean')}")
    out.append("bare details (per run):")
    for r in result["runs"]:
        b = r.get("bare", {})
        if not b:
            continue
        ck = b.get("checkpoint_after_stop") or {}
        out.append(
            f"  run {r['run']}: SIGTERM exit code {b.get('stop_exit_code')}; checkpoint after SIGTERM clean="
            f"{ck.get('clean')} (planned {ck.get('last_planned_batch')}, committed {ck.get('last_committed_batch')}); "
            f"restart first batch {b.get('restart_first_batch_id')} (expected {b.get('restart_expected_batch_id')}); "
            f"2nd SIGTERM {fmt(b.get('stop_after_restart_s'))}s exit code {b.get('stop_after_restart_exit_code')}")
    if result.get("warmup_first_progress_s") is not None:
        out.append(f"warm-up (bare, unmeasured): first progress after {fmt(result['warmup_first_progress_s'])}s")
    if m.get("foreign_spark_processes_at_start"):
        out.append(f"note: other Spark processes were running at start; waited for quiet before each side: "
                   f"{result.get('waited_for_quiet_s')} s")
    for note in result.get("warnings", []):
        out.append(f"WARNING: {note}")
    if result.get("error"):
        out.append(f"ERROR: the benchmark did not finish: {result['error'].splitlines()[-1]}")
    return "\n".join(out)


def check_consistency(result: dict[str, Any]) -> list[str]:
    warnings = []
    for r in result["runs"]:
        mg, b = r.get("managed", {}), r.get("bare", {})
        if mg and not (mg.get("stop_graceful") and mg.get("stop_position_clean")):
            warnings.append(f"run {r['run']}: managed stop not graceful/clean: {mg.get('stop_report')}")
        if mg and mg.get("restart_first_batch_id") != mg.get("restart_expected_batch_id"):
            warnings.append(f"run {r['run']}: managed restart started at batch {mg.get('restart_first_batch_id')}, "
                            f"expected {mg.get('restart_expected_batch_id')}")
        if mg and not mg.get("recent_progress_complete", True):
            warnings.append(f"run {r['run']}: status.json recent_progress does not cover every batch")
        if b and b.get("restart_first_batch_id") != b.get("restart_expected_batch_id"):
            warnings.append(f"run {r['run']}: bare restart started at batch {b.get('restart_first_batch_id')}, "
                            f"expected {b.get('restart_expected_batch_id')}")
        for side, data in (("managed", mg), ("bare", b)):
            n = len(data.get("data_batch_ms", [])) if data else 0
            expect = 2 * -(-r["files"] // r["max_files_per_trigger"])
            if data and n != expect:
                warnings.append(f"run {r['run']}: {side} had {n} data batches, expected {expect}")
    return warnings
