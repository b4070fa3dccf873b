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
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import SpecError, StreamSpec
from airflow_streaming.targets import target_for
from airflow_streaming.targets.base import Liveness
from airflow_streaming.targets.standalone import SECRET_CONF_ENV, StandaloneClusterTarget, liveness_of

SECRET = "sa-s3cr3t-42f0"


def spec(tmp_path, **overrides) -> StreamSpec:
    fields = dict(name="etl", application="events_etl", checkpoint_location=str(tmp_path / "ckpt"),
                  control_location=str(tmp_path / "ctl"), master="spark://m1:7077,m2:7077", deploy_mode="cluster",
                  master_ui_url="http://m1:8090",
                  spark_conf={"spark.hadoop.x.password": SECRET, "spark.sql.shuffle.partitions": "1"},
                  cluster={"python": "/opt/py/bin/python3", "driver_memory": "1g", "driver_cores": 2})
    fields.update(overrides)
    return StreamSpec(**fields)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_request_runs_the_launcher_through_python_runner_with_secrets_only_in_the_environment(tmp_path):
    hook = SparkStreamHook(spec(tmp_path))
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
    assert props["spark.driver.memory"] == "1g" and props["spark.driver.cores"] == "2"
    assert props["spark.sql.shuffle.partitions"] == "1"
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
    hook = SparkStreamHook(spec(tmp_path, cluster={"runtime_path": "/srv/airflow-streaming/"}))
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


# --------------------------------------------------------------------------- the lease seen from another host
def _lease_elsewhere(tmp_path, master_says, lease_run="r1", lease_host="driver-host"):
    """A hook on this host; driver.json of run r1 (a standalone submission) and a fresh lease written by a
    driver on ``lease_host``; the master answers ``master_says`` (a driverState, NOT_FOUND or DOWN)."""
    from airflow_streaming.control import contract

    hook = SparkStreamHook(spec(tmp_path, master="spark://m1:7077"))
    hook.storage.makedirs(hook.paths.root)
    record = DriverRecord(run_id="r1", stream="etl", version="v1", application="events_etl", host="submitter",
                          command="", log_path="", submitted_at=time.time(), checkpoint_location="/c",
                          target=hook.target.kind,
                          handle={"submission_id": "driver-1", "rest_url": "http://m1:6066"})
    hook.storage.unguarded.write_atomic(hook.paths.driver, record.to_json())
    now = time.time()
    lease = contract.Lease(lease_run, 4242, 12.5, lease_host, now - 30, now - 1, 120.0)
    hook.storage.unguarded.write_atomic(hook.paths.lease, lease.to_json())
    asked = []

    def status(handle):
        asked.append(handle["submission_id"])
        if master_says == "DOWN":
            from airflow_streaming.targets.cluster_http import ClusterUnreachableError

            raise ClusterUnreachableError("GET http://m1:6066/v1/submissions/status/driver-1", "refused", "")
        if master_says == "NOT_FOUND":
            return {"action": "SubmissionStatusResponse", "success": False}
        return {"action": "SubmissionStatusResponse", "success": True, "driverState": master_says}

    hook.target._status = status
    return hook, asked


@pytest.mark.parametrize("state", ["KILLED", "FINISHED", "FAILED"])
def test_a_driver_the_master_reports_exited_is_gone_from_any_host_despite_its_left_over_lease(tmp_path, state):
    # Killed through the master from a host that cannot see the driver's pid: the lease it held is fresh
    # (renewed 1 s ago, ttl 120 s), but the worker confirmed that the process ended - not running.
    hook, asked = _lease_elsewhere(tmp_path, state)
    liveness, detail = hook.driver_liveness()
    assert liveness == Liveness.GONE and asked == ["driver-1"], detail
    assert f"driver-1 of run r1 is {state}" in detail and "lease it held (pid 4242 on driver-host" in detail
    assert hook.running_driver() is None


