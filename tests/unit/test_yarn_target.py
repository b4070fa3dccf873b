"""YARN cluster target against PROTOCOL STAND-INS: a ResourceManager REST API stand-in
(``tests/standins/yarn_rm.py``) and a stand-in ``spark-submit`` (``tests/standins/fake_spark_submit.py``).
No YARN runs here: these tests check the exact spark-submit command, the RM client, the state mapping
and the identity checks - not YARN itself."""

from __future__ import annotations

import json
import time
import logging
import os
import socket
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from airflow_streaming.exceptions import DriverStartError, StreamStateUnknownError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec
from airflow_streaming.targets.base import Liveness
from airflow_streaming.targets.yarn import YarnClusterTarget, liveness_of, rm_url_from_yarn_site, run_tag
from standins.yarn_fixtures import rm, submit_record  # noqa: F401 - fixtures
import stream_actions

SECRET = "s3cr3t-yarn-value-9f2"


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"




def calls(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()]


def conf_of(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--conf")


def yarn_spec(tmp_path: Path, rm_url: str, name: str = "etl", **cluster) -> StreamSpec:
    return StreamSpec(name=name, application="events_etl", checkpoint_location=str(tmp_path / "ckpt" / name),
                      control_location=str(tmp_path / "ctl"), master="yarn", deploy_mode="cluster",
                      application_args=["--input", "/in", "--output", "/out", "--quarantine", "/q"],
                      cluster={"resourcemanager_url": rm_url, "queue": "streams", **cluster},
                      spark_conf={"spark.hadoop.fs.s3a.secret.key": SECRET, "spark.sql.shuffle.partitions": 4})


def test_submission_is_spark_submit_in_cluster_mode_with_the_run_tag_and_no_secret_on_argv(tmp_path, rm,
                                                                                          submit_record):
    hook = SparkStreamHook(yarn_spec(tmp_path, rm.url))
    record = stream_actions.submit(hook)

    (call,) = calls(submit_record)
    argv = call["argv"]
    assert argv[:4] == ["--master", "yarn", "--deploy-mode", "cluster"]
    conf = conf_of(argv)
    assert conf["spark.yarn.submit.waitAppCompletion"] == "false"
    assert conf["spark.yarn.maxAppAttempts"] == "1"
    assert conf["spark.yarn.queue"] == "streams"
    assert run_tag(record.run_id) in conf["spark.yarn.tags"].split(",")
    assert "airflow-streaming-stream-etl" in conf["spark.yarn.tags"].split(",")
    assert conf["spark.airflow_streaming.run_id"] == record.run_id
    assert conf["spark.sql.shuffle.partitions"] == "4"
    assert call["pyspark_python"] is None  # this host's Python path means nothing on a NodeManager
    # The runtime ships with the application: a zip with the launcher's imports.
    bundle = argv[argv.index("--py-files") + 1]
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
    assert {"spark_jobs/launch.py", "spark_jobs/runtime/launcher.py", "spark_jobs/jobs/events_etl.py",
            "airflow_streaming/control/contract.py"} <= names
    assert not any(n.startswith(("airflow_streaming/hooks", "airflow_streaming/operators")) for n in names)
    launcher = argv.index(next(a for a in argv if a.endswith("spark_jobs/launch.py")))
    assert argv[launcher + 1:launcher + 7] == ["--stream", "etl", "--version", "v1", "--run-id", record.run_id]
    # The secret: never on the command line, only in the 0600 properties file, deleted after submitting.
    assert SECRET not in " ".join(argv) and SECRET not in record.command
    assert call["properties_mode"] == "0o600" and f"spark.hadoop.fs.s3a.secret.key={SECRET}" in call["properties"]
    assert not os.path.exists(call["properties_file"])
    # The handle: what another host needs.
    (app_id,) = rm.apps
    assert record.target == "yarn" and record.handle["app_id"] == app_id and record.handle["rm_url"] == rm.url
    assert rm.apps[app_id]["queue"] == "streams"
    note = hook.storage.read_text(record.log_path)
    assert app_id in note and "INFO YarnClientImpl: Submitted application" in note and SECRET not in note


@pytest.mark.parametrize("state, expected", [
    ("NEW", Liveness.ALIVE), ("NEW_SAVING", Liveness.ALIVE), ("SUBMITTED", Liveness.ALIVE),
    ("ACCEPTED", Liveness.ALIVE), ("RUNNING", Liveness.ALIVE), ("FINISHED", Liveness.GONE),
    ("FAILED", Liveness.GONE), ("KILLED", Liveness.GONE), (None, Liveness.GONE), ("SOMETHING_NEW", Liveness.UNKNOWN),
])
def test_state_mapping(state, expected):
    assert liveness_of(state) == expected


def test_state_follows_the_resourcemanager_and_an_unreachable_rm_is_unknown(tmp_path, rm, submit_record):
    hook = SparkStreamHook(yarn_spec(tmp_path, rm.url))
    record = stream_actions.submit(hook)
    target = hook.target_of(record)
    app_id = record.handle["app_id"]
    assert target.state(record).liveness == Liveness.ALIVE and target.state(record).cluster_state == "ACCEPTED"
    rm.set_state(app_id, "RUNNING")
    assert hook.driver_liveness()[0] == Liveness.ALIVE
    rm.set_state(app_id, "FAILED", "FAILED", "User application exited with status 3\nstack...")
    state = target.state(record)
    assert state.liveness == Liveness.GONE and "FAILED" in state.detail and "exited with status 3" in state.detail
    assert target.state(replace(record, handle={**record.handle, "app_id": "application_1_9999"})).liveness \
        == Liveness.GONE  # 404: the RM does not know it
    down = replace(record, handle={"app_id": app_id, "rm_url": closed_port_url()})
    unreachable = YarnClusterTarget(hook.storage, hook.paths, {"resourcemanager_url": down.handle["rm_url"]})
    state = unreachable.state(down)
    assert state.liveness == Liveness.UNKNOWN and "did not answer" in state.detail and "resourcemanager_url" in state.detail


def test_kill_acts_only_on_the_recorded_run_and_sends_the_rm_kill(tmp_path, rm, submit_record):
    hook = SparkStreamHook(yarn_spec(tmp_path, rm.url))
    other_hook = SparkStreamHook(yarn_spec(tmp_path, rm.url, name="other"))
    record = stream_actions.submit(hook)
    other = stream_actions.submit(other_hook)
    for app in rm.apps:
        rm.set_state(app, "RUNNING")
    target = hook.target_of(record)

    forged = replace(record, handle={**record.handle, "app_id": other.handle["app_id"]})
    with stream_actions.step_permit(hook):  # a kill is a lifecycle step's
        outcome = target.kill(forged, grace=2)
    assert outcome.startswith("refusing to kill") and f"do not carry run {record.run_id}" in outcome, outcome
    assert rm.apps[other.handle["app_id"]]["state"] == "RUNNING" and rm.kills == []

    outcome = stream_actions.kill(hook, record, grace=5)
    assert "accepted" in outcome and "KILLED" in outcome, outcome
    assert rm.kills == [(record.handle["app_id"], target.user)]  # PUT .../state with user.name
    assert target.state(record).gone and rm.apps[other.handle["app_id"]]["state"] == "RUNNING"
    with stream_actions.step_permit(hook):  # a kill is a lifecycle step's
        assert target.kill(record, grace=1).startswith("nothing to kill")
    assert not hook.storage.exists(hook.paths.marker)


def test_find_uses_the_run_tag_and_an_unreachable_rm_raises(tmp_path, rm, submit_record):
    hook = SparkStreamHook(yarn_spec(tmp_path, rm.url))
    record = stream_actions.submit(hook)
    assert len(hook.processes_of_run(record.run_id)) == 1
    assert hook.processes_of_run("20990101T000000Z-deadbeef") == []
    # adopt: the run's one application by its tag, as if the record had never been written.
    assert hook.target.adopt(record.run_id) == record.handle
    assert hook.target.adopt("20990101T000000Z-deadbeef") is None
    rm.set_state(record.handle["app_id"], "KILLED", "KILLED")
    assert hook.target.adopt(record.run_id) is None
    assert hook.processes_of_run(record.run_id) == []
    target = YarnClusterTarget(hook.storage, hook.paths, {"resourcemanager_url": closed_port_url()})
    with pytest.raises(StreamStateUnknownError, match="cannot tell whether run"):
        target.find(record.run_id)


def test_a_failed_spark_submit_names_its_output_submits_nothing_and_shows_no_secret(tmp_path, rm, submit_record,
                                                                                  monkeypatch, caplog):
    monkeypatch.setenv("FAKE_SPARK_SUBMIT_EXIT", "1")
    hook = SparkStreamHook(yarn_spec(tmp_path, rm.url))
    with caplog.at_level(logging.DEBUG), pytest.raises(DriverStartError) as info:
        stream_actions.submit(hook)
    message = str(info.value)
    assert "spark-submit exit code 1" in message and "stand-in failure" in message and "HADOOP_CONF_DIR" in message
    assert SECRET not in message and SECRET not in caplog.text
    assert hook.driver_record() is None and not hook.storage.exists(hook.paths.marker) and rm.apps == {}
    (call,) = calls(submit_record)
    assert not os.path.exists(call["properties_file"])


def test_cluster_python_is_the_drivers_python(tmp_path, rm, submit_record):
    record = stream_actions.submit(SparkStreamHook(yarn_spec(tmp_path, rm.url, python="./venv/bin/python",
                                        archives=["hdfs:///envs/streams.tar.gz#venv"])))
    argv = calls(submit_record)[0]["argv"]
    conf = conf_of(argv)
    assert conf["spark.pyspark.python"] == conf["spark.yarn.appMasterEnv.PYSPARK_PYTHON"] == "./venv/bin/python"
    assert argv[argv.index("--archives") + 1] == "hdfs:///envs/streams.tar.gz#venv"
    assert record.handle["app_id"].startswith("application_")


def test_yarn_reattempts_are_refused_the_supervisor_is_the_one_restarter(tmp_path, rm, submit_record):
    hook = SparkStreamHook(yarn_spec(tmp_path, rm.url, max_app_attempts=3))
    with pytest.raises(ValueError, match="two restarts"):
        stream_actions.submit(hook)
    assert not submit_record.exists()


def test_urls_and_log_tail_come_from_the_rm_and_the_nodemanager(tmp_path, rm, submit_record):
    hook = SparkStreamHook(yarn_spec(tmp_path, rm.url))
    record = stream_actions.submit(hook)
    target = hook.target_of(record)
    app_id = record.handle["app_id"]
    links = target.urls(record)
    assert links["resourcemanager_app"] == f"{rm.url}/cluster/app/{app_id}"
    assert links["driver_log"].startswith(f"{rm.url}/node/containerlogs/container_")
    assert hook.log_tail(record.run_id, lines=1) == f"last line of {app_id}"


def test_resourcemanager_url_from_yarn_site(tmp_path, monkeypatch):
    (tmp_path / "yarn-site.xml").write_text(
        "<configuration>"
        "<property><name>yarn.resourcemanager.ha.rm-ids</name><value>rm1,rm2</value></property>"
        "<property><name>yarn.resourcemanager.webapp.address.rm1</name><value>rm-a.example:8088</value></property>"
        "</configuration>")
    assert rm_url_from_yarn_site(str(tmp_path)) == "http://rm-a.example:8088"
    assert rm_url_from_yarn_site(str(tmp_path / "missing")) is None
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    spec = yarn_spec(tmp_path, "http://x:8088")
    with pytest.raises(ValueError, match="cluster.resourcemanager_url"):
        YarnClusterTarget(None, None, {k: v for k, v in spec.cluster.items() if k != "resourcemanager_url"})


def test_a_record_is_checked_where_its_driver_runs_whatever_the_spec_says_now(tmp_path, rm, submit_record):
    record = stream_actions.submit(SparkStreamHook(yarn_spec(tmp_path, rm.url)))
    rm.set_state(record.handle["app_id"], "RUNNING")
    # The spec moved to local mode (its cluster settings still name the RM): the YARN driver is still seen, and
    # killed, through the configured ResourceManager - never judged "gone" by a local pid check. (The RM its
    # handle names is never asked: see test_the_resourcemanager_a_record_names_is_never_asked.)
    local = SparkStreamHook(replace(yarn_spec(tmp_path, rm.url), master="local[2]", deploy_mode=None,
                                    cluster={"resourcemanager_url": rm.url}))
    assert local.driver_liveness()[0] == Liveness.ALIVE
    assert local.target_of(record).kind == "yarn"
    assert "accepted" in stream_actions.kill(local, record, grace=5)
    assert rm.apps[record.handle["app_id"]]["state"] == "KILLED"


def test_a_user_script_is_shipped_with_the_application(tmp_path, rm, submit_record):
    script = tmp_path / "my_job.py"
    script.write_text("print('job')\n")
    spec = replace(yarn_spec(tmp_path, rm.url), application=str(script), application_args=("--x", "1"))
    stream_actions.submit(SparkStreamHook(spec))
    argv = calls(submit_record)[0]["argv"]
    assert conf_of(argv)["spark.yarn.dist.files"] == str(script)
    # In the application master's container the script sits in the working directory.
    assert argv[argv.index("--script") + 1] == "my_job.py" and argv[-3:] == ["--", "--x", "1"]


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_gate_driver_is_a_cluster_submission_that_touches_none_of_the_streams_files(tmp_path, rm, submit_record,
                                                                                      dry_run):
    """The cold gate of a cluster stream runs as a short driver on its target (``--gate-only``): submitted
    under the action's lock, recorded in ``gate-driver.json`` - never ``driver.json``, the run marker or
    the deployed spec, which name the running version."""
    from airflow_streaming.control.lifecycle_lock import LifecycleLock

    hook = SparkStreamHook(yarn_spec(tmp_path, rm.url))
    hook.storage.makedirs(hook.paths.root)
    lock = LifecycleLock.acquire(hook.storage, hook.paths.root, "upgrade", "test")
    try:
        gate = stream_actions.submit_gate(hook, "gate-u1", lock, dry_run=dry_run)
    finally:
        lock.release()
    (call,) = calls(submit_record)
    argv = call["argv"]
    assert argv[:4] == ["--master", "yarn", "--deploy-mode", "cluster"]
    launcher = argv.index(next(a for a in argv if a.endswith("spark_jobs/launch.py")))
    runtime = argv[launcher + 1:argv.index("--", launcher)]
    assert runtime[:6] == ["--stream", "etl", "--version", "v1", "--run-id", "gate-u1"]
    assert "--gate-only" in runtime and ("--gate-no-dry-run" in runtime) is (not dry_run)
    assert conf_of(argv)["spark.airflow_streaming.run_id"] == "gate-u1" and "gate" in argv[argv.index("--name") + 1]
    assert SECRET not in " ".join(argv)
    assert hook.gate_driver_record() == gate and gate.target == "yarn" and gate.handle["app_id"] in rm.apps
    for untouched in (hook.paths.marker, hook.paths.driver, hook.deployed_path, hook.paths.standby_driver):
        assert not hook.storage.exists(untouched), untouched


def test_a_gate_driver_submitted_but_never_recorded_is_found_by_its_tag_and_ended(tmp_path, rm, submit_record,
                                                                                 monkeypatch):
    """The gate's submitter killed before it wrote ``gate-driver.json``: the gate's helpers still find that
    driver by its tag - whether it ended, and to end it after the answer (else it would outlive the gate)."""
    from airflow_streaming.lifecycle.gate_steps import GateSteps
    from airflow_streaming.control.lifecycle_lock import LifecycleLock

    hook = SparkStreamHook(yarn_spec(tmp_path, rm.url))
    hook.storage.makedirs(hook.paths.root)
    lock = LifecycleLock.acquire(hook.storage, hook.paths.root, "upgrade", "test")
    try:
        first, second = stream_actions.submit_gate(hook, "gate-u1", lock), stream_actions.submit_gate(hook, "gate-u2", lock)
    finally:
        lock.release()
    hook.storage.unguarded.delete(hook.paths.gate_driver)  # as if the record had never been written
    for app in rm.apps:
        rm.set_state(app, "RUNNING")
    assert not GateSteps._gate_driver_gone(hook, "gate-u1")
    rm.set_state(first.handle["app_id"], "FINISHED", "SUCCEEDED")
    assert GateSteps._gate_driver_gone(hook, "gate-u1")

    monkeypatch.setattr(SparkStreamHook, "wait_gone", lambda self, record, timeout: False)  # did not exit
    with stream_actions.step_permit(hook, "upgrade") as permit:
        GateSteps._end_gate_driver(hook, "gate-u2", permit)
    assert [app for app, _ in rm.kills] == [second.handle["app_id"]]


def test_the_gates_wait_ends_when_its_recorded_driver_ends_without_an_answer(tmp_path, rm, submit_record):
    """A gate driver that died (an OOM, a bad image) does not make the upgrade wait out its deadline; the
    wait ends on the ResourceManager's word for the recorded application, or on the answer."""
    from airflow_streaming.control.lifecycle_lock import LifecycleLock
    from airflow_streaming.lifecycle.waits import FILE, Wait, wait_over

    hook = SparkStreamHook(yarn_spec(tmp_path, rm.url))
    hook.storage.makedirs(hook.paths.root)
    lock = LifecycleLock.acquire(hook.storage, hook.paths.root, "upgrade", "test")
    try:
        gate = stream_actions.submit_gate(hook, "gate-u1", lock)
    finally:
        lock.release()
    wait = Wait(FILE, hook.spec.to_dict(), None, time.time() + 600,
                {"path": hook.paths.gate_report, "id": "gate-u1", "gate_driver": "gate-u1"})
    rm.set_state(gate.handle["app_id"], "RUNNING")
    assert not wait_over(Wait.from_dict(wait.to_dict()))
    other = Wait(FILE, hook.spec.to_dict(), None, time.time() + 600,
                 {"path": hook.paths.gate_report, "id": "gate-u2", "gate_driver": "gate-u2"})
    rm.set_state(gate.handle["app_id"], "FAILED", "FAILED")
    assert wait_over(Wait.from_dict(wait.to_dict()))
    assert not wait_over(other)  # another gate's wait: its driver is not the recorded one
    hook.storage.unguarded.write_atomic(hook.paths.gate_report, json.dumps({"id": "gate-u2", "error": "x"}).encode())
    assert wait_over(other)  # its answer


# ---------------------------------------------------------------- whose application, which RM (issue 35)
def test_a_forged_record_naming_another_streams_application_is_refused(tmp_path, rm, submit_record):
    """Stream B's driver.json naming stream A's application AND A's run id (so the run tag matches): the tags
    of this stream and this control location are missing, so nothing is killed and the refusal says why."""
    a = SparkStreamHook(yarn_spec(tmp_path, rm.url, name="a"))
    b = SparkStreamHook(yarn_spec(tmp_path, rm.url, name="b"))
    victim = stream_actions.submit(a)
    rm.set_state(victim.handle["app_id"], "RUNNING")
    for record in (victim, replace(victim, stream="b")):
        outcome = stream_actions.kill(b, record, grace=1)
        assert outcome.startswith("refusing to kill") and "nothing was killed" in outcome, outcome
    assert "lack the stream tag airflow-streaming-stream-b" in outcome and "control location tag" in outcome
    # Same name, another control location: its control tag differs.
    elsewhere = SparkStreamHook(replace(yarn_spec(tmp_path, rm.url, name="a"), control_location=str(tmp_path / "x")))
    outcome = stream_actions.kill(elsewhere, victim, grace=1)
    assert outcome.startswith("refusing to kill") and "control location tag" in outcome, outcome
    assert rm.kills == [] and rm.apps[victim.handle["app_id"]]["state"] == "RUNNING"
    assert b.target.adopt(victim.run_id) is None and b.processes_of_run(victim.run_id) == []
    assert "accepted" in stream_actions.kill(a, victim, grace=5)  # A's own kill goes through


def test_the_resourcemanager_a_record_names_is_never_asked(tmp_path, rm, submit_record, caplog):
    """The second review: driver.json's rm_url pointing at a fake RM whose RUNNING hid a dead driver. Only the
    configured RM is asked (and sent a kill); the record's other RM is reported."""
    from standins.yarn_rm import YarnRmStandIn

    hook = SparkStreamHook(yarn_spec(tmp_path, rm.url))
    record = stream_actions.submit(hook)
    app_id = record.handle["app_id"]
    rm.set_state(app_id, "FAILED", "FAILED", "the driver died")
    with YarnRmStandIn() as fake:
        fake.apps[app_id] = {**rm.apps[app_id], "state": "RUNNING", "finalStatus": "UNDEFINED"}
        forged = replace(record, handle={**record.handle, "rm_url": fake.url, "rm_urls": [fake.url]})
        hook.storage.unguarded.write_atomic(hook.paths.driver, forged.to_json())
        state = hook.target_of(forged).state(forged)
        assert state.gone and "FAILED" in state.detail and fake.url in state.detail, state
        assert hook.driver_liveness()[0] == Liveness.GONE
        assert f"names the ResourceManager {fake.url}" in caplog.text
        rm.set_state(app_id, "RUNNING")
        assert "accepted" in stream_actions.kill(hook, forged, grace=5)
        assert rm.kills == [(app_id, hook.target.user)] and fake.kills == []
        assert not any(fake.url in url for url in hook.target.urls(forged).values())


def test_an_environment_variable_in_private_conf_reaches_spark_submit_through_the_properties_file(
        tmp_path, rm, submit_record):  # noqa: F811 - the fixtures
    """Issue 35: ``spark.yarn.appMasterEnv.*`` and ``spark.executorEnv.*`` are private conf; on YARN the private
    channel is spark-submit's own 0600 properties file, loaded into the SparkConf from which Spark's YARN
    ``Client.setupLaunchEnv`` builds the application master's (the driver's) environment, and which the
    driver's executors get. So they are not refused here (unlike on Kubernetes), and never on the argv."""
    spec = replace(yarn_spec(tmp_path, rm.url), spark_conf={"spark.yarn.appMasterEnv.GITHUB_PAT": SECRET,
                                                            "spark.executorEnv.DB_PASS": SECRET + "-x"})
    record = stream_actions.submit(SparkStreamHook(spec))
    (call,) = calls(submit_record)
    assert SECRET not in " ".join(call["argv"]) and SECRET not in record.command
    assert f"spark.yarn.appMasterEnv.GITHUB_PAT={SECRET}\n" in call["properties"]
    assert f"spark.executorEnv.DB_PASS={SECRET}-x\n" in call["properties"]
