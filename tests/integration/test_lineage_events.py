"""The lifecycle operators' OpenLineage events, through Airflow's OpenLineage provider and a real transport,
validated against the OpenLineage JSON schema (issue 37, "Lineage").

Real Airflow (``airflow dags test`` in a subprocess: the provider's listener in the task runner), the provider
configured by ``AIRFLOW__OPENLINEAGE__TRANSPORT`` only (without it the provider is disabled). Two transports:
the file transport (one JSON event per line) and the HTTP transport posting to a receiver on loopback
started and stopped here. Every event received is validated (``tests/openlineage_schema.py``: the spec's
``RunEvent`` and each facet against the schema its ``_schemaURL`` names).
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openlineage_schema import validate_event

pytest.importorskip("airflow.providers.openlineage", reason="the OpenLineage provider (extra `openlineage`) is not installed")

pytestmark = [pytest.mark.airflow]

FACET = "airflowStreaming"
SECRET = "lineage-s3cr3t-4711"
OWN_SCHEMA = ("https://raw.githubusercontent.com/airflow-streaming/airflow-streaming/main/"
              "airflow_streaming/operators/SparkStreamRunFacet.json#/$defs/SparkStreamRunFacet")

DAG_FILE = """
from airflow.sdk import DAG

from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.operators.stop import SparkStreamStopOperator

SPEC = {spec}

with DAG({dag_id!r}, schedule=None):
    {tasks}
"""


def _run_dag(tmp_path: Path, dag_id: str, spec: dict[str, Any], tasks: str, transport: dict[str, Any]) -> str:
    dags = tmp_path / "dags"
    dags.mkdir(exist_ok=True)
    (dags / f"{dag_id}.py").write_text(DAG_FILE.format(spec=repr(spec), dag_id=dag_id, tasks=tasks))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport)}
    env.pop("AIRFLOW__OPENLINEAGE__DISABLED", None)
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", dag_id], env=env, capture_output=True,
                         text=True, timeout=600)
    return run.stdout[-4000:] + run.stderr[-4000:]


def _task_events(events: list[dict[str, Any]], job: str) -> dict[str, dict[str, Any]]:
    """The events of one task (job name ``<dag>.<task>``) by eventType; one of each at most."""
    mine = [event for event in events if event["job"]["name"] == job]
    kinds = [event["eventType"] for event in mine]
    assert len(kinds) == len(set(kinds)), kinds
    return {event["eventType"]: event for event in mine}


def _datasets(event: dict[str, Any], kind: str) -> list[tuple[str, str]]:
    return [(dataset["namespace"], dataset["name"]) for dataset in event[kind]]


def _stream_facet(event: dict[str, Any]) -> dict[str, Any]:
    facet = event["run"]["facets"].get(FACET)
    assert facet is not None, f"no {FACET} facet (the operator returned nothing): {sorted(event['run']['facets'])}"
    assert facet["_schemaURL"] == OWN_SCHEMA and facet["_producer"].startswith(
        "https://github.com/airflow-streaming/airflow-streaming/tree/"), facet
    return {key: value for key, value in facet.items() if not key.startswith("_")}


def test_a_refused_deploy_and_a_stop_emit_valid_events_to_a_file_transport(streams, airflow_db, tmp_path):
    """No Spark: the deploy is refused before submitting (its application is missing) and the stop finds the
    stream not running. START and FAIL of the deploy, START and COMPLETE of the stop, all schema-valid."""
    spec = streams.spec("lineage_refused", str(tmp_path / "missing_job.py"), [],
                        spark_conf={"spark.hadoop.fs.s3a.secret.key": SECRET}, assets={
        "sources": ["kafka://broker.example:9092/orders", Path(streams.path("input")).as_uri()],
        "sinks": [Path(streams.path("output", "lineage")).as_uri() + "/", "s3://lake/streams/orders"]})
    log = tmp_path / "lineage" / "events.jsonl"
    log.parent.mkdir()
    assert SECRET in repr(spec.to_dict())  # the task's spec holds it: the events must not
    output = _run_dag(tmp_path, "lineage_refused", spec.to_dict(),
                      "SparkStreamStopOperator(task_id='stop', spec=SPEC) >> "
                      "SparkStreamDeployOperator(task_id='deploy', spec=SPEC, trigger_rule='all_done')",
                      {"type": "file", "log_file_path": str(log), "append": True})
    assert log.exists(), output
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    checked = {url for event in events for url in validate_event(event)}
    assert OWN_SCHEMA in checked

    deploy = _task_events(events, "lineage_refused.deploy")
    assert sorted(deploy) == ["FAIL", "START"], (sorted(deploy), output)
    inputs = [("kafka://broker.example:9092", "orders"), ("file", streams.path("input"))]
    outputs = [("file", streams.path("output", "lineage")), ("s3://lake", "streams/orders")]
    expected = {"stream": "lineage_refused", "version": "v1", "action": "deploy", "deployMode": "client",
                "checkpointLocation": spec.checkpoint_location}
    for event in deploy.values():
        assert _datasets(event, "inputs") == inputs and _datasets(event, "outputs") == outputs, event
        facet = _stream_facet(event)
        assert {key: facet[key] for key in expected} == expected, facet
        assert facet["sparkRuntime"] and "runId" not in facet, facet  # refused: no run
    stop = _task_events(events, "lineage_refused.stop")
    assert sorted(stop) == ["COMPLETE", "START"], (sorted(stop), output)
    for event in stop.values():
        assert event["inputs"] == [] and event["outputs"] == [], event  # a stop reads and writes no data
        assert _stream_facet(event)["action"] == "stop"
    assert SECRET not in log.read_text() and "spark_conf" not in log.read_text(), "the spec's spark_conf leaked"


class _Receiver(http.server.ThreadingHTTPServer):
    """An OpenLineage HTTP receiver on loopback: keeps each POSTed event."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.paths.append(self.path)
                receiver.events.append(json.loads(body))
                self.send_response(201)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    server = _Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.long(covered_by="tests/integration/test_lineage_events.py::"
                           "test_a_refused_deploy_and_a_stop_emit_valid_events_to_a_file_transport")
