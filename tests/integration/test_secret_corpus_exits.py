"""The secret corpus (tests/secret_corpus.py: Kafka SASL and SSL, JDBC, database URLs, a PEM key, a
bearer token, AWS, GCS, Azure, a webhook URL) and a secret job argument, pushed through a real
deploy, upgrade and stop on the local and the standalone-cluster targets (real Spark 4.2, a real
standalone master and worker), then searched for at every exit:

- every process's argv and environment on this host, scanned all along (spark-submit, the driver
  JVM and Python, the gate's child and its JVM, the worker's DriverWrapper);
- every file under the test's root at rest: control files, the lifecycle record and history, the
  snapshots, the checkpoints, the local driver logs, the sink; and the standalone worker's driver
  stdout/stderr;
- the Streams page's JSON (the overview row and the stream detail the API serves);
- the task log (every log record the deploy, upgrade and stop wrote, at DEBUG);
- the notifications (each lifecycle event as email text and HTML, Slack and webhook JSON);
- Spark's REST API (``/api/v1/applications/<id>/environment``, what the Spark UI shows).

The job proves it got every value (it compares digests), so a secret is delivered, not dropped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import urllib.request
from pathlib import Path

import pytest

from airflow_streaming.lifecycle.record import Action, Probation, Step
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner
from airflow_streaming.notifications.events import StreamEvent, render_html, render_json, render_slack, render_text
from airflow_streaming.ui import views
from airflow_streaming.ui.streams import discover, read_stream
from secret_corpus import CONF_CORPUS
from standalone_cluster import class_archive_conf, free_port
from standalone_cluster import standalone_cluster as running_cluster
from streams import wait_for
from test_secrets_off_command_line import ProcessScanner, files_holding

pytestmark = pytest.mark.spark

ARG_SECRET = "q9Zt4argSecretValue"
SECRETS = tuple(secret for _, secret in CONF_CORPUS.values()) + (ARG_SECRET,)
OPTIONS = LifecycleOptions(probation=Probation(min_batches=1, window_s=120), poll_s=0.5)

# An unmodified user script: a text source into a parquet sink. It proves that the driver's SparkConf
# holds each corpus value and that the secret argument reached its argv, writing only digests.
SCRIPT = '''
import hashlib, json, os, sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
argv = sys.argv[1:]
secret = argv[-1] if len(argv) > 1 and argv[-2] == "--db-password" else None
source, sink, checkpoint, proof = argv[:4]
wanted = json.load(open(proof + ".wanted"))
conf = spark.sparkContext.getConf()
got = {key: hashlib.sha256((conf.get(key) or "").encode()).hexdigest() == digest for key, digest in wanted.items()}
got["--db-password"] = hashlib.sha256((secret or "").encode()).hexdigest()
with open(proof + ".tmp", "w") as fh:
    json.dump(got, fh)
os.replace(proof + ".tmp", proof)
query = (spark.readStream.format("text").load(source).writeStream.format("parquet").option("path", sink)
         .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
query.awaitTermination()
'''


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class Feeder:
    """Writes one small input file a second until stopped (so that probation sees batches)."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.count = directory, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Feeder:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            tmp = self.directory / f".f{self.count}.tmp"
            tmp.write_text(f"line-{self.count}\n")
            tmp.rename(self.directory / f"f{self.count:05d}.txt")
            self.count += 1
            self._stop.wait(1.0)


def leaks_in(text: str) -> list[str]:
    return [f"{s[:4]}..." for s in SECRETS if s in text]


_CORPUS_IN_THE_SUITE = pytest.mark.long(
    covered_by="tests/integration/test_secrets_off_command_line.py::"
               "test_the_secret_corpus_reaches_the_driver_but_no_proc_file_of_its_processes_nor_its_log")


@pytest.fixture(params=[pytest.param("local", marks=_CORPUS_IN_THE_SUITE),
                        pytest.param("standalone-cluster", marks=_CORPUS_IN_THE_SUITE)])
def target(request, tmp_path):
    """The target's spec fields; the standalone cluster (master with REST, a worker) is stopped by pid."""
    if request.param == "local":
        yield request.param, {"spark_conf": {"spark.ui.enabled": "true", "spark.ui.port": "0"}}, None
        return
    (tmp_path / "cluster").mkdir()
    # 4 cores, as in test_two_hosts: the stream's driver and executor, and the upgrade's gate (no free core:
    # the gate waits until its timeout refuses the upgrade, docs/cluster.md)
    with running_cluster(tmp_path / "cluster", cores=4, memory="3g") as cluster:
        yield request.param, {
            "master": cluster.master, "deploy_mode": "cluster", "master_ui_url": cluster.ui,
            "cluster": {"rest_url": cluster.rest, "driver_memory": "512m", "driver_cores": 1},
            "spark_conf": {"spark.ui.port": str(free_port()), "spark.cores.max": "1", "spark.executor.memory": "512m",
                           **class_archive_conf()}}, cluster


