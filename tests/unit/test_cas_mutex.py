"""The compare-and-swap mutex (``<file>.cas``) left by a process killed inside it.

Seen in a full suite run (test_kill_and_replay): the first driver, killed while it held ``lease.json.cas``, left
the mutex behind; the next driver's lease renewal and its release at a graceful stop waited out the 30 s stale
time, so a graceful stop with a 5 s stop_timeout became a kill. A mutex whose holder is a process of this host
that has ended is now stale at once; a live holder's, or another host's, is waited for as before."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.process import process_start_time
from airflow_streaming.control.storage import CAS_MUTEX_STALE_SECONDS, StorageError


def _dead_pid() -> tuple[int, float]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    start = process_start_time(proc.pid)
    proc.wait()
    return proc.pid, start


def _left(path, pid: int, start: float | None, host: str | None = None) -> None:
    with open(path, "w") as fh:
        json.dump({"pid": pid, "host": host or socket.gethostname(), "at": time.time(), "start": start}, fh)


def test_a_mutex_left_by_a_dead_process_of_this_host_is_taken_at_once(tmp_path):
    storage = LocalStorage()
    target = tmp_path / "lease.json"
    pid, start = _dead_pid()
    _left(f"{target}.cas", pid, start)
    began = time.monotonic()
    assert storage.compare_and_swap(str(target), None, b"{}")
    assert time.monotonic() - began < 2.0 and target.read_bytes() == b"{}"
    assert not os.path.exists(f"{target}.cas")


def test_a_mutex_whose_pid_now_names_another_process_is_taken(tmp_path):
    storage = LocalStorage()
    target = tmp_path / "lease.json"
    _left(f"{target}.cas", os.getpid(), (process_start_time(os.getpid()) or 0) - 100.0)  # same pid, not the holder
    assert storage.compare_and_swap(str(target), None, b"{}")


@pytest.mark.parametrize("holder", ["live", "other host", "no start time"])
def test_a_live_or_foreign_holder_is_waited_for(tmp_path, holder):
    storage = LocalStorage()
    target = tmp_path / "lease.json"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        if holder == "live":
            _left(f"{target}.cas", sleeper.pid, process_start_time(sleeper.pid))
        elif holder == "other host":
            pid, start = _dead_pid()
            _left(f"{target}.cas", pid, start, host="another-host")
        else:
            _left(f"{target}.cas", sleeper.pid, None)
        with pytest.raises(StorageError, match="stayed held"):
            with storage.mutex(f"{target}.cas", wait=0.5):
                pass
        assert os.path.exists(f"{target}.cas") and CAS_MUTEX_STALE_SECONDS >= 30
    finally:
        sleeper.kill()
        sleeper.wait()
