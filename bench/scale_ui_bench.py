#!/usr/bin/env python
"""The Streams page with a thousand streams (issue 23, goal 3), in a real browser against a real Airflow.

Usage (from the project root; no Spark)::

    .venv/bin/python bench/scale_ui_bench.py [--streams 1000] [--loads 5] [--json bench/results/scale_ui.json]
    .venv/bin/python bench/scale_ui_bench.py --smoke     # 30 streams, one load, results in a temp dir

What runs: ``tests/airflow_stack.py``'s real ``airflow api-server`` (PostgreSQL, simple auth manager; no
scheduler: the control files are written directly into a control location the page discovers) and
Debian's chromium through Playwright, as ``tests/integration/test_ui_escaping.py`` does. The streams are
``tests/synthetic_fleet.py``'s (live stand-in driver processes, real control files; every 10th FAILED,
every 3rd with a supervisor ledger, versions v1/v2/v3); a writer thread in this process rewrites their
``status.json`` once per heartbeat (5 s), as their drivers would, during the whole measurement.

Measured, after logging in: the page load (``goto`` of ``/streaming/ui/`` until the first page of rows is
in the DOM), cold (first request of the api-server process) and warm (``--loads`` more, median); the API
time the page's request took on the server (``took_ms``); and how long a search, a health filter and the
next page take until the table shows their result. The baseline, in the same run, is the same page with
``--baseline-streams`` (30) streams: the ratio says what a thousand streams add. Every process started
here is stopped by pid.
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
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for entry in (str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from harness import add_smoke_argument  # noqa: E402
os.environ.setdefault("AIRFLOW__AIRFLOW_STREAMING__CONTROL_SEAL_KEY", "scale-ui-bench-" + os.urandom(8).hex())

TABLE = "table#streams tbody tr"


def log(msg: str) -> None:
    print(f"[scale-ui {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


class Writer(threading.Thread):
    """Rewrites every stream's status.json once per heartbeat (the drivers' reporters)."""

    def __init__(self, fleet: list[Any]):
        super().__init__(daemon=True)
        from airflow_streaming.control.local import LocalStorage

        self.fleet, self.storage, self.stop = fleet, LocalStorage(), threading.Event()

    def run(self) -> None:
        slot = self.fleet[0].spec.heartbeat_interval / len(self.fleet)
        i = 0
        while not self.stop.wait(slot):
            stream = self.fleet[i % len(self.fleet)]
            i += 1
            if stream.doc.state == "RUNNING":
                stream.beat(self.storage)


def measure_page(base_url: str, password: str, browser: Any, loads: int, streams: int) -> dict[str, Any]:
    page = browser.new_page(viewport={"width": 1500, "height": 1200})
    page.set_default_timeout(120_000)
    page.goto(base_url + "/auth/login")
    page.locator("input[name=username]").fill("admin")
    page.locator("input[name=password]").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/auth/login" not in url)
    times = []
    for _ in range(1 + loads):
        t0 = time.perf_counter()
        page.goto(base_url + "/streaming/ui/")
        page.locator(TABLE).first.wait_for()
        times.append(time.perf_counter() - t0)
    rows = page.locator(TABLE).count()
    info = page.locator("#page-info").inner_text()
    took = [page.evaluate("() => fetch(window.STREAMING_ROOT + '/api/streams?').then((r) => r.json())"
                          ".then((d) => d.took_ms)") for _ in range(3)]  # the server's own time for the request

    def timed(action: Any, done: str) -> float:
        t0 = time.perf_counter()
        action()
        page.wait_for_function(done)
        return time.perf_counter() - t0

    search = timed(lambda: page.locator("#stream-search").fill("fleet-00"),
                   "document.querySelector('#page-info').textContent.includes(' of ') && "
                   "[...document.querySelectorAll('table#streams tbody tr')].every((r) => r.dataset.stream.startsWith('fleet-00'))")
    page.locator("#stream-search").fill("")
    page.wait_for_function("!document.querySelector('#stream-search').value")
    page.wait_for_timeout(600)
    failed = timed(lambda: page.locator("#filter-health").select_option("FAILED"),
                   "[...document.querySelectorAll('table#streams tbody tr')].every((r) => r.dataset.health === 'FAILED')")
    page.locator("#filter-health").select_option("")
    page.locator("#per-page").select_option("25")
    page.wait_for_function(f"document.querySelectorAll('table#streams tbody tr').length === {min(25, streams)}")
    before = page.locator(TABLE).first.get_attribute("data-stream")
    nxt = None if streams <= 25 else timed(lambda: page.locator("#page-next").click(),
                f"document.querySelector('table#streams')?.dataset.page === '2' && "
                f"document.querySelector('table#streams tbody tr').dataset.stream !== {json.dumps(before)}")
    page.close()
    return {"load_s": times, "cold_load_s": times[0], "warm_load_s_median": med(times[1:]) if loads else None,
            "api_took_ms": took, "rows_on_page": rows, "page_info": info,
            "search_s": search, "filter_s": failed, "next_page_s": nxt}


def run_size(root: Path, streams: int, loads: int, browser: Any) -> dict[str, Any]:
    from airflow_stack import AirflowStack, StackOptions
    from synthetic_fleet import StandInDrivers, build_fleet

    base = root / f"fleet-{streams}"
    with StandInDrivers(min(20, streams), prefix="ui") as drivers:
        t = time.monotonic()
        fleet = build_fleet(base, streams, drivers, failed_every=10, ledger_every=3)
        log(f"{streams} streams built in {time.monotonic() - t:.1f}s")
        writer = Writer(fleet)
        writer.start()
        stack = AirflowStack(root / f"stack-{streams}", StackOptions(services=("api-server",), env={
            "AIRFLOW__AIRFLOW_STREAMING__CONTROL_LOCATIONS": str(base / "control"),
            "AIRFLOW__AIRFLOW_STREAMING__UI_REFRESH_SECONDS": "5"}))
        try:
            stack.start()
            result = measure_page(stack.base_url, stack.passwords["admin"], browser, loads, streams)
        finally:
            writer.stop.set()
            stack.stop()
    result["streams"] = streams
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--baseline-streams", type=int, default=30)
    parser.add_argument("--loads", type=int, default=5, help="warm page loads after the first")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "scale_ui.json"))
    add_smoke_argument(parser)  # 20 (watch) / 30 (page) streams, one short run, results in a temp dir
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="scale-ui-"))
    if args.smoke:
        args.streams, args.baseline_streams, args.loads, args.json = 30, 0, 1, str(root / "scale_ui.json")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    from airflow_stack import missing_requirements

    missing = missing_requirements() or (None if chromium else "no chromium (apt-get install -y chromium)")
    if missing:
        print(f"skipped: {missing}")
        return 0
    from browser import chromium as launch_chromium  # tests/browser.py: the suite's headless chromium

    started = datetime.now(timezone.utc)
    results: dict[str, Any] = {}
    with launch_chromium(chromium) as browser:
        if args.baseline_streams:
            results["baseline"] = run_size(root, args.baseline_streams, args.loads, browser)
        results["fleet"] = run_size(root, args.streams, args.loads, browser)
    fleet, base = results["fleet"], results.get("baseline")
    summary = {"streams": args.streams, "cold_load_s": fleet["cold_load_s"], "warm_load_s_median": fleet["warm_load_s_median"],
               "api_took_ms_median": med(fleet["api_took_ms"]), "search_s": fleet["search_s"],
               "filter_s": fleet["filter_s"], "next_page_s": fleet["next_page_s"]}
    if base:
        summary["baseline_streams"] = args.baseline_streams
        summary["baseline_warm_load_s_median"] = base["warm_load_s_median"]
        summary["warm_load_ratio_vs_baseline"] = (fleet["warm_load_s_median"] / base["warm_load_s_median"]
                                                  if base["warm_load_s_median"] else None)
    meta = {"date": started.isoformat(timespec="seconds"), "smoke": args.smoke, "nproc": os.cpu_count(),
            "python": platform.python_version(), "loadavg_end": os.getloadavg(),
            "mem_total_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"meta": meta, "summary": summary, "results": results}, indent=1))
    print(f"streams page x{args.streams}: load {fleet['cold_load_s']:.2f}s cold, "
          f"{fleet['warm_load_s_median'] or fleet['cold_load_s']:.2f}s warm median (API "
          f"{summary['api_took_ms_median']:.0f} ms); search {fleet['search_s']:.2f}s, health filter "
          f"{fleet['filter_s']:.2f}s, next page {fleet['next_page_s']:.2f}s; {fleet['page_info']}")
    if base:
        print(f"baseline x{args.baseline_streams}: load {base['warm_load_s_median']:.2f}s warm median; "
              f"ratio x{summary['warm_load_ratio_vs_baseline']:.2f}")
    print(f"results: {args.json}")
    shutil.rmtree(root, ignore_errors=True)  # the fleets and stacks; in --smoke also the results (a temp dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
