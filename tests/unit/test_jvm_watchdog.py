"""The driver's Python process exits once the JVM that launched it is gone (a cluster manager's kill).

Real processes: a stand-in "JVM" parent (a Python process, since only the parent/child relation
matters) starts the driver-side child exactly as spark-submit's PythonRunner does (with
``PYSPARK_GATEWAY_PORT`` set); the parent is then SIGKILLed, as a standalone worker's kill ends with.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from airflow_streaming.control.contract import EXIT_JVM_GONE

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from spark_jobs.runtime.jvm_watchdog import exit_when_jvm_is_gone
    watching = exit_when_jvm_is_gone(poll_seconds=0.05)
    print("watching" if watching else "not watching", flush=True)
    time.sleep(120)
""")

PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    env = dict(os.environ)
    if {gateway!r}:
        env["PYSPARK_GATEWAY_PORT"] = "45678"
    else:
        env.pop("PYSPARK_GATEWAY_PORT", None)
    child = subprocess.Popen([sys.executable, "-c", {child!r}], env=env, stdout=open({out!r}, "w"),
                             stderr=subprocess.STDOUT, start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(120)
""")


def _start(tmp_path: Path, gateway: bool) -> tuple[subprocess.Popen, psutil.Process, Path]:
    out = tmp_path / "child.out"
    code = PARENT.format(gateway=gateway, child=CHILD.format(root=str(ROOT)), out=str(out))
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = psutil.Process(int(parent.stdout.readline()))
    deadline = time.monotonic() + 30
    while "watching" not in (out.read_text() if out.exists() else ""):
        assert time.monotonic() < deadline, "the child never started watching"
        time.sleep(0.05)
    return parent, child, out


def _stop(parent: subprocess.Popen, child: psutil.Process) -> None:
    """Stop both by pid; psutil checks the child's start time, so a reused pid is never signalled."""
    if parent.poll() is None:
        parent.kill()
        parent.wait(10)
    try:
        child.kill()
    except psutil.NoSuchProcess:
        pass


def _exit_code_of_orphan(child: psutil.Process, timeout: float) -> int | None:
    """The orphan's exit code is collected by pid 1, not by us: read it from /proc while it is a zombie,
    or accept that it is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                return int(Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[-1]) >> 8
        except (psutil.NoSuchProcess, FileNotFoundError, ValueError):
            return None
        time.sleep(0.05)
    raise AssertionError(f"the driver's Python process {child.pid} outlived its JVM by {timeout}s")


def test_the_python_driver_exits_when_its_jvm_is_killed(tmp_path):
    parent, child, out = _start(tmp_path, gateway=True)
    try:
        assert out.read_text().strip() == "watching"
        time.sleep(0.5)
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE  # alive while its JVM is
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        code = _exit_code_of_orphan(child, timeout=10)
        assert code in (EXIT_JVM_GONE, None)  # None: pid 1 reaped it before we looked
        assert f"the driver JVM (pid {parent.pid}) that launched this Python process is gone: exiting (code 6)" \
            in out.read_text()
    finally:
        _stop(parent, child)


def test_a_python_process_not_launched_by_a_jvm_is_not_watched(tmp_path):
    """Without PYSPARK_GATEWAY_PORT (a plain Python process, e.g. a test session), nothing watches."""
    parent, child, out = _start(tmp_path, gateway=False)
    try:
        assert out.read_text().strip() == "not watching"
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        time.sleep(1.0)
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    finally:
        _stop(parent, child)