@pytest.mark.spark
def test_a_real_deploy_emits_start_and_complete_with_its_run_to_an_http_receiver(streams, airflow_db, tmp_path,
                                                                                    receiver):
    """A real deploy (a local Spark driver) and stop: the deploy's COMPLETE carries the run it started."""
    from signals import Feeder

    spec = streams.etl_spec("lineage", assets={"sources": [Path(streams.path("input", "lineage")).as_uri()],
                                               "sinks": [Path(streams.path("output", "lineage")).as_uri()]})
    streams.hook(spec)  # cleanup by pid, whatever happens
    Feeder(streams.path("input", "lineage")).feed(20)
    url = f"http://127.0.0.1:{receiver.server_address[1]}"
    output = _run_dag(tmp_path, "lineage_deploy", spec.to_dict(),
                      "SparkStreamDeployOperator(task_id='deploy', spec=SPEC) >> "
                      "SparkStreamStopOperator(task_id='stop', spec=SPEC)",
                      {"type": "http", "url": url, "endpoint": "api/v1/lineage"})
    events = list(receiver.events)
    assert events, output
    assert set(receiver.paths) == {"/api/v1/lineage"}, receiver.paths
    for event in events:
        validate_event(event)

    deploy = _task_events(events, "lineage_deploy.deploy")
    assert sorted(deploy) == ["COMPLETE", "START"], (sorted(deploy), output)
    for event in deploy.values():
        assert _datasets(event, "inputs") == [("file", streams.path("input", "lineage"))], event
        assert _datasets(event, "outputs") == [("file", streams.path("output", "lineage"))], event
    start, complete = _stream_facet(deploy["START"]), _stream_facet(deploy["COMPLETE"])
    assert "runId" not in start, start  # not known before the driver runs
    from airflow_streaming.lifecycle.stored import read_history

    history = [entry for entry in read_history(streams.hook(spec)) if entry.get("action") == "deploy"]
    assert complete["runId"] == history[-1]["new_run_id"], (complete, history[-1])
    assert {key: complete[key] for key in ("stream", "version", "action", "checkpointLocation", "deployMode")} == {
        "stream": "lineage", "version": "v1", "action": "deploy", "checkpointLocation": spec.checkpoint_location,
        "deployMode": "client"}
    stop = _task_events(events, "lineage_deploy.stop")
    assert sorted(stop) == ["COMPLETE", "START"], sorted(stop)
    record = streams.hook(spec).driver_record()
    assert record is None or not streams.hook(spec).alive(record)