@pytest.mark.parametrize("state", ["RUNNING", "SUBMITTED", "RELAUNCHING", "ERROR", "NOT_FOUND", "DOWN", "UNKNOWN"])
def test_the_lease_still_rules_unless_the_master_reports_the_process_exited(tmp_path, state):
    # ERROR: the master lost the driver's worker (its driver may still run, cut off); NOT_FOUND: forgotten
    # (a restarted master); DOWN: no answer. None of these proves the lease holder gone.
    hook, _ = _lease_elsewhere(tmp_path, state)
    liveness, detail = hook.driver_liveness()
    assert liveness == Liveness.ALIVE and detail == "driver pid 4242 on driver-host holds the lease (run r1)"


def test_an_exited_submission_of_another_run_says_nothing_about_the_lease(tmp_path):
    # The lease belongs to a run that is not the recorded one: its holder is not the driver the master reports.
    hook, asked = _lease_elsewhere(tmp_path, "KILLED", lease_run="r0")
    assert hook.driver_liveness()[0] == Liveness.ALIVE and asked == []


def test_on_the_lease_holders_own_host_the_pid_decides_not_the_master(tmp_path):
    # Same host: Lease.is_stale checks the pid (4242 with another start time is not the holder: stale).
    hook, asked = _lease_elsewhere(tmp_path, "RUNNING", lease_host=socket.gethostname())
    liveness, _ = hook.driver_liveness()
    assert liveness == Liveness.ALIVE and asked == ["driver-1"]  # stale lease -> the master's RUNNING decides


# --------------------------------------------------------------------------- whose driver, which master (issue 35)
class _MasterStandIn:
    """A standalone master's REST server, master UI and one worker UI in one HTTP server (the protocol only):
    submission ``sid`` is RUNNING on worker w1, whose launch command carries ``launch`` (flag -> value)."""

    def __init__(self, sid: str, launch: dict[str, str], state: str = "RUNNING"):
        import http.server
        import threading

        self.sid, self.launch, self.state, self.asked, self.kills = sid, launch, state, [], []
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _reply(self, body, content_type="application/json"):
                data = (json.dumps(body) if content_type == "application/json" else body).encode()
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                stand_in.asked.append(self.path)
                if self.path.startswith("/v1/submissions/status/"):
                    return self._reply({"action": "SubmissionStatusResponse", "success": True,
                                        "driverState": stand_in.state, "workerId": "w1"})
                if self.path.startswith("/json"):
                    return self._reply({"workers": [{"id": "w1", "webuiaddress": stand_in.url}],
                                        "activedrivers": [{"id": stand_in.sid, "worker": "w1", "state": stand_in.state}]})
                if self.path.startswith("/log"):
                    flags = " ".join(f'"{k}" "{v}"' for k, v in stand_in.launch.items())
                    return self._reply(f'Launch Command: "java" "org.apache.spark.deploy.worker.DriverWrapper" '
                                       f'"launch.py" {flags}\n========================================\n',
                                       "text/plain")
                self.send_response(404)
                self.end_headers()

            def do_POST(self):
                stand_in.asked.append(self.path)
                stand_in.kills.append(self.path)
                stand_in.state = "KILLED"
                self._reply({"action": "KillSubmissionResponse", "success": True, "message": "Kill request submitted"})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _standalone_record(stream: str, sid: str, rest_url: str, run_id: str = "r1") -> DriverRecord:
    return DriverRecord(run_id=run_id, stream=stream, version="v1", application="events_etl", host="h", command="",
                        log_path="", submitted_at=time.time(), checkpoint_location="/c", target="standalone-cluster",
                        handle={"submission_id": sid, "rest_url": rest_url, "master_ui_url": rest_url})


