"""Process hygiene of ``bench/lifecycle_bench.py``: stopping what it started (by process group), and
seeing the Spark processes that are not its own (they would share the 2 cores and skew the figures)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from harness import group_alive, stop_group
import stream_actions  # noqa: E402 - tests/stream_actions.py (harness puts tests/ on the path)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Cleanup:
    """Everything this process started or created, to be stopped/removed whatever happens."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.managed: list[tuple[Any, Any]] = []  # (hook, DriverRecord)
        self.hooks: list[Any] = []
        self.dirs: list[str] = []

    def mkdtemp(self, prefix: str) -> str:
        path = tempfile.mkdtemp(prefix=prefix)
        self.dirs.append(path)
        return path

    def kill_all(self) -> list[str]:
        """Stop every driver still alive; return what had to be stopped."""
        leftovers: list[str] = []
        for proc in self.procs:
            if proc.poll() is None or group_alive(proc.pid):
                leftovers.append(f"bare spark-submit pid {proc.pid}")
                stop_group(proc)
        records = list(self.managed)
        for hook in self.hooks:
            try:
                record = hook.driver_record()
            except Exception:  # noqa: BLE001 - unreadable driver.json: rely on the records we kept
                record = None
            if record is not None:
                records.append((hook, record))
        for hook, record in records:
            if hook.alive(record):
                leftovers.append(f"managed spark-submit pid {record.submit_pid} (run {record.run_id})")
                stream_actions.kill(hook, record, grace=5)
        # Belt and braces: every Popen the local deploy target started in this process.
        try:
            from airflow_streaming.targets import local

            for pid, proc in list(local._CHILDREN.items()):
                if proc.poll() is None:
                    leftovers.append(f"hook child pid {pid}")
                    stop_group(proc)
        except Exception:  # noqa: BLE001
            pass
        return leftovers

    def remove_dirs(self) -> None:
        for path in self.dirs:
            shutil.rmtree(path, ignore_errors=True)


SPARK_MARKERS = ("SparkSubmit", "launch.py", "bare_etl")
OUR_GROUPS: set[int] = set()
"""Process groups of the drivers this benchmark started (spark-submit runs in its own session)."""


def our_groups() -> set[int]:
    groups = set(OUR_GROUPS)
    local_target = sys.modules.get("airflow_streaming.targets.local")
    if local_target is not None:  # drivers the hook has just started (before submit() returned)
        groups.update(getattr(local_target, "_CHILDREN", {}).keys())
    return groups


def spark_processes(foreign_only: bool = False) -> list[str]:
    """``"pid cmdline"`` of SparkSubmit / launch.py / bare_etl processes on the machine (not ours if asked)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            if foreign_only and os.getpgid(int(pid)) in our_groups():
                continue
        except OSError:
            continue
        if any(s in cmd for s in SPARK_MARKERS):
            found.append(f"{pid} {cmd[:160]}")
    return found


class ForeignMonitor:
    """Samples, once a second, Spark processes that are not ours: they would share the 2 cores."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="foreign-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            for entry in spark_processes(foreign_only=True):
                self.seen.setdefault(entry.split(" ", 1)[0], entry)

    def take(self) -> list[str]:
        seen, self.seen = self.seen, {}
        return sorted(seen.values())


def wait_quiet(timeout: float) -> tuple[float, list[str]]:
    """Wait (up to ``timeout`` s) until no foreign Spark process runs; return (seconds waited, still running)."""
    started = time.monotonic()
    announced = False
    while True:
        foreign = spark_processes(foreign_only=True)
        if not foreign or time.monotonic() - started > timeout:
            return time.monotonic() - started, foreign
        if not announced:
            log(f"waiting (up to {timeout:.0f}s) for other Spark processes to finish: "
                + "; ".join(f[:100] for f in foreign))
            announced = True
        time.sleep(2)
