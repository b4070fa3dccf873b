"""The summary and the text table of ``bench/health_bench.py`` (medians, ratios against the baseline, net
figures per watched stream and per poll, detection latencies)."""

from __future__ import annotations

import statistics
from typing import Any


def med(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(results: dict[str, list[dict[str, Any]]], streams: int) -> dict[str, Any]:
    base = results["baseline"]
    base_cpu = med([r["cpu_s"] / r["wall_s"] for r in base])
    base_drss = med([r["rss_median_kib"] - r["rss_before_kib"] for r in base])
    summary: dict[str, Any] = {}
    for label, runs in results.items():
        cpu_rate = [r["cpu_s"] / r["wall_s"] for r in runs]
        drss = [r["rss_median_kib"] - r["rss_before_kib"] for r in runs]
        lat = [v for r in runs for v in r.get("latencies", {}).values() if v is not None]
        missed = sum(1 for r in runs for v in r.get("latencies", {}).values() if v is None)
        s: dict[str, Any] = {
            "cpu_cores_median": med(cpu_rate), "cpu_cores_raw": cpu_rate,
            "cpu_ratio_vs_baseline": med(cpu_rate) / base_cpu if base_cpu else None,
            "rss_before_mib_median": med([r["rss_before_kib"] / 1024 for r in runs]),
            "rss_during_mib_median": med([r["rss_median_kib"] / 1024 for r in runs]),
            "rss_during_mib_raw": [r["rss_median_kib"] / 1024 for r in runs],
            "rss_growth_mib_median": med(drss) / 1024, "rss_growth_mib_raw": [d / 1024 for d in drss],
            "rss_ratio_vs_baseline": (med([r["rss_median_kib"] for r in runs])
                                      / med([r["rss_median_kib"] for r in base])),
            "polls_per_s_median": med([r["polls"] / r["wall_s"] for r in runs]),
            "poll_wall_ms_median": med([r["poll_wall_ms_median"] for r in runs]),
            "threads_median": med([r["threads"] for r in runs]),
            "writer_cycle_s_median": med([r["writer"]["cycle_s_median"] for r in runs]),
            "writer_cycle_s_max": max((r["writer"]["cycle_s_max"] or 0) for r in runs),
            "unexpected_events": sum(r["events_before_flips"] for r in runs),
        }
        if label != "baseline":
            n = runs[0]["streams"]
            net_cpu = [c - base_cpu for c in cpu_rate]
            s.update({
                "net_cpu_s_per_stream_per_min_median": med(net_cpu) * 60 / n,
                "net_cpu_s_per_stream_per_min_raw": [c * 60 / n for c in net_cpu],
                "net_cpu_pct_per_stream_median": med(net_cpu) * 100 / n,
                "net_rss_kib_per_stream_median": (med(drss) - base_drss) / n,
                "net_rss_kib_per_stream_raw": [(d - base_drss) / n for d in drss],
                "net_cpu_ms_per_poll_median": med([(r["cpu_s"] / r["wall_s"] - base_cpu) / (r["polls"] / r["wall_s"]) * 1000
                                                   for r in runs if r["polls"]]),
                "latency_s_median": med(lat), "latency_s_max": max(lat) if lat else None,
                "latency_s_min": min(lat) if lat else None,
                "latency_s_run_medians": [med(list(r["latencies"].values())) for r in runs],
                "latency_s_all": sorted(lat), "flips_missed": missed,
            })
        summary[label] = s
    return summary


def fmt(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def render(meta: dict[str, Any], summary: dict[str, Any]) -> str:
    m = meta["machine"]
    labels = list(summary)
    out = [f"Health watch benchmark: one asyncio loop (triggerer-like), {meta['streams']} watched streams, "
           f"{meta['runs']} runs per configuration, medians [raw per run]",
           f"machine : nproc={m['nproc']}, CPU {m['cpu_model']}, RAM {m.get('mem_total_gib')} GiB, "
           f"Python {m['python']}, Airflow {m['airflow']}, load at start {m['loadavg_start'][0]:.2f}",
           f"setup   : status.json rewritten ~1/s per stream for all {meta['streams']} streams by a separate writer "
           f"process (20 progress entries, ~{meta['status_bytes'] // 1024} KiB each); measured window "
           f"{meta['measure']:.0f} s after a warm-up of P+{meta['warmup']:g} s; {meta['flips']} flips to FAILED per run", ""]

    def row(name: str, key: str, spec: str = ".3f", raw: str | None = None) -> None:
        cells = []
        for label in labels:
            v = summary[label].get(key)
            cell = fmt(v, spec)
            if raw and summary[label].get(raw) is not None:
                cell += " [" + ", ".join(fmt(x, spec) for x in summary[label][raw]) + "]"
            cells.append(cell)
        out.append(f"| {name} | " + " | ".join(cells) + " |")

    out.append("| metric | " + " | ".join(labels) + " |")
    out.append("|---|" + "---|" * len(labels))
    row("process CPU, cores (CPU s per s)", "cpu_cores_median", ".4f", "cpu_cores_raw")
    row("CPU ratio vs baseline", "cpu_ratio_vs_baseline", ".2f")
    row("net CPU per stream, CPU s per min", "net_cpu_s_per_stream_per_min_median", ".4f",
        "net_cpu_s_per_stream_per_min_raw")
    row("net CPU per stream, % of one core", "net_cpu_pct_per_stream_median", ".4f")
    row("polls per s", "polls_per_s_median", ".1f")
    row("net CPU per poll, ms", "net_cpu_ms_per_poll_median", ".2f")
    row("poll wall time in thread, ms", "poll_wall_ms_median", ".2f")
    row("threads", "threads_median", ".0f")
    row("RSS before triggers, MiB", "rss_before_mib_median", ".1f")
    row("RSS during, MiB", "rss_during_mib_median", ".1f", "rss_during_mib_raw")
    row("RSS ratio vs baseline", "rss_ratio_vs_baseline", ".3f")
    row("RSS growth (during - before), MiB", "rss_growth_mib_median", ".2f", "rss_growth_mib_raw")
    row("net RSS per stream, KiB", "net_rss_kib_per_stream_median", ".1f", "net_rss_kib_per_stream_raw")
    row("detection latency median, s", "latency_s_median", ".2f", "latency_s_run_medians")
    row("detection latency min, s", "latency_s_min", ".2f")
    row("detection latency max, s", "latency_s_max", ".2f")
    row("flips not detected", "flips_missed", "d")
    row("events before flips (must be 0)", "unexpected_events", "d")
    row("writer: s per full rewrite cycle, median", "writer_cycle_s_median", ".2f")
    row("writer: s per full rewrite cycle, max", "writer_cycle_s_max", ".2f")
    out.append("")
    out.append("net = (configuration - baseline median) / streams. Latency median/min/max over all flips of all runs "
               "pooled; raw = per-run medians.")
    for label in labels:
        if "latency_s_all" in summary[label]:
            out.append(f"latencies {label} (s, sorted): " + ", ".join(f"{x:.2f}" for x in summary[label]["latency_s_all"]))
    return "\n".join(out) + "\n"
