"""The local target finds and signals a run's processes with psutil; the driver side's own /proc reader
(control/process.py, stdlib only) and psutil agree on who a process is; a reused pid is never signalled."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from airflow_streaming.control.contract import ControlPaths, DriverRecord
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.process import START_TIME_TOLERANCE_S, process_start_time
from airflow_streaming.targets.base import Liveness
from airflow_streaming.targets.local import LocalTarget, run_processes

RUN = "20261123T000000Z-feedbeef"
STREAM = "s1"
CONTROL = "/tmp/airflow-streaming-test-control"
OURS = ["--stream", STREAM, "--control-dir", f"{CONTROL}/{STREAM}", "--run-id", RUN]  # as a driver's launch carries
CHILD = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"


@pytest.fixture
def run_process():
    """A process carrying ``--run-id RUN`` with a child that does not (found as a descendant)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *OURS], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield proc
    finally:
        for p in [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)] \
                if psutil.pid_exists(proc.pid) else []:
            try:
                p.kill()
            except psutil.Error:
                pass
        proc.wait(10)


def record_of(proc: subprocess.Popen, start: float | None, run_id: str = RUN) -> DriverRecord:
    import socket

    return DriverRecord(run_id=run_id, stream=STREAM, version="v1", application="events_etl",
                        host=socket.gethostname(), command="python -c ...", log_path="", submitted_at=time.time(),
                        checkpoint_location="/c", target="local", handle={"pid": proc.pid, "start_time": start})


def test_the_proc_reader_and_psutil_agree_on_a_process_start(run_process):
    ours = process_start_time(run_process.pid)
    theirs = psutil.Process(run_process.pid).create_time() - psutil.boot_time()
    assert ours is not None and abs(ours - theirs) < START_TIME_TOLERANCE_S


def test_run_processes_finds_the_run_and_its_descendants_only(run_process):
    found = {p.pid for p in run_processes(RUN)}
    child = psutil.Process(run_process.pid).children()[0].pid
    assert found == {run_process.pid, child}
    assert run_processes("20990101T000000Z-00000000") == []


def test_kill_signals_the_run_and_reports_it_gone(tmp_path, run_process):
    target = LocalTarget(LocalStorage(), ControlPaths(f"{CONTROL}/{STREAM}"), {})
    record = record_of(run_process, process_start_time(run_process.pid))
    assert target.state(record).liveness == Liveness.ALIVE
    outcome = target.kill(record, grace=5)
    assert "SIGTERM to 2 process(es)" in outcome and outcome.endswith("all gone"), outcome
    run_process.wait(10)
    assert target.state(record).liveness == Liveness.GONE


def test_a_pid_recorded_for_another_run_or_start_is_never_signalled(tmp_path, run_process):
    target = LocalTarget(LocalStorage(), ControlPaths(f"{CONTROL}/{STREAM}"), {})
    # Same pid, but recorded with another start time and another run: another process that reused the pid.
    forged = record_of(run_process, process_start_time(run_process.pid) - 100, "20990101T000000Z-00000000")
    ok, why = forged.local_identity().check()
    assert not ok and "belongs to another process" in why
    assert target.state(forged).liveness == Liveness.GONE
    outcome = target.kill(forged, grace=1)
    assert outcome.startswith("nothing to kill") and "nothing was signalled" in outcome
    assert run_process.poll() is None and psutil.Process(run_process.pid).status() != psutil.STATUS_ZOMBIE


def test_adopt_names_the_runs_root_process_and_refuses_when_it_cannot_tell_which(tmp_path, run_process):
    target = LocalTarget(LocalStorage(), ControlPaths(f"{CONTROL}/{STREAM}"), {})
    handle = target.adopt(RUN)
    assert handle == {"pid": run_process.pid, "start_time": process_start_time(run_process.pid)}, handle
    adopted = record_of(run_process, handle["start_time"])
    assert adopted.local_identity().check()[0] and target.state(adopted).liveness == Liveness.ALIVE
    assert target.adopt("20990101T000000Z-00000000") is None
    # A second process of the same run that is not the first one's descendant: which is the driver? None.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *OURS],
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while other.pid not in {p.pid for p in run_processes(RUN)} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert target.adopt(RUN) is None
    finally:
        other.kill()
        other.wait(10)


