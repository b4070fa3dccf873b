"""What the benchmarks share: the ``--smoke`` option and stopping every process they started. Not a benchmark.

``--smoke`` runs a benchmark once at tiny sizes through its real code path (real Spark where the bench
uses Spark) and prints the same figure lines (medians, ratios against the baseline measured in the same
run), so that a change that breaks a benchmark fails CI: ``tests/integration/test_bench_smoke.py`` runs
every bench this way. A smoke run's figures mean nothing and are never recorded: they go to a temp dir,
never to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

# The benches share a few helpers with the tests (tests/stream_actions.py: acting on a stream the way a
# lifecycle step does, for a bare baseline without the runner's record).
_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
if _TESTS not in sys.path:
    sys.path.append(_TESTS)

SMOKE_HELP = "CI smoke run: tiny sizes, one run, the same code path and figure lines; results to a temp dir"


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.02) -> Any:
    """Poll ``predicate`` every ``interval`` s until it returns something truthy (returned); ``TimeoutError``
    naming ``what`` after ``timeout`` s. The benches poll fast: their figures are timestamps, not waits."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def add_smoke_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)


def smoke_results(name: str) -> str:
    """A fresh temp dir for a smoke run's result files (under ``$TMPDIR``: the CI test points it at its own)."""
    path = tempfile.mkdtemp(prefix=f"{name}-smoke-")
    print(f"smoke run: results go to {path}, not to bench/results/", flush=True)
    return path


def _interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def stop_cleanly_on_sigterm() -> None:
    """SIGTERM/SIGHUP raise ``KeyboardInterrupt``, so that the bench's ``finally`` blocks stop every process
    it started (drivers run in their own sessions: killing the bench's process group does not reach them)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)



def stop_processes_under(root: str) -> list[str]:
    """SIGKILL, by pid, every process whose command line mentions ``root`` (the bench's own fresh temp dir:
    each driver, standby, gate and executor it started carries it in ``--control-dir``/``--checkpoint``);
    returns what was killed. The last line of a bench's cleanup, after its graceful stops and kills."""
    import psutil

    root = os.path.abspath(root)
    killed = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] == os.getpid() or root not in " ".join(proc.info["cmdline"] or []):
            continue
        try:
            proc.kill()
            killed.append(f"pid {proc.info['pid']} {' '.join(proc.info['cmdline'])[:100]}")
        except psutil.Error:
            pass
    if killed:
        print(f"killed {len(killed)} leftover process(es) under {root}: {killed}", file=sys.stderr, flush=True)
    return killed


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group of ``proc`` (started with start_new_session), SIGKILL after ``grace``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None and not group_alive(proc.pid):
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if proc.poll() is not None and not group_alive(proc.pid):
                return
            time.sleep(0.05)
