"""The standalone master's word (airflow_streaming.control.standalone_word) from a REAL master and worker: a
client-mode application and a cluster-mode driver submission, each killed with SIGKILL, are proof of death
only once the master says they ended; the master's word about another id, a stopped master and a master
restarted without its state are never proof (airflow_streaming.control.death_proof)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from airflow_streaming.control import contract, takeover
from airflow_streaming.control.contract import ControlPaths, DriverRecord, Lease
from airflow_streaming.control.death_proof import Proof, RunIds, WordKind, word_proof
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.standalone_word import StandaloneWord, application_word, submission_word
from standalone_cluster import class_archive_option, fetch_json, standalone_cluster
from streams import wait_for

pytestmark = pytest.mark.spark

ACTIVE, STANDBY = "20261127T000000Z-aaaaaaaa", "20261127T000001Z-bbbbbbbb"

CLIENT_APP = """
import sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).appName("word-client").config("spark.cores.max", "1")
         .config("spark.executor.memory", "512m").config("spark.ui.enabled", "false").getOrCreate())
print(spark.sparkContext.applicationId, flush=True)
time.sleep(600)
"""


def seconds_until(predicate, timeout: float, what: str) -> float:
    """How long ``predicate`` took to hold (polled every 0.1 s)."""
    start = time.monotonic()
    wait_for(predicate, timeout, what, interval=0.1)
    return time.monotonic() - start


@pytest.fixture
def cluster(tmp_path):
    with standalone_cluster(tmp_path, cores=2, memory="2g") as running:
        yield running


def test_a_killed_client_application_and_a_killed_driver_submission_are_proven_dead(cluster, tmp_path):
    word = StandaloneWord(cluster.rest, cluster.ui, timeout=2.0)
    # --- a client-mode application (the driver on "another host": its own process group here)
    script = tmp_path / "client.py"
    script.write_text(CLIENT_APP)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    driver = subprocess.Popen([sys.executable, str(script), cluster.master], env=env, start_new_session=True,
                              stdout=subprocess.PIPE, stderr=open(tmp_path / "client.log", "wb"), text=True)
    try:
        app_id = driver.stdout.readline().strip()
        assert app_id.startswith("app-"), app_id
        ids = RunIds(app_id=app_id)
        said = word(ids)
        assert (said.kind, said.subject, said.answered, said.state, said.completed, said.master_status) == (
            WordKind.APPLICATION, app_id, True, "RUNNING", False, "ALIVE"), said
        assert word_proof(said, ids)[0] is None  # running: no proof
        other = application_word(cluster.ui, app_id[:-4] + "9999")
        assert other.answered and other.state is None and word_proof(other, RunIds(app_id=other.subject))[0] is None
        assert word_proof(said, RunIds(app_id="app-20200101000000-0000"))[0] is None  # another run's record
        os.killpg(driver.pid, signal.SIGKILL)  # the driver (Python and its JVM) dies at once, no goodbye
        killed_at = time.monotonic()
        driver.wait(30)
        wait_for(lambda: word_proof(word(ids), ids)[0] is Proof.APPLICATION_ENDED, 120, "the master to say it ended",
                 interval=0.1)
        app_took = time.monotonic() - killed_at
        said = word(ids)
        assert said.completed and said.state in ("FINISHED", "KILLED", "FAILED"), said
        app_state = said.state
        # The takeover rule on real control files: the run's lease (on another host) is fresh - the lease alone
        # would make the standby wait at least its ttl - and the master's word takes it over now.
        storage, paths = LocalStorage(), ControlPaths(str(tmp_path / "control"))
        storage.makedirs(paths.root)
        contract.write_marker(storage, paths, ACTIVE, "v1")
        storage.write_atomic(paths.driver, DriverRecord(
            run_id=ACTIVE, stream="s", version="v1", application="a", host="airflow-host", command="spark-submit",
            log_path="/l", submitted_at=time.time(), checkpoint_location="/c", handle={}).to_json())
        now = time.time()
        storage.write_atomic(paths.lease, Lease(ACTIVE, 4242, 1.0, "driver-host", now, now, 120).to_json())
        storage.write_atomic(paths.status, json.dumps({"run_id": ACTIVE, "app_id": app_id}).encode())
        judged = takeover.judge_takeover(storage, paths, STANDBY, "v1", watch=takeover.LeaseWatch(), word=word)
        assert judged.act == "take_over" and "application_ended" in judged.reason, judged
        storage.write_atomic(paths.status, json.dumps({"run_id": ACTIVE, "app_id": app_id[:-4] + "9999"}).encode())
        judged = takeover.judge_takeover(storage, paths, STANDBY, "v1", watch=takeover.LeaseWatch(), word=word)
        assert judged.act == "wait", judged  # the master does not know the application the run recorded
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(30)

    # --- a cluster-mode driver submission (PythonRunner on the worker, as the product submits it)
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\ntime.sleep(600)\n")
    body = {"action": "CreateSubmissionRequest", "appResource": f"file:{sleeper}",
            "mainClass": "org.apache.spark.deploy.PythonRunner", "appArgs": [str(sleeper), ""],
            "clientSparkVersion": fetch_json(f"{cluster.rest}/v1/submissions/status/none")["serverSparkVersion"],
            "environmentVariables": {"PYSPARK_PYTHON": sys.executable},
            "sparkProperties": {"spark.master": cluster.master, "spark.submit.deployMode": "cluster",
                                "spark.app.name": "word-sleeper", "spark.driver.supervise": "false",
                                "spark.driver.memory": "512m", "spark.driver.extraJavaOptions": class_archive_option()}}
    request = urllib.request.Request(f"{cluster.rest}/v1/submissions/create", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        sid = json.load(resp)["submissionId"]
    ids = RunIds(submission_id=sid)
    wait_for(lambda: word(ids).state == "RUNNING", 60, "the driver submission to run")
    said = word(ids)
    assert (said.kind, said.subject, said.answered) == (WordKind.SUBMISSION, sid, True) and \
        word_proof(said, ids)[0] is None
    unknown = submission_word(cluster.rest, "driver-20200101000000-9999")
    assert unknown.answered and unknown.state is None and word_proof(unknown, RunIds(unknown.subject))[0] is None
    wrappers = wait_for(lambda: [p for p in psutil.process_iter(["pid", "cmdline"])
                                 if "DriverWrapper" in " ".join(p.info["cmdline"] or [])
                                 and sid in " ".join(p.info["cmdline"] or [])], 30, "the driver's JVM")
    assert len(wrappers) == 1
    children = wrappers[0].children(recursive=True)
    wrappers[0].kill()  # SIGKILL the driver JVM on the worker
    killed_at = time.monotonic()
    wait_for(lambda: word_proof(word(ids), ids)[0] is Proof.SUBMISSION_ENDED, 120,
             "the master to say the submission ended", interval=0.1)
    submission_took = time.monotonic() - killed_at
    assert word(ids).state == "FAILED", word(ids)  # the worker saw a non-zero exit
    for child in children:  # the PythonRunner's Python process, orphaned by the JVM's SIGKILL
        try:
            child.kill()
        except psutil.Error:
            pass

    # --- a master that is gone, then back without its state: never proof
    cluster.stop_master()
    gone = word(ids)
    assert not gone.answered and word_proof(gone, ids)[0] is None
    assert not application_word(cluster.ui, app_id).answered
    port = cluster.master.rsplit(":", 1)[1]
    ui_port = cluster.ui.rsplit(":", 1)[1]
    spark_class = os.path.join(os.path.dirname(sys.executable), "spark-class")
    cluster.procs.append(subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", port,
         "--webui-port", ui_port, "--properties-file", str(tmp_path / "master.properties")],
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp_path / "master2")},
        start_new_session=True, stdout=open(tmp_path / "master2.log", "wb"), stderr=subprocess.STDOUT))
    wait_for(lambda: fetch_json(f"{cluster.rest}/v1/submissions/status/none") is not None, 90, "the new master")
    for ids, said in ((RunIds(submission_id=sid), submission_word(cluster.rest, sid)),
                      (RunIds(app_id=app_id), application_word(cluster.ui, app_id))):
        assert said.answered and said.state is None and word_proof(said, ids)[0] is None, said
    print(f"\nmaster's word after SIGKILL: application {app_state} after {app_took:.2f}s, "
          f"driver submission FAILED after {submission_took:.2f}s")