def test_adopt_names_a_surviving_child_when_the_runs_first_process_has_exited(tmp_path):
    """spark-submit gone, its JVM (carrying the run id too) left: that one is the run's root now."""
    code = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', "
            f"*{OURS!r}], start_new_session=True)")
    parent = subprocess.Popen([sys.executable, "-c", code, *OURS])
    parent.wait(10)
    try:
        deadline = time.monotonic() + 10
        while not run_processes(RUN) and time.monotonic() < deadline:
            time.sleep(0.05)
        (orphan,) = run_processes(RUN)
        target = LocalTarget(LocalStorage(), ControlPaths(f"{CONTROL}/{STREAM}"), {})
        assert target.adopt(RUN) == {"pid": orphan.pid, "start_time": process_start_time(orphan.pid)}
    finally:
        for proc in run_processes(RUN):
            proc.kill()
            proc.wait(10)


EXEC_CHAIN = """#!/bin/bash
# Execs itself $1 times, keeping --run-id on its command line, as spark-submit -> spark-class -> java do.
n=$1; shift
if [ "$n" -gt 0 ]; then exec /bin/bash "$0" $((n-1)) "$@"; fi
exec sleep 60 "$@"
"""


@pytest.fixture
def exec_chain(tmp_path):
    """A process that execs itself in a loop, always carrying ``--run-id RUN``: a live process whose
    ``/proc/<pid>/cmdline`` reads as empty while it is inside ``execve``."""
    script = tmp_path / "exec_chain.sh"
    script.write_text(EXEC_CHAIN)
    script.chmod(0o755)
    proc = subprocess.Popen([str(script), "1000000", *OURS], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def test_a_process_inside_execve_is_still_alive_and_still_the_runs(tmp_path, exec_chain):
    """Stop 31's CI: a driver checked while spark-submit exec'd spark-class (or java) looked gone, because
    its command line read as empty for that moment; its start was judged failed and stopped. A live
    process whose pid and start time match is never judged gone or missed for an empty command line."""
    target = LocalTarget(LocalStorage(), ControlPaths(f"{CONTROL}/{STREAM}"), {})
    record = record_of(exec_chain, process_start_time(exec_chain.pid))
    unrecorded = record_of(exec_chain, None)  # no start time: liveness rests on the scan of command lines
    identity = record.local_identity()
    empty_reads = checks = 0
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        with open(f"/proc/{exec_chain.pid}/cmdline", "rb") as fh:
            empty_reads += fh.read() == b""
        ok, why = identity.check()
        assert ok, why
        assert [p.pid for p in run_processes(RUN)] == [exec_chain.pid]
        assert target.state(unrecorded).liveness == Liveness.ALIVE
        checks += 1
    assert exec_chain.poll() is None, "the chain ended during the test: nothing was checked mid-exec"
    print(f"{checks} checks; {empty_reads} raw reads of the command line were empty")


def test_a_verified_driver_is_rechecked_by_its_start_time_only_and_never_outlives_its_process(run_process,
                                                                                             monkeypatch):
    """Issue 37: a watched stream's liveness reads the recorded process's command line once; later polls read its
    start time only. A pid and start time proven to be this stream's driver name the same process while it lives;
    another stream's record naming that pid, a recycled pid (another start time) and a dead process are each
    checked in full, never taken from what was proven before."""
    import airflow_streaming.targets.local as local

    target = LocalTarget(LocalStorage(), ControlPaths(f"{CONTROL}/{STREAM}"), {})
    record = record_of(run_process, process_start_time(run_process.pid))
    reads: list[int] = []
    real = local.ProcessIdentity.check_cmdline
    monkeypatch.setattr(local.ProcessIdentity, "check_cmdline", lambda self: reads.append(self.pid) or real(self))
    assert target.state(record).liveness == Liveness.ALIVE and reads == [run_process.pid]
    for _ in range(3):
        assert target.state(record).liveness == Liveness.ALIVE
    assert reads == [run_process.pid], "the command line was read again for a process already proven"

    # Another stream's target asking about the same process (a copied record) proves it anew, and refuses it.
    other = LocalTarget(LocalStorage(), ControlPaths(f"{CONTROL}/other"), {})
    assert other.state(record).liveness == Liveness.UNKNOWN and len(reads) == 2

    # The pid recycled: the start time read now differs from the recorded one, so the full check runs.
    import airflow_streaming.control.process as process

    recorded = record.handle["start_time"]
    monkeypatch.setattr(process, "process_start_time", lambda pid: recorded + 7 if pid == run_process.pid
                        else process_start_time(pid))
    assert not process.process_alive(run_process.pid, recorded)
    target.state(record)
    assert len(reads) == 3, "a pid whose start time changed was taken from what was proven before"
    monkeypatch.undo()

    # The process gone: GONE at the next poll, though it was proven before.
    for p in [*psutil.Process(run_process.pid).children(recursive=True), psutil.Process(run_process.pid)]:
        p.kill()
    run_process.wait(10)
    assert target.state(record).liveness == Liveness.GONE
