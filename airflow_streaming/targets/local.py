"""Drivers that run on the submitting host: ``local[N]`` and standalone/YARN **client** mode.

spark-submit is started detached, in its own session (process group), with its output in the
control directory's log (a local log directory when the control files are on HDFS, see
``SparkStreamHook.driver_log_path``). The driver is identified by the spark-submit pid, its start time and the
run id on its command line (``--run-id``); its JVM and Python driver carry the same run id, and the
stream's name and control directory (``--stream``, ``--control-dir``). A kill signals only processes whose
own command line carries that run id AND this target's stream and control directory (and their
descendants): a recycled pid, a process group that is not ours, or another stream's driver named by a
forged or copied record (a run id is only a name a control file can copy) is never signalled - the kill
refuses and says why.

Use client mode on a fixed host (an edge node, a pinned Celery queue): the driver lives and dies
with that host. For drivers that outlive any Airflow worker use a cluster target.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

from airflow_streaming import run_as, secret_handoff
from airflow_streaming.control.contract import DriverRecord
from airflow_streaming.control.process import (ProcessIdentity, has_token, process_alive, process_start_time,
                                               settled_cmdline)
from airflow_streaming.exceptions import ApplicationNotFoundError
from airflow_streaming.properties_file import forget_properties_file
from airflow_streaming.pyspark_install import spark_submit_missing
from airflow_streaming.reconcile.observation import Liveness
from airflow_streaming.targets.base import (CONTROL_DIR_FLAG, STREAM_FLAG, DriverState, DriverTarget, LaunchPlan,
                                            flag_value, poll_until)
from airflow_streaming.targets.driver_env import driver_environment
from airflow_streaming.targets.submit_command import spark_submit_argv, submitted_properties, write_properties_file

log = logging.getLogger(__name__)

#: Popen objects of drivers started by this process, so that their exit is reaped (no zombies).
_CHILDREN: dict[int, subprocess.Popen] = {}


def reap_children() -> None:
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            _CHILDREN.pop(pid, None)


def run_processes(run_id: str, owner: Callable[[list[str]], str | None] | None = None,
                  refused: list[str] | None = None) -> list[psutil.Process]:
    """Live (non-zombie) local processes that carry ``--run-id <run_id>`` on their command line, plus their
    descendants. psutil's ``Process`` objects remember each one's creation time: a later ``send_signal``
    refuses a pid that was reused meanwhile (``NoSuchProcess``) instead of signalling a stranger.

    ``owner``: a process is kept only when ``owner(its command line)`` says nothing against it (``None``);
    what it said of the others goes to ``refused`` (the run id is a name any control file can copy: the
    process's own command line says whose driver it is)."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline", "ppid"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if not cmdline and proc.info["ppid"] not in (0, 2, None) and _running(proc):
                # Empty while inside execve (spark-submit -> spark-class -> java): read it again once
                # settled, or a starting driver is missed (see process.EXEC_SETTLE_S). Kernel threads
                # (children of pid 2) and zombies are empty for good and are not read again.
                cmdline = settled_cmdline(proc.pid, settle=0.5) or []
            if not has_token(cmdline, run_id):
                continue
            problem = owner(cmdline) if owner is not None else None
            if problem is not None:
                if refused is not None:
                    refused.append(f"pid {proc.pid}: {problem}")
                continue
            found[proc.pid] = proc
            for child in proc.children(recursive=True):
                found.setdefault(child.pid, child)
        except psutil.Error:
            continue
    return [p for p in found.values() if _running(p)]


def _reaped(members: Callable[[], list[psutil.Process]]) -> list[psutil.Process]:
    """``members()``, once our exited children are collected (what a kill waits on)."""
    reap_children()
    return members()


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class _VerifiedDrivers:
    """The recorded spark-submit processes :meth:`LocalTarget.state` has proven to be a stream's driver, by
    ``(pid, recorded start time, run id, stream, control directory)``: while a process with that pid and start
    time lives it is the same process (a recycled pid has another start time), so a later poll needs only its
    start time (one read of ``/proc/<pid>/stat``), not its command line again. An observation only: a kill
    proves the identity anew (:meth:`LocalTarget.kill`). Bounded (oldest first out), shared by the threads of
    a triggerer's polls."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._known: dict[tuple[Any, ...], None] = {}
        self._lock = threading.Lock()

    def seen(self, key: tuple[Any, ...]) -> bool:
        return key in self._known

    def add(self, key: tuple[Any, ...]) -> None:
        with self._lock:
            self._known[key] = None
            while len(self._known) > self._size:
                del self._known[next(iter(self._known))]


_VERIFIED = _VerifiedDrivers()


class LocalTarget(DriverTarget):
    """A detached spark-submit on this host (see the module docstring)."""

    kind = "local"

    def ours(self, run_id: str, refused: list[str] | None = None, strict: bool = True) -> list[psutil.Process]:
        """The processes of ``run_id`` launched for this stream and this control directory (their own command
        line carries ``--stream``, ``--control-dir`` and ``--run-id``) and their descendants; why each other
        process carrying the run id is not ours goes to ``refused``. Not ``strict`` (a question, never a
        kill): a process of this stream without ``--control-dir`` (a detached compatibility check) counts."""
        return run_processes(run_id, lambda cmdline: self.command_problem(run_id, cmdline, strict), refused)

    def command_problem(self, run_id: str, cmdline: list[str], strict: bool = True) -> str | None:
        """Why a process with ``cmdline`` is not a driver of this stream and control directory (``None``: it is;
        see :meth:`ours`)."""
        control_dir = flag_value(cmdline, CONTROL_DIR_FLAG)
        if not strict and control_dir is None and flag_value(cmdline, STREAM_FLAG) == self.stream:
            return None
        return self.launch_problem(run_id, flag_value(cmdline, STREAM_FLAG), control_dir)

    def submit(self, plan: LaunchPlan) -> dict[str, Any]:
        env = driver_environment(os.environ, plan.env)
        binary = self.binary(plan)
        if shutil.which(binary, path=env.get("PATH")) is None:
            raise ApplicationNotFoundError(f"{spark_submit_missing(binary)}; nothing was submitted")
        if plan.run_as_user:
            return self._submit_as_user(plan, env, binary)
        properties = write_properties_file(submitted_properties(plan), plan.run_id) if plan.secret_conf else None
        if properties:
            env["AIRFLOW_STREAMING_SECRET_PROPERTIES"] = properties  # the runtime deletes it once started
        argv = spark_submit_argv(plan, binary, properties)
        proc = self._start(plan, argv, env)
        return {"pid": proc.pid, "start_time": process_start_time(proc.pid),
                **({"properties_file": properties} if properties else {})}

    def _start(self, plan: LaunchPlan, argv: list[str], env: dict[str, str], stdin: bytes | None = None,
               cwd: str | None = None) -> subprocess.Popen:
        os.makedirs(os.path.dirname(plan.log_path), exist_ok=True)
        with open(plan.log_path, "ab") as log_file:
            proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                                    env=env, start_new_session=True, close_fds=True, cwd=cwd)
        if stdin is not None and proc.stdin is not None:
            try:
                proc.stdin.write(stdin)
            finally:
                proc.stdin.close()
        _CHILDREN[proc.pid] = proc
        return proc

    def _submit_as_user(self, plan: LaunchPlan, env: dict[str, str], binary: str) -> dict[str, Any]:
        """Start the driver as ``plan.run_as_user`` (:mod:`airflow_streaming.run_as`): its secret conf is piped
        to :mod:`airflow_streaming.secret_handoff`, which writes that user's own properties file and execs
        spark-submit (the recorded pid stays the driver's)."""
        user = run_as.lookup(plan.run_as_user or "")
        env = run_as.switched_environment(env, user)
        if "SPARK_HOME" not in env:  # else pip's spark-submit asks this Python where it is (find-spark-home)
            import pyspark

            env["SPARK_HOME"] = os.path.dirname(os.path.abspath(pyspark.__file__))
        prefix, cwd = run_as.switch_command(user), run_as.working_directory(user)
        if not plan.secret_conf:
            proc = self._start(plan, [*prefix, *spark_submit_argv(plan, binary, None)], env, cwd=cwd)
        else:
            placeholder = f"@airflow-streaming-properties-{plan.run_id}"
            env["AIRFLOW_STREAMING_SECRET_PROPERTIES"] = placeholder
            python = env.get("PYSPARK_PYTHON") or sys.executable
            argv = [*prefix, python, secret_handoff.__file__, plan.run_id, placeholder, "--",
                    *spark_submit_argv(plan, binary, placeholder)]
            payload = json.dumps({"conf": submitted_properties(plan)}).encode()
            proc = self._start(plan, argv, env, stdin=payload, cwd=cwd)
        return {"pid": proc.pid, "start_time": process_start_time(proc.pid), "run_as_user": user.name}

    def find(self, run_id: str, record: DriverRecord | None = None) -> list[str]:
        reap_children()
        return [f"pid {p.pid} ({' '.join(_cmdline(p))[:80]})" for p in self.ours(run_id, strict=False)]

    def adopt(self, run_id: str) -> dict[str, Any] | None:
        """The run's one root process (spark-submit, or whichever of its processes outlived it): the
        process that carries the run id and whose parent does not."""
        members = self.ours(run_id)
        pids = {p.pid for p in members}
        roots = []
        for proc in members:
            try:
                if proc.ppid() not in pids:
                    roots.append(proc)
            except psutil.Error:
                continue
        if len(roots) != 1:
            return None
        start = process_start_time(roots[0].pid)
        if start is None or not ProcessIdentity(roots[0].pid, start, socket.gethostname(), token=run_id).check()[0]:
            return None  # it ended meanwhile, or its pid already names another process
        return {"pid": roots[0].pid, "start_time": start}

    def state(self, record: DriverRecord) -> DriverState:
        reap_children()
        if record.host != socket.gethostname():
            return DriverState(Liveness.UNKNOWN, f"the driver of run {record.run_id} runs on {record.host}, "
                                                 f"in client mode: its processes cannot be seen from "
                                                 f"{socket.gethostname()}")
        identity = record.local_identity()
        why = "no spark-submit pid recorded"
        if identity is not None:
            known = (identity.pid, identity.start_time, record.run_id, self.stream, self.paths.root)
            if _VERIFIED.seen(known) and process_alive(identity.pid, identity.start_time):
                return DriverState(Liveness.ALIVE, f"spark-submit pid {identity.pid} of run {record.run_id} is alive")
            ok, why, cmdline = identity.check_cmdline()  # one read of /proc for both questions
            problem = self.command_problem(record.run_id, cmdline or []) if ok else None
            if ok and problem is None:
                _VERIFIED.add(known)
                return DriverState(Liveness.ALIVE, f"spark-submit pid {identity.pid} of run {record.run_id} is alive")
        # The JVM or the Python driver may outlive spark-submit (and still hold the lease).
        refused: list[str] = []
        members = self.ours(record.run_id, refused)
        if members:
            return DriverState(Liveness.ALIVE, f"processes of run {record.run_id} are alive: "
                                               f"{', '.join(str(p.pid) for p in members)}")
        if refused:
            return DriverState(Liveness.UNKNOWN, f"the record of run {record.run_id} names no driver of this "
                                                 f"stream: {'; '.join(refused)} (a forged or copied record: fix "
                                                 "or remove it)")
        return DriverState(Liveness.GONE, f"no process of run {record.run_id} is alive ({why})")

    def kill(self, record: DriverRecord, grace: float) -> str:
        if record.host != socket.gethostname():
            message = (f"cannot kill the driver of run {record.run_id} from {socket.gethostname()}: it runs on "
                       f"{record.host} in client mode (stop it through its run marker, or kill it there)")
            log.error("%s", message)
            return message
        problem = self.record_problem(record)
        if problem is not None:
            return self.refuse(problem)
        done: list[str] = []
        refused: list[str] = []
        for sig in (signal.SIGTERM, signal.SIGKILL):
            refused.clear()
            victims = self.ours(record.run_id, refused)
            if not victims:
                break
            log.warning("sending %s to the processes of run %s: %s", sig.name, record.run_id,
                        ", ".join(str(p.pid) for p in victims))
            for proc in victims:
                try:
                    proc.send_signal(sig)  # psutil re-checks the process's start time first
                except psutil.AccessDenied:
                    self._signal_as(record, proc, sig)
                except psutil.Error:
                    pass
            done.append(f"{sig.name} to {len(victims)} process(es)")
            poll_until(lambda: _reaped(lambda: self.ours(record.run_id)), lambda alive: not alive, grace, 0.2)
        if not done and refused:
            return self.refuse("; ".join(refused))
        self._wait_child(record, 5.0)
        self._forget_secrets(record)
        left_alone = f"; left alone (not this stream's): {'; '.join(refused)}" if refused else ""
        if not done:
            identity = record.local_identity()
            why = identity.check()[1] if identity is not None else "no pid recorded"
            return f"nothing to kill: no process of run {record.run_id} is alive ({why}); nothing was signalled"
        left = self.ours(record.run_id)
        return "; ".join(done) + (f"; still alive: {[p.pid for p in left]}" if left else "; all gone") + left_alone

    @staticmethod
    def _signal_as(record: DriverRecord, proc: psutil.Process, sig: signal.Signals) -> None:
        """A driver of another Unix user (``run_as_user``), from a worker that is not root: signal it as that
        user through ``sudo`` (the rule its start needed), after the same ownership checks."""
        user = record.handle.get("run_as_user")
        if not user or os.geteuid() == 0:
            return
        done = subprocess.run(["sudo", "-n", "-u", str(user), "kill", "-s", sig.name.removeprefix("SIG"),
                               str(proc.pid)], capture_output=True, text=True, timeout=30)
        if done.returncode:
            log.error("could not signal pid %s as %s: %s", proc.pid, user, done.stderr.strip()[-300:])

    def wait_gone(self, record: DriverRecord, timeout: float) -> bool:
        """As :meth:`DriverTarget.wait_gone` (polling faster), then our own spark-submit child reaped fully."""
        deadline = time.monotonic() + timeout
        if not self.poll_gone(record, timeout, poll=0.2).gone:
            return False
        self._wait_child(record, max(0.5, deadline - time.monotonic()))
        return True

    def _wait_child(self, record: DriverRecord, timeout: float) -> None:
        """A multi-threaded JVM shows as a zombie while its last threads exit; reap our own child fully."""
        proc = _CHILDREN.pop(record.submit_pid or -1, None)
        if proc is not None:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _CHILDREN[record.submit_pid] = proc  # type: ignore[index]

    def _forget_secrets(self, record: DriverRecord) -> None:
        path = record.handle.get("properties_file")
        if path and not forget_properties_file(path, record.run_id) and os.path.lexists(path):
            log.warning("not deleting %s named by the driver record of run %s: not a properties file this "
                        "provider wrote for that run", path, record.run_id)

    def reap(self) -> None:
        reap_children()

    def log_tail(self, record: DriverRecord, lines: int) -> str:
        """The driver's output is a file on this host (also when the control files are on HDFS)."""
        from airflow_streaming.control.local import LocalStorage

        data = LocalStorage().read_text(record.log_path) if record.log_path else None
        return "\n".join((data or "").splitlines()[-lines:])

    def urls(self, record: DriverRecord) -> dict[str, str]:
        return {"driver_log": record.log_path}


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []
