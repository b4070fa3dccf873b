"""Spark Connect as a way to restart a stream without a cold start (issue 23): measured, side by side.

    .venv/bin/python bench/connect_bench.py [--runs 3] [--json bench/results/connect.json]

A long-lived Spark Connect server (pip pyspark ships it: ``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer``) keeps a JVM and a Spark session up, so a
query can start in a running JVM. One stateful stream (the bundled ``device_signals`` query, its
watermark, windows and state) runs under continuous input (one small file every 0.5 s), always on
the same checkpoint, one query at a time. Each run measures, from the action to the first *new*
committed batch (the mtime of ``commits/N+1``, N the last batch committed before):

- **bare start** (the baseline): ``spark-submit`` of a classic driver running the query - a cold JVM;
- **server cold start**: start a Connect server, then a client starts the query in it - what a
  failover costs when the server itself died and nothing was prepared;
- **fresh client, running server**: a new client *process* connects to the running server and starts
  the query - what a failover to a prepared (standby) server, or a restart of the process that owns the
  stream, costs;
- **restart in one session**: ``query.stop()`` then ``start()`` from one client - the floor of an
  upgrade in a running JVM (Spark's own stop, not at a batch boundary).

Ratios are against the bare start measured in the same run. Also printed: the server's resident
memory with the query running (what a prepared server costs while it waits).

``--smoke`` (CI): one run, JSON to a temp dir. Every process started is stopped by its process group.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "bench"))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from harness import (  # noqa: E402
    add_smoke_argument,
    smoke_results,
    stop_cleanly_on_sigterm,
    stop_group,
    stop_processes_under,
)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
CONF = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}
TRIGGER = "1 second"


# ------------------------------------------------------------------ the query (classic driver or client)
def start_query(spark, root: str):
    """The bundled device_signals query on ``spark`` (a classic or a Connect session), started."""
    from spark_jobs.jobs.device_signals import parse_args, windowed_counts

    ns = parse_args(["--input", f"{root}/input", "--output", f"{root}/output"])
    return (windowed_counts(spark, ns).writeStream.format("parquet").outputMode("append")
            .option("path", ns.output).option("checkpointLocation", f"{root}/checkpoint")
            .trigger(processingTime=TRIGGER).queryName("connect_bench").start())


def child(mode: str, root: str, url: str | None) -> int:
    """A classic driver (``spark-submit`` of this file) or a fresh Connect client: start the query, then
    stop it on SIGTERM (a Connect query outlives its client otherwise) and exit."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("connect_bench")
    spark = builder.remote(url).getOrCreate() if mode == "client" else builder.getOrCreate()
    try:
        query = start_query(spark, root)
        stopping = {"now": False}
        signal.signal(signal.SIGTERM, lambda *_: stopping.update(now=True))
        while not stopping["now"]:
            time.sleep(0.1)
        query.stop()
    finally:
        if mode == "client":
            close_client(spark)
    return 0


# ------------------------------------------------------------------ measuring
def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def last_commit(root: str) -> int:
    folder = f"{root}/checkpoint/commits"
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return max((int(n) for n in names if n.isdigit()), default=-1)


def commit_after(root: str, n: int, proc: subprocess.Popen | None = None, timeout: float = 300) -> float:
    """The mtime of the first committed batch after ``n`` (waits for it while ``proc``, if given, lives)."""
    deadline = time.monotonic() + timeout
    path = f"{root}/checkpoint/commits/{n + 1}"
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return os.path.getmtime(path)
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:3]}... exited with {proc.returncode} before batch {n + 1} committed")
        time.sleep(0.05)
    raise TimeoutError(f"no batch {n + 1} committed in {path} within {timeout:.0f}s")


def popen(argv: list[str], log: str) -> subprocess.Popen:
    # A Connect session in this process marks the environment as Connect mode: never pass that on.
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED",
                                                            "SPARK_LOCAL_REMOTE")}
    env.update(SPARK_HOME=spark_home(), PYTHONPATH=REPO)
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)


def spark_submit(args: list[str]) -> list[str]:
    conf = [a for k, v in CONF.items() for a in ("--conf", f"{k}={v}")]
    return [os.path.join(spark_home(), "bin", "spark-submit"), "--master", "local[2]", *conf, *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited with {proc.returncode} before it listened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"the Spark Connect server did not listen on {port} within {timeout:.0f}s")


def rss_mib(pid: int) -> float:
    """The resident memory of ``pid`` and every process under it, in MiB."""
    import psutil

    proc = psutil.Process(pid)
    return resident_mib([proc, *proc.children(recursive=True)])


def resident_mib(processes: list) -> float:
    """The resident memory of ``processes`` in MiB. One that ended after it was listed (a short-lived child of
    the server) counts for nothing; it must not fail the run, which once left a smoke hanging (see close_client)."""
    import psutil

    total = 0
    for proc in processes:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return round(total / 2**20, 1)


