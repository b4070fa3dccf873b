"""A real Spark standalone master (REST submission server on) and worker for tests, started from pyspark's
``spark-class`` (pip pyspark has no ``sbin/start-*.sh``) and stopped by pid.

Used by ``tests/integration/test_standalone_cluster.py`` (everything on loopback) and
``tests/integration/test_two_hosts.py`` (on an address that another network namespace reaches).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from streams import wait_for


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def class_archive_option() -> str:
    """The session's class-data-sharing option (``tests/conftest.py`` puts it in ``SPARK_SUBMIT_OPTS``), or ""."""
    return next((o for o in os.environ.get("SPARK_SUBMIT_OPTS", "").split() if o.startswith("-XX:SharedArchiveFile=")),
                "")


def class_archive_conf() -> dict[str, str]:
    """Spark conf that hands the session's archive to the JVMs a standalone worker starts - a cluster-mode
    driver (its DriverWrapper) and executors - which ``SPARK_SUBMIT_OPTS`` does not reach. Class loading
    only: nothing Spark or the product does changes. Empty when the session has no archive."""
    option = class_archive_option()
    return {"spark.driver.extraJavaOptions": option, "spark.executor.extraJavaOptions": option} if option else {}


def fetch_json(url: str, timeout: float = 2) -> dict | None:
    """The JSON at ``url``, ``None`` when it does not answer with JSON (within ``timeout`` seconds)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - test addresses only
            return json.load(resp)
    except (OSError, ValueError):
        return None


@dataclass
class Cluster:
    master: str
    ui: str
    rest: str
    work_dir: Path
    host: str = "127.0.0.1"
    procs: list[subprocess.Popen] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None

    def stop_master(self) -> None:
        stop_process(self.procs[0])

    def add_worker(self, cores: int, memory: str, host_name: str | None = None) -> None:
        """One more worker (its own work directory and log), registered before this returns. ``host_name``: the
        worker runs in a UTS namespace of its own with that host name (``unshare --uts``), so the drivers and
        executors it starts are on "another host" for ``socket.gethostname()`` (network and PIDs shared)."""
        k = len(self.procs)
        spark_class = os.path.join(os.path.dirname(sys.executable), "spark-class")
        argv = [spark_class, "org.apache.spark.deploy.worker.Worker", self.master,
                *([] if self.host == "127.0.0.1" else ["--host", self.host]),
                "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port(self.host))]
        if host_name:  # hostname(1) changes this namespace only; exec keeps the worker's pid the one we stop
            argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host_name, *argv]
        work = self.work_dir if k == 1 else self.work_dir.with_name(f"{self.work_dir.name}-{k}")
        log_dir = self.log_dir or self.work_dir.parent
        alive = (self.master_json() or {}).get("aliveworkers", 0)
        self.procs.append(subprocess.Popen(
            argv, env={**self.env, "SPARK_WORKER_DIR": str(work)}, start_new_session=True,
            stdout=open(log_dir / ("worker.log" if k == 1 else f"worker-{k}.log"), "wb"), stderr=subprocess.STDOUT))
        wait_for(lambda: (self.master_json() or {}).get("aliveworkers") == alive + 1, 90, f"worker {k}")

    def master_json(self) -> dict | None:
        return fetch_json(f"{self.ui}/json/")


def stop_process(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (it was started in its own session) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


@contextlib.contextmanager
def standalone_cluster(tmp_path: Path, host: str = "127.0.0.1", cores: int = 2, memory: str = "2g",
                       worker_host_name: str | None = None) -> Iterator[Cluster]:
    """A master with its REST server and one worker (default 2 cores / 2 GiB: a driver and an executor fit),
    both listening on ``host``; ``worker_host_name``: the worker in a UTS namespace of that name
    (:meth:`Cluster.add_worker`, which also adds more workers). On exit all are killed, and so is every process
    whose command line mentions ``tmp_path`` (drivers and executors the workers started)."""
    spark_class = os.path.join(os.path.dirname(sys.executable), "spark-class")
    port, ui, rest = free_port(host), free_port(host), free_port(host)
    props = tmp_path / "master.properties"
    props.write_text(f"spark.master.rest.enabled true\nspark.master.rest.port {rest}\nspark.ui.killEnabled true\n")
    work = tmp_path / "work"
    env = {**os.environ, "SPARK_LOCAL_IP": host, "SPARK_LOG_DIR": str(tmp_path), "SPARK_WORKER_DIR": str(work),
           "SPARK_DAEMON_JAVA_OPTS": class_archive_option()}  # the master's and worker's JVMs map it too
    cluster = Cluster(f"spark://{host}:{port}", f"http://{host}:{ui}", f"http://{host}:{rest}", work, host, env=env,
                      log_dir=tmp_path)
    try:
        cluster.procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", host, "--port", str(port),
             "--webui-port", str(ui), "--properties-file", str(props)], env=env, start_new_session=True,
            stdout=open(tmp_path / "master.log", "wb"), stderr=subprocess.STDOUT))
        wait_for(lambda: cluster.master_json() is not None, 90, "the master's web UI")
        wait_for(lambda: fetch_json(f"{cluster.rest}/v1/submissions/status/none") is not None, 60, "the REST server")
        cluster.add_worker(cores, memory, worker_host_name)
        yield cluster
    finally:
        for proc in reversed(cluster.procs):
            stop_process(proc)
        for proc in psutil.process_iter(["pid", "cmdline"]):  # drivers left on the worker (by pid)
            if str(tmp_path) in " ".join(proc.info["cmdline"] or []):
                try:
                    proc.kill()
                except psutil.Error:
                    pass
