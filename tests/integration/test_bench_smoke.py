"""Benchmarks that cannot rot: every script under bench/ runs in its ``--smoke`` mode here (issue 23).

A smoke run is the benchmark's real code path once at tiny sizes (real Spark where the bench uses Spark):
``python bench/<x>.py --smoke`` as a subprocess in its own process group. It fails on a non-zero exit, a
Python traceback in its output, output without the bench's figure lines (medians, ratios against the
baseline measured in the same run), a file written under bench/results/ (the recorded figures), or a
timeout (the process group gets SIGTERM - every bench then stops what it started - then SIGKILL).
A bench on a real Airflow that finds no PostgreSQL here prints ``skipped: <reason>``, exits 0 and is
skipped (as the real-Airflow tests are). Whatever is left that mentions the test's temp dir (the benches'
temp dirs, and so every driver's command line, are under it through ``TMPDIR``) is killed by pid at the end.

Only the benches that start Spark are marked ``spark``; the two that start none (checkpoint reader,
health watch) run in the session without Spark. The suite's class-data-sharing archive reaches every
Spark JVM through ``SPARK_SUBMIT_OPTS`` (tests/conftest.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
NUMBER = r"-?\d+(?:\.\d+)?"

NOT_BENCHES = {
    "bare_etl.py": "the baseline job that lifecycle_bench and cluster_bench submit (a workload, run by their smokes)",
    "harness.py": "what the benches share (the --smoke option, stopping what they started)",
    "team_job.py": "a team's own stateful script, the workload of `mttr_bench.py`/`upgrade_bench.py --job script` "
                   "(not in their smokes; the same standby path runs in tests/integration/test_own_job.py)",
    "health_writer.py": "health_bench's simulated drivers (run by its smoke)",
    "health_report.py": "health_bench's summary and table (run by its smoke)",
    "lifecycle_processes.py": "lifecycle_bench's process hygiene (run by its smoke)",
    "lifecycle_report.py": "lifecycle_bench's summary and report (run by its smoke)",
}


@dataclass(frozen=True)
class Smoke:
    spark: bool
    timeout: float
    figures: tuple[str, ...]
    """Regular expressions; each must match (re.search, multi-line) somewhere in the output."""


SMOKES = {
    "checkpoint_bench.py": Smoke(False, 180, (
        rf"^\s+20\s+\d+\s+{NUMBER} ms\s+{NUMBER} ms\s+10\s+\d+\s+\d+$",
        rf"^\s+200\s+\d+\s+{NUMBER} ms\s+{NUMBER} ms\s+10\s+\d+\s+\d+$",
    )),
    "connect_bench.py": Smoke(True, 300, (
        rf"^bare start \(spark-submit -> first new commit\)\s+{NUMBER} s$",
        rf"^server cold start \+ query \(no standby\)\s+{NUMBER} s \({NUMBER} x bare\)$",
        rf"^fresh client, running server \(a standby\)\s+{NUMBER} s \({NUMBER} x bare\)$",
        rf"^restart in one session \(upgrade floor\)\s+{NUMBER} s \({NUMBER} x bare\)$",
        rf"^server memory with the query running\s+{NUMBER} MiB$",
    )),
    "health_bench.py": Smoke(False, 240, (
        rf"^\| net CPU per stream, CPU s per min \| - \| {NUMBER} \[{NUMBER}\] \| {NUMBER} \[{NUMBER}\] \|$",
        rf"^\| CPU ratio vs baseline \| 1\.00 \| {NUMBER} \| {NUMBER} \|$",
        rf"^\| net RSS per stream, KiB \| - \| {NUMBER}",
        rf"^\| detection latency median, s \| - \| {NUMBER} \[{NUMBER}\] \| {NUMBER} \[{NUMBER}\] \|$",
        r"^\| flips not detected \| - \| 0 \| 0 \|$",
        r"^\| events before flips \(must be 0\) \| 0 \| 0 \| 0 \|$",
    )),
    "compat_bench.py": Smoke(True, 240, (
        rf"^session start \(baseline\)\s+{NUMBER} s$",
        rf"^check, rules only \(median of 1\)\s+{NUMBER} s$",
        rf"^check with Spark dry run\s+{NUMBER} s$",
        rf"of which the dry run\s+{NUMBER} s\s+\({NUMBER} x a session start\)$",
    )),
    "mttr_bench.py": Smoke(True, 420, (
        rf"^MTTR \(kill -> supervisor redeploy -> first committed batch\): {NUMBER} s$",
        rf"^bare restart \(submit -> first committed batch\):\s+{NUMBER} s$",
        rf"^ratio {NUMBER}; raw ",
        rf"^hot standby failover \(kill -> standby's first committed batch\): {NUMBER} s \(standby prepared in "
        rf"{NUMBER} s\)$",
        rf"^failover ratio {NUMBER} \(goal < 0\.3\)$",
        rf"^hot standby memory while it waits: {NUMBER} MiB resident \(the active driver: {NUMBER} MiB\)$",
    )),
    "lifecycle_bench.py": Smoke(True, 480, (
        rf"^deploy -> first progress \[s\]\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s",
        rf"^stop -> driver exit \[s\]\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s",
        rf"^restart -> first progress \[s\]\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s",
        rf"^batchDuration, data batches \[ms\]\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s",
        r"^  run 1: submit\(\) .* graceful=True .* clean=True .*restart first batch (\d+) \(expected \1\)",
    )),
    "upgrade_bench.py": Smoke(True, 600, (
        rf"^bare restart downtime \(commits/N -> commits/N\+1\): {NUMBER} s  raw \[{NUMBER}\]$",
        r"^run 0: cold upgrade skipped in --smoke \(bench/runtime_bench\.py --smoke runs one\)$",
        rf"^ratio warm upgrade / bare: {NUMBER} \(goal < 0\.2: .*standby prepared in {NUMBER} s",
        rf"^gate inside the prepared driver \(warm start\): {NUMBER} s",
    )),
    "runtime_bench.py": Smoke(True, 600, (
        rf"^build the 3\.5\.7 runtime \(empty cache\)\s+{NUMBER} s$",
        rf"^bare restart on 3\.5\.7 \(baseline\)\s+{NUMBER} s$",
        rf"^runtime upgrade downtime\s+{NUMBER} s \({NUMBER} x the baseline\)$",
        rf"^runtime upgrade gate \(in 4\.\d+\.\d+\)\s+{NUMBER} s$",
    )),
    "worker_slot_bench.py": Smoke(True, 600, (
        rf"^run 1: blocking   upgrade to v2: worker slot {NUMBER} s, triggerer 0\.0 s, 0 deferral\(s\)$",
        rf"^run 1: deferrable upgrade to v1: worker slot {NUMBER} s, triggerer {NUMBER} s, [1-9]\d* deferral\(s\)$",
        rf"^worker-slot seconds per upgrade: blocking {NUMBER} s, deferrable {NUMBER} s \(ratio {NUMBER}\)",
    )),
    "class_archive_bench.py": Smoke(True, 480, (
        rf"^submit_to_first_commit_s: median without {NUMBER} s, with {NUMBER} s, ratio {NUMBER}$",
        rf"^cold_gate_s: median without {NUMBER} s, with {NUMBER} s, ratio {NUMBER}$",
    )),
    "cluster_bench.py": Smoke(True, 600, tuple(
        rf"\] {metric}: provider {NUMBER} bare {NUMBER} ratio {NUMBER}$" for metric in (
            "deploy_to_first_progress_s", "restart_downtime_s", "kill_to_killed_s", "kill_to_python_exit_s"))),
    "namenode_bench.py": Smoke(True, 420, (
        rf"^window 1: NameNode {NUMBER}/s \(driver {NUMBER}, Airflow {NUMBER}\), all {NUMBER}/s",
        r"^stopped: graceful=True",
        rf'"nn_per_s": {NUMBER},$',
        rf'"cpu_ms_median_back_to_back": {NUMBER},$',
        rf'"per_stream_per_s": {NUMBER}$',
    )),
    "hdfs_snapshot_bench.py": Smoke(True, 420, (
        r"^every state store has a \.snapshot \(waited \d+s for maintenance\)$",
        r"^checkpoint at batch \d+ \(graceful=True\)$",
        rf"^take \(8 threads, median of 1\) {NUMBER} s vs 1 thread \(baseline, same run\) {NUMBER} s: {NUMBER}x "
        rf"faster; restore {NUMBER} s; \d+ of \d+ files kept$",
    )),
    # Cross-host failover on a real standalone cluster (issue 36): host B is a UTS namespace.
    "cross_host_bench.py": Smoke(True, 420, (
        rf"^bare restart on host B \(kill -> first new commit\): {NUMBER} s \(resubmitted {NUMBER} s after the kill\)$",
        rf"^hot standby on another host \(kill -> first new commit\): {NUMBER} s \(takeover {NUMBER} s; standby "
        rf"prepared in {NUMBER} s\)$",
        rf"^ratio standby / bare: {NUMBER} \(goal < 0\.3\)$",
        r"^sink holds exactly the fed events in every run: True; raw ",
        r"proof: application_ended$",
    )),
    # Cross-host failover when the driver's whole host is cut off (issue 36): hosts B and C are namespaces; the
    # standby waits out the lease ttl (120 s), so one run takes about 4 minutes.
    "partition_failover_bench.py": Smoke(True, 720, (
        rf"^partition takeover \(cut -> the standby's first new commit\): {NUMBER} s \(lease ttl {NUMBER} s; "
        rf"cut -> the standby's lease {NUMBER} s\)$",
        rf"^bare restart on host C \(kill -> first new commit\): {NUMBER} s \(resubmitted {NUMBER} s after the kill\)$",
        rf"^\(takeover - ttl\) / bare: {NUMBER} \(goal < 0\.3\): (met|not met)$",
        r"^old driver on B stopped itself and never committed after the takeover, sink holds exactly the fed "
        r"events in every run: True; raw ",
    )),
    # The per-batch lease check (no Spark: local files and the WebHDFS stand-in, in one process).
    "committed_read_bench.py": Smoke(False, 120, (
        rf"^full read of 32 batches: {NUMBER} ms CPU with what is kept \(1 files read\), {NUMBER} ms without "
        r"\(65 files read\), ratio ",
        rf"^at {NUMBER} full reads a second \(1,000 streams, a period a minute each\): {NUMBER} % of a core, against ",
    )),
    "lease_check_bench.py": Smoke(False, 120, (
        rf"^local: lease check {NUMBER} ms per batch \(bare read {NUMBER} ms, ratio {NUMBER}\); {NUMBER} % of a ",
        rf"^webhdfs: lease check {NUMBER} ms per batch \(bare read {NUMBER} ms, ratio {NUMBER}\); {NUMBER} % of a ",
    )),
    # A thousand streams (no Spark: synthetic control directories, stand-in driver processes; the UI one
    # starts a real api-server and chromium).
    "scale_watch_bench.py": Smoke(False, 300, (
        rf"^health triggers x\d+ @ {NUMBER}s poll: CPU {NUMBER}% of a core .* detection {NUMBER} polls median",
        rf"^lifecycle triggers x\d+ @ {NUMBER}s poll: CPU {NUMBER}% of a core .* detection {NUMBER} polls median",
        rf"^supervisor pass x\d+ healthy streams: {NUMBER}s median",
        rf"^completeness triggers x\d+ @ {NUMBER}s poll: CPU {NUMBER}% of a core .* completeness event {NUMBER} polls "
        r"median, .* \(\d+ periods seen, 0 missed, 0 unexpected\)",
        rf"^health\+completeness triggers x\d+\+\d+ @ {NUMBER}s poll: CPU {NUMBER}% of a core .* detection {NUMBER} "
        rf"polls median.* completeness event {NUMBER} polls median",
    )),
    "watch_rounds_bench.py": Smoke(False, 180, (
        rf"^health round x\d+ \(baseline\): {NUMBER} ms CPU \({NUMBER} us a poll\); health \+ look round: {NUMBER} ms "
        rf"\(ratio {NUMBER}; {NUMBER} us a look\); \d+ period events$",
        rf"^as a triggerer's rounds at a 5 s health poll and a 10 s look: health {NUMBER} % of a core, both {NUMBER} %$",
    )),
    "scale_ui_bench.py": Smoke(False, 420, (
        rf"^streams page x\d+: load {NUMBER}s cold, {NUMBER}s warm median \(API {NUMBER} ms\); search {NUMBER}s",
    )),
    # Asset event latency (issue 37; no Spark: a synthetic checkpoint, a real Airflow with PostgreSQL).
    "asset_event_latency_bench.py": Smoke(False, 420, (
        rf"^completeness @ {NUMBER}s poll: commit -> run queued {NUMBER} s median \(max {NUMBER}\), -> started "
        rf"{NUMBER} s median \(max {NUMBER}\), -> event stored {NUMBER} s median; [1-9]\d* periods, 0 missed, 0 unexpected$",
        rf"^baseline \(REST Asset event, no watcher\): post -> run queued {NUMBER} s median \(max {NUMBER}\), -> started "
        rf"{NUMBER} s median \(max {NUMBER}\), -> event stored {NUMBER} s median; [1-9]\d* events, 0 missed, 0 unexpected$",
        rf"^ratio completeness @ {NUMBER}s poll / baseline \(queued\): {NUMBER}; the watcher adds {NUMBER} s$",
    )),
}

# Every file under bench/ is either a benchmark with a smoke case or named above as something else.
_UNLISTED = sorted({p.name for p in BENCH.glob("*.py")} - set(SMOKES) - set(NOT_BENCHES))


def test_every_bench_has_a_smoke_run():
    assert not _UNLISTED, (f"bench/{', bench/'.join(_UNLISTED)}: give it a --smoke mode and a case in SMOKES "
                           "(or name it in NOT_BENCHES if it is not a benchmark)")
    for name in SMOKES:
        assert "add_smoke_argument(parser)" in (BENCH / name).read_text(), f"bench/{name} has no --smoke option"
    assert not set(SMOKES) & set(NOT_BENCHES)


def _results_state() -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in RESULTS.iterdir()} if RESULTS.is_dir() else {}


def _kill_leftovers(marker: str) -> list[str]:
    """SIGKILL, by pid, every process whose command line mentions ``marker`` (this test's temp dir)."""
    killed = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] != os.getpid() and marker in " ".join(proc.info["cmdline"] or []):
            try:
                proc.kill()
                killed.append(f"{proc.info['pid']} {' '.join(proc.info['cmdline'])[:120]}")
            except psutil.Error:
                pass
    return killed


def run_smoke(name: str, tmp_path: Path, timeout: float) -> tuple[int | None, str, float]:
    """(exit code or None on timeout, output, seconds) of ``python bench/<name> --smoke``."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(BENCH / name), "--smoke"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        code = None
        os.killpg(proc.pid, signal.SIGTERM)  # the bench stops its drivers, cluster, stand-ins in its finally
        try:
            out, _ = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate(timeout=30)
    finally:
        leftovers = _kill_leftovers(str(tmp_path))
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    text = out.decode("utf-8", "replace")
    if leftovers:
        text += f"\n[test] killed processes the bench left running: {leftovers}\n"
    return code, text, time.monotonic() - started


@pytest.fixture
def short_tmp():
    """The bench's TMPDIR: short, because Unix sockets under it (PostgreSQL's, Chromium's singleton socket)
    must fit in 107 bytes, which pytest's own tmp_path does not leave room for."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="bench-smoke-", dir="/tmp"))
    path.chmod(0o755)  # the PostgreSQL a bench starts runs as the postgres user and must reach its data dir
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("name", [
    pytest.param(name, id=name.removesuffix(".py"), marks=[pytest.mark.spark] if smoke.spark else [])
    for name, smoke in SMOKES.items()])
def test_bench_smoke(name, short_tmp):
    tmp_path = short_tmp
    smoke = SMOKES[name]
    results_before = _results_state()
    code, out, seconds = run_smoke(name, tmp_path, smoke.timeout)
    tail = "\n".join(out.splitlines()[-60:])
    print(f"bench/{name} --smoke: exit {code} in {seconds:.1f}s")
    skipped = re.search(r"^skipped: (.+)$", out, re.MULTILINE)
    if code == 0 and skipped:  # a bench on a real Airflow without PostgreSQL (or chromium) here
        pytest.skip(f"bench/{name} --smoke: {skipped.group(1)}")
    assert code is not None, f"bench/{name} --smoke did not finish within {smoke.timeout:.0f}s; output tail:\n{tail}"
    assert code == 0, f"bench/{name} --smoke exited {code}; output tail:\n{tail}"
    assert "Traceback (most recent call last)" not in out, f"bench/{name} --smoke printed a traceback:\n{out[-6000:]}"
    missing = [f for f in smoke.figures if not re.search(f, out, re.MULTILINE)]
    assert not missing, f"bench/{name} --smoke printed no line matching {missing}; output tail:\n{tail}"
    assert "[test] killed processes" not in out, f"bench/{name} --smoke left processes running:\n{tail}"
    assert _results_state() == results_before, f"bench/{name} --smoke wrote into bench/results/"