def close_client(session) -> None:
    """Close a Connect client's channel without a call to its server. A client left open runs an exit hook
    (pyspark 4.x ``_on_exit`` -> ``_cleanup_ml_cache``) that calls the server with retries for minutes once
    the server is gone: a run that failed with the server stopped then never exited (stop 46's CI)."""
    if not session.client.is_closed:
        session.client.close()


def one_run(root: str, logs: str, index: int) -> dict[str, float]:
    """One of each measurement, in order, on the one checkpoint (input keeps arriving throughout)."""
    me = os.path.abspath(__file__)
    result: dict[str, float] = {}

    # bare start: a classic driver in a cold JVM
    n = last_commit(root)
    started = time.time()
    driver = popen(spark_submit([me, "--child", "classic", "--root", root]), f"{logs}/classic-{index}.log")
    try:
        result["bare_start_s"] = round(commit_after(root, n, driver) - started, 2)
    finally:
        stop_group(driver, grace=60)

    # server cold start, then the query from a client in this process
    port = free_port()
    url = f"sc://127.0.0.1:{port}"
    n = last_commit(root)
    started = time.time()
    server = popen(spark_submit(["--class", SERVER_CLASS, "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                                 "--conf", f"spark.connect.grpc.binding.port={port}", "spark-internal"]),
                   f"{logs}/server-{index}.log")
    session = None
    try:
        wait_port(port, server)
        result["server_listening_s"] = round(time.time() - started, 2)
        from pyspark.sql import SparkSession

        session = SparkSession.builder.remote(url).getOrCreate()
        query = start_query(session, root)
        result["server_cold_start_s"] = round(commit_after(root, n, server) - started, 2)
        result["server_rss_mib"] = rss_mib(server.pid)
        query.stop()

        # a fresh client process against the running server
        n = last_commit(root)
        started = time.time()
        client = popen([sys.executable, me, "--child", "client", "--root", root, "--url", url],
                       f"{logs}/client-{index}.log")
        try:
            result["fresh_client_s"] = round(commit_after(root, n, client) - started, 2)
        finally:
            stop_group(client, grace=60)

        # restart in one session: stop, start again
        query = start_query(session, root)
        commit_after(root, last_commit(root))
        n = last_commit(root)
        started = time.time()
        query.stop()
        query = start_query(session, root)
        result["restart_in_session_s"] = round(commit_after(root, n) - started, 2)
        query.stop()
        session.stop()
    finally:
        if session is not None:
            close_client(session)
        stop_group(server, grace=30)
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="connect_bench")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default=os.path.join(REPO, "bench", "results", "connect.json"))
    parser.add_argument("--child", choices=("classic", "client"), help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    add_smoke_argument(parser)
    ns = parser.parse_args(argv)
    if ns.child:
        return child(ns.child, ns.root, ns.url)
    if ns.smoke:
        ns.runs, ns.json = 1, os.path.join(smoke_results("connect"), "connect.json")
    stop_cleanly_on_sigterm()

    from signals import Feeder

    root = tempfile.mkdtemp(prefix="connect-bench-")
    logs = os.path.join(root, "logs")
    os.makedirs(logs)
    feeder = Feeder(f"{root}/input", per_file=4, interval=0.5)
    feeder.feed(40)
    feeder.start()
    runs: list[dict[str, float]] = []
    try:
        for i in range(ns.runs):
            runs.append(one_run(root, logs, i))
            print(f"run {i}: {runs[-1]}", flush=True)
    except BaseException:
        print(f"logs kept in {logs}", file=sys.stderr)
        raise
    finally:
        feeder.stop()
        stop_processes_under(root)
    med = {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]}
    bare = med["bare_start_s"]
    print(f"\nSpark Connect vs a cold start, {ns.runs} run(s), medians ({platform.node()}, {os.cpu_count()} cores):")
    print(f"bare start (spark-submit -> first new commit)       {bare} s")
    for key, label in (("server_cold_start_s", "server cold start + query (no standby)"),
                       ("fresh_client_s", "fresh client, running server (a standby)"),
                       ("restart_in_session_s", "restart in one session (upgrade floor)")):
        print(f"{label:<52}{med[key]} s ({med[key] / bare:.2f} x bare)")
    print(f"server listening after                              {med['server_listening_s']} s")
    print(f"server memory with the query running                {med['server_rss_mib']} MiB")
    os.makedirs(os.path.dirname(ns.json), exist_ok=True)
    with open(ns.json, "w") as fh:
        json.dump({"runs": runs, "medians": med, "machine": {"host": platform.node(), "cores": os.cpu_count()}}, fh,
                  indent=1)
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
