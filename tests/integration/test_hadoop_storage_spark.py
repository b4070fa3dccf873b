"""HadoopFsStorage (the driver's control storage) in a real spark-submit driver JVM, against the
WebHDFS-protocol STAND-IN (tests/webhdfs_standin.py; no real NameNode can run here).

The probe below runs as a spark-submit application in client mode: it uses the storage BEFORE any
SparkSession exists (py4j to the spark-submit JVM, as the lease is taken in the real driver), then
creates a session and uses it again. The test process owns the stand-in, injects its faults and checks
what the JVM's WebHdfsFileSystem sent.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from webhdfs_standin import WebHdfsStandIn

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[2]

PROBE = r'''
import errno, json, sys, threading
from airflow_streaming.control.storage import StorageError
from spark_jobs.runtime.hadoop_storage import HadoopFsStorage, driver_storage

uri, dead_uri = sys.argv[1], sys.argv[2]
out = {}

def outcome(fn):
    try:
        return {"value": fn()}
    except StorageError as exc:
        return {"errno": exc.errno, "error": str(exc)}

from pyspark import SparkContext
out["context_before"] = SparkContext._active_spark_context is not None
st, root = driver_storage(uri + "/control/s1")
out["root"] = root
out["type"] = type(st).__name__
out["csrf_conf"] = st.conf.get("dfs.webhdfs.rest-csrf.enabled")
out["read_missing"] = outcome(lambda: st.read_bytes(root + "/status.json"))
out["exists_missing"] = outcome(lambda: st.exists(root + "/RUNNING"))
out["list_missing"] = outcome(lambda: st.list_dir(root + "/nothing"))
st.write_atomic(root + "/status.json", b"one")
st.write_atomic(root + "/status.json", b"two")
out["read"] = st.read_bytes(root + "/status.json").decode()
out["exclusive"] = [st.create_exclusive(root + "/lease.json", b"a"), st.create_exclusive(root + "/lease.json", b"b")]
out["lease"] = st.read_bytes(root + "/lease.json").decode()
out["list"] = st.list_dir(root)
out["delete"] = [st.delete(root + "/lease.json"), st.delete(root + "/lease.json")]
st.makedirs(root + "/d/e")
st.write_once(root + "/d/e/f", b"123")
out["tree"] = [list(e) for e in st.list_tree(root + "/d")]
st.move(root + "/d", root + "/d2")
out["move_taken"] = outcome(lambda: st.move(root + "/status.json", root + "/d2"))
st.delete_tree(root + "/d2")
out["after_tree_delete"] = st.list_dir(root)

# Exclusive create from two threads, each with its own FileSystem instance: one winner per round.
other = HadoopFsStorage(uri)
winners = []
for round_ in range(8):
    barrier, results = threading.Barrier(2), {}
    def create(i, storage):
        barrier.wait()
        results[i] = storage.create_exclusive(f"{root}/race/{round_}", str(i).encode())
    threads = [threading.Thread(target=create, args=(i, s)) for i, s in enumerate((st, other))]
    [t.start() for t in threads]; [t.join() for t in threads]
    winners.append(sum(results.values()))
out["race_winners"] = winners

# Compare-and-swap through it (the lease renewal's primitive), from both instances.
st.write_atomic(root + "/counter", b"0")
def bump(storage, n):
    done = 0
    while done < n:
        current = storage.read_bytes(root + "/counter")
        if storage.compare_and_swap(root + "/counter", current, str(int(current) + 1).encode()):
            done += 1
threads = [threading.Thread(target=bump, args=(s, 6)) for s in (st, other)]
[t.start() for t in threads]; [t.join() for t in threads]
out["counter"] = st.read_bytes(root + "/counter").decode()

# The error rule: a 500, a hang past the read timeout, a refused connection are errors, never "absent".
out["read_500"] = outcome(lambda: st.read_bytes("/faulty/status.json"))
out["exists_500"] = outcome(lambda: st.exists("/faulty/RUNNING"))
out["list_500"] = outcome(lambda: st.list_dir("/faulty"))
out["exists_hang"] = outcome(lambda: st.exists("/slow/RUNNING"))
dead = HadoopFsStorage(dead_uri)
out["exists_refused"] = outcome(lambda: dead.exists("/c/RUNNING"))
out["read_refused"] = outcome(lambda: dead.read_bytes("/c/status.json"))

# Then a SparkSession: the gateway is shared and the storage keeps working beside it.
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
out["session_sum"] = spark.range(10).selectExpr("sum(id)").collect()[0][0]
st.write_atomic(root + "/status.json", b"three")
out["read_after_session"] = st.read_bytes(root + "/status.json").decode()
spark.stop()
print("PROBE " + json.dumps(out), flush=True)
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_probe(tmp_path: Path, uri: str, dead_uri: str) -> dict:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    argv = ["spark-submit", "--master", "local[1]", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.hadoop.dfs.webhdfs.rest-csrf.enabled=true",
            "--conf", "spark.hadoop.dfs.webhdfs.socket.read-timeout=2s", str(script), uri, dead_uri]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the probe's own process group: spark-submit and its Python
            proc.wait(timeout=30)
    lines = [line for line in stdout.splitlines() if line.startswith("PROBE ")]
    assert proc.returncode == 0 and lines, f"probe failed ({proc.returncode}):\n{stderr[-4000:]}"
    return json.loads(lines[-1][len("PROBE "):])


def test_hadoop_fs_storage_in_a_spark_driver_jvm(tmp_path):
    with WebHdfsStandIn(str(tmp_path / "hdfs")) as nn:
        nn.inject(r"^/faulty", status=500)
        nn.inject(r"^/slow/", action="hang", seconds=6)
        out = run_probe(tmp_path, nn.uri, f"webhdfs://127.0.0.1:{free_port()}")
        log = list(nn.log)

    assert out["context_before"] is False and out["type"] == "HadoopFsStorage" and out["root"] == "/control/s1"
    # Absent only when the NameNode says FileNotFound.
    assert out["read_missing"] == {"value": None} and out["exists_missing"] == {"value": False}
    assert out["list_missing"] == {"value": []}
    assert out["read"] == "two" and out["exclusive"] == [True, False] and out["lease"] == "a"
    assert out["list"] == ["lease.json", "status.json"] and out["delete"] == [True, False]
    assert out["tree"] == [["e", True, 0], ["e/f", False, 3]]
    assert out["move_taken"]["errno"] == errno.EEXIST
    assert out["after_tree_delete"] == ["status.json"]
    assert out["race_winners"] == [1] * 8
    assert out["counter"] == "12"
    for key in ("read_500", "exists_500", "list_500"):
        assert "error" in out[key] and "/faulty" in out[key]["error"], (key, out[key])
    assert out["exists_hang"]["errno"] == errno.ETIMEDOUT, out["exists_hang"]
    for key in ("exists_refused", "read_refused"):
        assert out[key]["errno"] == errno.ECONNREFUSED and "NameNode is up" in out[key]["error"], out[key]
    assert out["session_sum"] == 45 and out["read_after_session"] == "three"

    # What went over the wire: spark.hadoop.* reached the storage's FileSystem (CSRF header on writes),
    # a replace is CREATE + RENAME(OVERWRITE) - the NameNode's atomic rename2 - and nothing else.
    assert out["csrf_conf"] == "true"
    writes = [e for e in log if e.method in ("PUT", "POST", "DELETE")]
    assert writes and all("x-xsrf-header" in e.headers for e in writes)
    renames = [e for e in log if e.op == "RENAME" and e.params.get("destination") == "/control/s1/status.json"]
    assert len(renames) == 3 and {e.params.get("renameoptions") for e in renames} == {"OVERWRITE"}
    assert not [e for e in log if e.op in ("GETFILELINKSTATUS",) and e.path.startswith("/control")]