def test_a_forged_record_naming_another_streams_submission_is_refused(tmp_path):
    """Stream B's record naming stream A's submission and run id: the launch command on the worker names stream
    A and A's control directory, so B refuses and kills nothing; A's own kill goes through."""
    sid = "driver-20261127000000-0001"
    master = _MasterStandIn(sid, {"--stream": "a", "--control-dir": str(tmp_path / "ctl" / "a"), "--run-id": "r1"})
    try:
        def target_of(stream: str) -> StandaloneClusterTarget:
            return StandaloneClusterTarget(LocalStorage(), ControlPaths(str(tmp_path / "ctl" / stream)),
                                           {"rest_url": master.url, "master_ui_url": master.url},
                                           master="spark://127.0.0.1:7077")

        b = target_of("b")
        for stream in ("b", "a"):  # the record's stream field rewritten by the forger, or left as A's
            outcome = b.kill(_standalone_record(stream, sid, master.url), grace=1)
            assert outcome.startswith("refusing to kill") and "nothing was killed" in outcome, outcome
        assert "launched for stream 'a'" in b.kill(_standalone_record("b", sid, master.url), grace=1)
        assert master.kills == [] and b.adopt("r1") is None
        outcome = target_of("a").kill(_standalone_record("a", sid, master.url), grace=2)
        assert "sent to" in outcome and master.kills == [f"/v1/submissions/kill/{sid}"], outcome
    finally:
        master.close()


def test_the_rest_server_a_record_names_is_never_asked(tmp_path, caplog):
    """A record whose rest_url / master_ui_url points at a fake master saying RUNNING: only the configured REST
    server is asked (here it does not answer: UNKNOWN, never the fake's ALIVE), and the record is reported."""
    sid = "driver-20261127000000-0002"
    fake = _MasterStandIn(sid, {"--stream": "etl", "--control-dir": str(tmp_path / "ctl" / "etl"), "--run-id": "r1"})
    try:
        port = closed_port()
        target = StandaloneClusterTarget(LocalStorage(), ControlPaths(str(tmp_path / "ctl" / "etl")),
                                         {"rest_url": f"http://127.0.0.1:{port}",
                                          "master_ui_url": f"http://127.0.0.1:{port}"},
                                         master="spark://127.0.0.1:7077")
        record = _standalone_record("etl", sid, fake.url)
        assert target.state(record).liveness == Liveness.UNKNOWN
        assert target.kill(record, grace=1).startswith("cannot kill")
        assert fake.asked == [] and fake.kills == []
        # The hook rebuilds a standalone target from the spec's settings only, never from the record.
        hook = SparkStreamHook(spec(tmp_path, master="local[2]", deploy_mode=None, master_ui_url=None,
                                    cluster={"rest_url": f"http://127.0.0.1:{port}"}))
        assert hook.target_of(record).rest_urls == [f"http://127.0.0.1:{port}"]
        fake.asked.clear()
        working = StandaloneClusterTarget(LocalStorage(), ControlPaths(str(tmp_path / "ctl" / "etl")),
                                          {"rest_url": fake.url, "master_ui_url": fake.url}, master="spark://x:7077")
        state = working.state(_standalone_record("etl", sid, f"http://127.0.0.1:{port}"))
        assert state.alive and f"127.0.0.1:{port}" in state.detail and "not configured" in caplog.text
    finally:
        fake.close()


def test_a_target_rebuilt_for_a_record_asks_the_specs_own_master_ui(tmp_path):
    """A host that operates a stream it did not deploy (tests/integration/test_two_hosts.py) rebuilds the target
    from the spec for the record: the spec's top-level ``master_ui_url`` is where the worker's launch command is
    read (what a kill checks) - not the default ``<master host>:8080``, and never the record's URL."""
    hook = SparkStreamHook(spec(tmp_path, master="local[2]", deploy_mode=None, master_ui_url="http://m1:8090",
                                cluster={"rest_url": "http://m1:6066"}))
    record = _standalone_record("etl", "driver-20261127000000-0003", "http://elsewhere:9999")
    rebuilt = hook.target_of(record)
    assert isinstance(rebuilt, StandaloneClusterTarget) and rebuilt.master_ui_url == "http://m1:8090"