def test_the_corpus_leaves_through_no_exit_of_a_deploy_upgrade_and_stop(target, streams, tmp_path, caplog):
    kind, fields, cluster = target
    script = tmp_path / "corpus_job.py"
    script.write_text(SCRIPT)
    source, sink, proof = Path(streams.path("input")), streams.path("output"), streams.path("proof.json")
    Path(proof + ".wanted").write_text(json.dumps({key: sha(value) for key, (value, _) in CONF_CORPUS.items()}))
    conf = {"spark.sql.shuffle.partitions": 2, **fields["spark_conf"],
            **{key: value for key, (value, _) in CONF_CORPUS.items()}}

    def spec(version: str):
        spec = streams.spec("corpus", str(script), [str(source), sink, streams.path("checkpoints", "corpus"), proof],
                            version=version, spark_conf=conf,
                            **{k: v for k, v in fields.items() if k != "spark_conf"})
        return type(spec).from_dict({**spec.to_dict(), "secret_args": {"--db-password": ARG_SECRET}})

    v1, v2 = spec("v1"), spec("v2")
    hook = streams.hook(v1)
    events: list[dict] = []
    caplog.set_level(logging.DEBUG)
    # The standalone REST driver gets its secret conf in its environment (targets/standalone.py: the
    # request's sparkProperties become -D options on the worker's command line): there, and only there,
    # a secret is no leak while the environment is readable by its own user only.
    private = frozenset({"AIRFLOW_STREAMING_SECRET_CONF"}) if kind == "standalone-cluster" else frozenset()
    with ProcessScanner(SECRETS, private_env=private) as scanner, Feeder(source) as feeder:
        deployed = LifecycleRunner(v1, Action.DEPLOY, OPTIONS, notify=events.append).run()
        assert deployed.step == Step.SUCCEEDED, deployed.error
        got = json.loads(wait_for(lambda: Path(proof).exists() and Path(proof).read_text(), 120, "the job's proof"))
        doc = hook.status()
        environment = wait_for(lambda: _environment(doc.spark_ui, doc.app_id), 60, "Spark's REST environment")

        Path(proof).unlink()
        upgraded = LifecycleRunner(v2, Action.UPGRADE, OPTIONS, notify=events.append).run()
        assert upgraded.step == Step.SUCCEEDED, upgraded.error
        got_v2 = json.loads(wait_for(lambda: Path(proof).exists() and Path(proof).read_text(), 120, "v2's proof"))
        stream = _streams_page(v2.control_location)

        stopped = LifecycleRunner(v2, Action.STOP, OPTIONS, notify=events.append).run()
        assert stopped.step == Step.SUCCEEDED, stopped.error
        fed = feeder.count

    # Delivered: the driver had every value, and the secret argument, in both versions.
    for proof_doc in (got, got_v2):
        assert proof_doc == {**dict.fromkeys(CONF_CORPUS, True), "--db-password": sha(ARG_SECRET)}, proof_doc
    assert fed > 3 and Path(sink).is_dir()

    # The process table, scanned all along, saw the drivers and the gate, and no secret. Locally the
    # driver is spark-submit's JVM and the gate a child process; on the standalone cluster the submission
    # is a REST call, the worker starts the driver (DriverWrapper) and the gate is a driver (--gate-only).
    driver, gate = (("org.apache.spark.deploy.SparkSubmit", "airflow_streaming.compat") if kind == "local"
                    else ("org.apache.spark.deploy.worker.DriverWrapper", "--gate-only"))
    assert scanner.scans > 10 and scanner.saw(lambda a: driver in a), f"no {driver} process was ever seen"
    assert scanner.saw(lambda a: gate in a), f"the gate ({gate}) was never seen"
    assert scanner.leaks == []
    assert scanner.private_env_seen == set(private), "the secret conf did not travel where it was expected"

    # At rest: control files (records, history, snapshots, driver logs), checkpoints, the sink, the
    # worker's copies of the driver's stdout and stderr.
    history = json.loads((Path(v2.control_dir) / "history.json").read_text())
    assert [h["action"] for h in history][-3:] == ["deploy", "upgrade", "stop"], history
    assert upgraded.snapshot, "the upgrade took no snapshot"
    at_rest = [hit for hit in files_holding(tmp_path, SECRETS) if not hit.startswith(str(tmp_path / "cluster"))]
    assert at_rest == []
    if cluster is not None:
        assert list(cluster.work_dir.glob("driver-*/stderr"))
        assert files_holding(cluster.work_dir, SECRETS) == []
    deployed_spec = json.loads((Path(v2.control_dir) / "deployed.json").read_text())["spec"]
    assert set(deployed_spec["spark_conf"][key] for key in CONF_CORPUS) == {"***"}
    assert deployed_spec["secret_args"] == {"--db-password": "***"}

    # The Streams page's JSON, the task log, the notifications, Spark's REST API.
    assert stream["overview"]["name"] == "corpus" and leaks_in(json.dumps(stream, default=str)) == []
    assert "Upgrade" in caplog.text or "upgrade" in caplog.text
    assert leaks_in(caplog.text) == []
    assert {e["kind"] for e in events} >= {"UPGRADE_SUCCEEDED"}, events
    for event in map(StreamEvent.from_dict, events):
        rendered = [*render_text(event), json.dumps(render_slack(event)), json.dumps(render_json(event)),
                    render_html(event)]
        assert leaks_in("\n".join(rendered)) == [], event.kind
    assert "spark.kafka.sasl.jaas.config" in environment and leaks_in(environment) == []
    print(f"{kind}: {len(SECRETS)} secrets, {scanner.scans} process scans, {len(events)} events, {fed} input files")


def _environment(spark_ui: str | None, app_id: str | None) -> str | None:
    if not spark_ui or not app_id:
        return None
    try:
        with urllib.request.urlopen(f"{spark_ui}/api/v1/applications/{app_id}/environment", timeout=10) as response:
            return response.read().decode()
    except OSError:
        return None


def _streams_page(control_location: str) -> dict:
    """What the Streams page's API serves for the stream: its overview row and its detail."""
    found = discover(None, [control_location])
    assert found.errors == [] and [r.name for r in found.streams] == ["corpus"], found
    snap = read_stream(found.streams[0])
    return {"overview": views.overview_row(snap), "detail": views.stream_detail(snap)}
