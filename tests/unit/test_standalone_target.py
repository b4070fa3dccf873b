"""Standalone cluster target without a cluster: the REST request it builds (secrets only in the
environment), the state mapping, URL defaults, and a master that does not answer (UNKNOWN, never
GONE). The real master + worker test is ``tests/integration/test_standalone_cluster.py``."""

from __future__ import annotations

import json
import socket
import time

import pytest

from airflow_streaming.control.contract import ControlPaths, DriverRecord
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.exceptions import StreamStateUnknownError
from airflow_streaming.hooks.streaming_job import StreamingJobHook
from airflow_streaming.spec import SpecError, StreamSpec
from airflow_streaming.targets import target_for
from airflow_streaming.targets.base import Liveness
from airflow_streaming.targets.standalone import SECRET_CONF_ENV, StandaloneClusterTarget, liveness_of

SECRET = "sa-s3cr3t-42f0"


def spec(tmp_path, **overrides) -> StreamSpec:
    fields = dict(name="etl", application="events_etl", checkpoint_location=str(tmp_path / "ckpt"),
                  control_location=str(tmp_path / "ctl"), master="spark://m1:7077,m2:7077", deploy_mode="cluster",
                  master_ui_url="http://m1:8090", spark_conf={"spark.hadoop.x.password": SECRET, "spark.a": "1"},
                  cluster={"python": "/opt/py/bin/python3", "driver_memory": "1g", "driver_cores": 2})
    fields.update(overrides)
    return StreamSpec(**fields)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_request_runs_the_launcher_through_python_runner_with_secrets_only_in_the_environment(tmp_path):
    hook = StreamingJobHook(spec(tmp_path))
    target = hook.target
    assert isinstance(target, StandaloneClusterTarget)
    assert target.rest_urls == ["http://m1:6066", "http://m2:6066"] and target.master_ui_url == "http://m1:8090"
    plan = hook.launch_plan("20261123T000000Z-12345678")
    body = target.request_body(plan)
    assert body["action"] == "CreateSubmissionRequest"
    assert body["mainClass"] == "org.apache.spark.deploy.PythonRunner"
    assert body["appResource"] == f"file:{plan.launcher}" and plan.launcher.endswith("spark_jobs/launch.py")
    # PythonRunner: the script, the py-files ("" for none), then the runtime's own arguments.
    assert body["appArgs"][:2] == [plan.launcher, ""] and body["appArgs"][2:] == plan.runtime_args
    assert "--run-id" in body["appArgs"] and "20261123T000000Z-12345678" in body["appArgs"]
    props = body["sparkProperties"]
    assert props["spark.master"] == "spark://m1:7077,m2:7077" and props["spark.submit.deployMode"] == "cluster"
    assert props["spark.driver.supervise"] == "false" and props["spark.app.name"] == "etl:v1"
    assert props["spark.airflow_streaming.run_id"] == "20261123T000000Z-12345678"
    assert props["spark.driver.memory"] == "1g" and props["spark.driver.cores"] == "2" and props["spark.a"] == "1"
    assert props["spark.pyspark.python"] == "/opt/py/bin/python3"
    # sparkProperties become -D options on the worker's driver command line: the secret is not there.
    assert SECRET not in json.dumps(props) and SECRET not in json.dumps(body["appArgs"])
    assert json.loads(body["environmentVariables"][SECRET_CONF_ENV]) == {"spark.hadoop.x.password": SECRET}
    assert body["environmentVariables"]["PYSPARK_PYTHON"] == "/opt/py/bin/python3"
    command = target.describe_command(plan)
    assert command.startswith("POST http://m1:6066/v1/submissions/create org.apache.spark.deploy.PythonRunner")
    assert "spark.submit.deployMode=cluster" in command and "+1 secret conf entries" in command
    assert SECRET not in command


def test_runtime_path_points_the_workers_at_their_copy_of_the_project(tmp_path):
    hook = StreamingJobHook(spec(tmp_path, cluster={"runtime_path": "/srv/airflow-streaming/"}))
    plan = hook.launch_plan("r1")
    assert plan.launcher == "/srv/airflow-streaming/spark_jobs/launch.py"
    assert hook.target.request_body(plan)["appArgs"][0] == plan.launcher


@pytest.mark.parametrize("state, expected", [
    ("SUBMITTED", Liveness.ALIVE), ("RUNNING", Liveness.ALIVE), ("RELAUNCHING", Liveness.ALIVE),
    ("FINISHED", Liveness.GONE), ("KILLED", Liveness.GONE), ("FAILED", Liveness.GONE), ("ERROR", Liveness.GONE),
    (None, Liveness.GONE), ("UNKNOWN", Liveness.UNKNOWN),
])
def test_state_mapping(state, expected):
    assert liveness_of(state) == expected


def test_a_master_that_does_not_answer_is_unknown_and_nothing_is_killed(tmp_path):
    port = closed_port()
    target = StandaloneClusterTarget(LocalStorage(), ControlPaths(str(tmp_path)),
                                     {"rest_url": f"http://127.0.0.1:{port}", "master_ui_url": f"http://127.0.0.1:{port}"},
                                     master="spark://127.0.0.1:7077")
    record = DriverRecord(run_id="r1", stream="etl", version="v1", application="events_etl", host="h", command="",
                          log_path="", submitted_at=time.time(), checkpoint_location="/c", target=target.kind,
                          handle={"submission_id": "driver-20261123000000-0000",
                                  "rest_url": f"http://127.0.0.1:{port}"})
    started = time.monotonic()
    state = target.state(record)
    assert state.liveness == Liveness.UNKNOWN and f"127.0.0.1:{port}" in state.detail
    assert "spark.master.rest.enabled" in state.detail  # what to check
    assert target.kill(record, grace=1).startswith("cannot kill")
    with pytest.raises(StreamStateUnknownError):
        target.find("r1", record)
    assert time.monotonic() - started < 30
    assert target.state(DriverRecord(**{**record.__dict__, "handle": {}})).liveness == Liveness.GONE


def test_supervise_true_is_refused_the_projects_supervisor_is_the_one_restarter(tmp_path):
    with pytest.raises(SpecError, match="cluster.supervise: true is not supported"):
        spec(tmp_path, cluster={"supervise": True})
    spec(tmp_path, cluster={"supervise": False})


def test_target_for_maps_masters_and_modes(tmp_path):
    storage, paths = LocalStorage(), ControlPaths(str(tmp_path))
    assert target_for(spec(tmp_path), storage, paths).kind == "standalone-cluster"
    assert target_for(spec(tmp_path, deploy_mode="client"), storage, paths).kind == "local"
    assert target_for(spec(tmp_path, master="yarn", cluster={"resourcemanager_url": "http://rm:8088"}),
                      storage, paths).kind == "yarn"
    assert target_for(spec(tmp_path, master="k8s://https://k:6443", cluster={"image": "i"}), storage, paths).kind \
        == "kubernetes"
