"""Kubernetes cluster target against PROTOCOL STAND-INS: a pod-API stand-in speaking HTTPS with a
bearer token (``tests/standins/kube_api.py``) and a stand-in ``spark-submit``
(``tests/standins/fake_spark_submit.py``). No Kubernetes runs here: these tests check the exact
spark-submit command, the pod name and labels, the API client (TLS, token), the state mapping and
the identity checks - not Kubernetes itself."""

from __future__ import annotations

import base64
import json
import logging
import re
import shutil
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from airflow_streaming.exceptions import SpecError, StreamStateUnknownError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec
from airflow_streaming.targets.base import Liveness
from airflow_streaming.targets.kubernetes import (
    RUN_LABEL,
    KubernetesClusterTarget,
    conf_secret_name,
    driver_pod_name,
    label_value,
    liveness_of,
)
from standins import fake_spark_submit
from standins.kube_api import KubeApiStandIn, make_self_signed_cert
import stream_actions

SECRET = "k8s-s3cr3t-c0ffee"
TOKEN = "sa-token-5f5e0d1c2b"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI for a test certificate")


@pytest.fixture
def tls(tmp_path):
    return make_self_signed_cert(tmp_path)


@pytest.fixture
def api(tls):
    with KubeApiStandIn(TOKEN, tls=tls) as server:
        yield server


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return str(path)


@pytest.fixture
def submit_record(tmp_path, monkeypatch, api):
    return fake_spark_submit.put_first_on_path(tmp_path, monkeypatch, FAKE_KUBE_API=api.url, FAKE_KUBE_TOKEN=TOKEN)


def k8s_spec(tmp_path: Path, api_url: str, tls: tuple[str, str], token_file: str, name: str = "etl",
             spark_conf: dict | None = None, **cluster) -> StreamSpec:
    settings = {"image": "registry.example/airflow-streaming:0.1", "namespace": "streams",
                "service_account": "spark-driver", "kube_token_file": token_file, "kube_ca_file": tls[0], **cluster}
    conf = {"spark.hadoop.fs.s3a.secret.key": SECRET, "spark.kubernetes.file.upload.path": "s3a://bucket/uploads"}
    return StreamSpec(name=name, application="events_etl", checkpoint_location=str(tmp_path / "ckpt" / name),
                      control_location=str(tmp_path / "ctl"), master=f"k8s://{api_url}", deploy_mode="cluster",
                      cluster=settings, spark_conf=conf if spark_conf is None else spark_conf)


def calls(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()]


def conf_of(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--conf")


def test_driver_pod_name_is_deterministic_dns_safe_and_short():
    run = "20261123T090748Z-645b32db"
    name = driver_pod_name("etl", run)
    assert name == "etl-20261123t090748z-645b32db-driver" == driver_pod_name("etl", run)
    assert driver_pod_name("etl", "20261123T090748Z-645b32dc") != name
    long_a = driver_pod_name("Very_Long.Stream-Name_" + "x" * 40, run)
    long_b = driver_pod_name("Very_Long.Stream-Name_" + "x" * 40, "20261123T090748Z-645b32dc")
    for pod in (name, long_a, long_b, driver_pod_name("__odd..name__", "run/with:chars")):
        assert len(pod) <= 63 and DNS_LABEL.match(pod), pod
    assert long_a != long_b
    assert label_value(run) == run
    odd = label_value("run/with:chars" + "y" * 80)
    assert len(odd) <= 63 and re.match(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", odd)


@pytest.mark.parametrize("phase, expected", [
    ("Pending", Liveness.ALIVE), ("Running", Liveness.ALIVE), ("Succeeded", Liveness.GONE),
    ("Failed", Liveness.GONE), (None, Liveness.GONE), ("Unknown", Liveness.UNKNOWN),
])
def test_phase_mapping(phase, expected):
    assert liveness_of(phase) == expected


def test_submission_argv_pod_labels_and_no_secret(tmp_path, api, tls, token_file, submit_record):
    hook = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file))
    record = stream_actions.submit(hook)
    (call,) = calls(submit_record)
    argv = call["argv"]
    assert argv[:4] == ["--master", f"k8s://{api.url}", "--deploy-mode", "cluster"]
    conf = conf_of(argv)
    pod = driver_pod_name("etl", record.run_id)
    assert conf["spark.kubernetes.submission.waitAppCompletion"] == "false"
    assert conf["spark.kubernetes.namespace"] == "streams"
    assert conf["spark.kubernetes.container.image"] == "registry.example/airflow-streaming:0.1"
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "spark-driver"
    assert conf["spark.kubernetes.driver.pod.name"] == pod
    assert conf[f"spark.kubernetes.driver.label.{RUN_LABEL}"] == record.run_id
    assert conf[f"spark.kubernetes.executor.label.{RUN_LABEL}"] == record.run_id
    assert conf["spark.kubernetes.driver.label.airflow-streaming/stream"] == "etl"
    assert conf["spark.airflow_streaming.run_id"] == record.run_id
    assert argv[argv.index("--py-files") + 1].endswith(".zip")
    assert SECRET not in " ".join(argv) and TOKEN not in " ".join(argv) and SECRET not in record.command
    # Secret conf never reaches spark-submit (it would land in the driver's ConfigMap): it is in a Secret.
    assert "--properties-file" not in argv and "properties" not in call
    assert conf["spark.kubernetes.driver.secretKeyRef.AIRFLOW_STREAMING_SECRET_CONF"] == f"{pod}-conf:conf.json"
    assert record.target == "kubernetes"
    assert record.handle == {"namespace": "streams", "pod": pod, "api_server": api.url}
    assert api.pods[("streams", pod)]["metadata"]["labels"]["spark-role"] == "driver"


def test_runtime_in_the_image_or_an_upload_path_is_required(tmp_path, api, tls, token_file, submit_record):
    hook = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file, spark_conf={}))
    with pytest.raises(ValueError, match="spark.kubernetes.file.upload.path"):
        stream_actions.submit(hook)
    hook = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file, spark_conf={},
                                     runtime_path="/opt/airflow-streaming"))
    record = stream_actions.submit(hook)
    argv = calls(submit_record)[-1]["argv"]
    assert "--py-files" not in argv and "--properties-file" not in argv
    assert argv[argv.index("--stream") - 1] == "local:///opt/airflow-streaming/spark_jobs/launch.py"
    assert record.handle["pod"] == driver_pod_name("etl", record.run_id)
    with pytest.raises(ValueError, match="cluster.image"):
        stream_actions.submit(SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file, name="noimage", image=None)))


def test_state_kill_find_and_logs_through_the_pod_api(tmp_path, api, tls, token_file, submit_record, caplog):
    hook = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file))
    other_hook = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file, name="other"))
    record, other = stream_actions.submit(hook), stream_actions.submit(other_hook)
    target = hook.target_of(record)
    assert target.state(record).liveness == Liveness.ALIVE and target.state(record).cluster_state == "Pending"
    api.set_phase("streams", record.handle["pod"], "Running")
    assert hook.driver_liveness()[0] == Liveness.ALIVE
    assert len(hook.processes_of_run(record.run_id)) == 1 and hook.processes_of_run("20990101T000000Z-0") == []
    # adopt: the run's one driver pod by its label, as if the record had never been written.
    assert target.adopt(record.run_id) == record.handle and target.adopt("20990101T000000Z-0") is None

    # A record of this run pointing at the other run's pod: refused, nothing deleted.
    forged = replace(record, handle={**record.handle, "pod": other.handle["pod"]})
    with stream_actions.step_permit(hook):  # a kill is a lifecycle step's
        outcome = target.kill(forged, grace=7)
    assert outcome.startswith("refusing to delete pod") and api.deletions == [], outcome

    assert hook.log_tail(record.run_id, lines=2).splitlines() == [
        f"driver log line 99 of {record.handle['pod']}", f"driver log line 100 of {record.handle['pod']}"]
    with caplog.at_level(logging.DEBUG):
        outcome = stream_actions.kill(hook, record, grace=7)
    assert "deleted driver pod" in outcome and "NotFound" in outcome, outcome
    assert api.deletions == [("streams", record.handle["pod"], 7)]
    assert target.state(record).liveness == Liveness.GONE  # 404
    assert hook.processes_of_run(record.run_id) == []
    with stream_actions.step_permit(hook):  # a kill is a lifecycle step's
        assert target.kill(record, grace=1).startswith("nothing to kill")
    assert ("streams", other.handle["pod"]) in api.pods
    api.set_phase("streams", other.handle["pod"], "Failed", "Error")
    assert other_hook.target_of(other).state(other).liveness == Liveness.GONE
    # The bearer token travelled in headers only: never in a message or a log line.
    assert all({k.lower(): v for k, v in h.items()}.get("authorization") == f"Bearer {TOKEN}"
               for _, _, h, _ in api.requests)
    assert TOKEN not in caplog.text and TOKEN not in outcome


def test_tls_token_and_unreachable_api_are_unknown_never_gone(tmp_path, api, tls, token_file, submit_record):
    hook = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file))
    record = stream_actions.submit(hook)
    storage, paths = hook.storage, hook.paths

    def target(**settings) -> KubernetesClusterTarget:
        base = {"image": "i", "namespace": "streams", "kube_token_file": token_file, "kube_ca_file": tls[0]}
        return KubernetesClusterTarget(storage, paths, {**base, **settings}, master=f"k8s://{api.url}")

    assert target().state(record).liveness == Liveness.ALIVE
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token")
    state = target(kube_token_file=str(wrong)).state(record)
    assert state.liveness == Liveness.UNKNOWN and "HTTP 401" in state.detail and "kube_token_file" in state.detail
    # No CA given: the self-signed certificate is not trusted - UNKNOWN, not GONE.
    state = target(kube_ca_file=None).state(record)
    assert state.liveness == Liveness.UNKNOWN and "CERTIFICATE_VERIFY_FAILED" in state.detail, state.detail
    assert target(kube_ca_file=None, verify_tls=False).state(record).liveness == Liveness.ALIVE
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"https://127.0.0.1:{s.getsockname()[1]}"
    down = replace(record, handle={**record.handle, "api_server": closed})
    state = target().state(down)
    assert state.liveness == Liveness.UNKNOWN and closed in state.detail
    with stream_actions.step_permit(hook):  # a kill is a lifecycle step's
        assert target().kill(down, grace=1).startswith("cannot kill")
    with pytest.raises(StreamStateUnknownError):
        target(api_server=closed).find(record.run_id)
    assert TOKEN not in state.detail


def test_secret_conf_goes_in_a_secret_of_the_run_never_in_the_drivers_configmap(tmp_path, api, tls, token_file,
                                                                                 submit_record, caplog):
    """Issue 20: Spark writes every conf spark-submit knows into the driver's ConfigMap (``spark.properties``);
    the secret conf must not be there but in a Secret the driver reads, created and deleted with the run."""
    hook = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file, spark_conf={
        "spark.hadoop.fs.s3a.secret.key": SECRET, "spark.kubernetes.file.upload.path": "s3a://bucket/uploads"}))
    with caplog.at_level(logging.DEBUG):
        record = stream_actions.submit(hook)
    pod = record.handle["pod"]
    name = conf_secret_name(pod)

    (configmap,) = api.objects["configmaps"].values()
    assert "spark.kubernetes.file.upload.path=s3a://bucket/uploads" in configmap["data"]["spark.properties"]
    assert SECRET not in json.dumps(list(api.objects["configmaps"].values()))
    secret = api.objects["secrets"][("streams", name)]
    assert json.loads(base64.b64decode(secret["data"]["conf.json"])) == {"spark.hadoop.fs.s3a.secret.key": SECRET}
    assert secret["metadata"]["labels"][RUN_LABEL] == record.run_id
    assert secret["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": pod,
                                                      "uid": f"uid-{pod}"}]
    env = api.pods[("streams", pod)]["spec"]["containers"][0]["env"]
    assert env == [{"name": "AIRFLOW_STREAMING_SECRET_CONF",
                    "valueFrom": {"secretKeyRef": {"name": name, "key": "conf.json"}}}]
    assert SECRET not in record.command and SECRET not in caplog.text
    assert "secret conf entries in Kubernetes Secret" in record.command

    stream_actions.kill(hook, record, grace=1)
    assert ("streams", name) not in api.objects["secrets"]  # gone with the run


def test_a_failed_submission_deletes_the_runs_secret_and_another_runs_secret_is_never_touched(
        tmp_path, api, tls, token_file, submit_record, monkeypatch):
    hook = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file))
    monkeypatch.setenv("FAKE_SPARK_SUBMIT_EXIT", "1")
    with pytest.raises(Exception, match="spark-submit exit code 1"):
        stream_actions.submit(hook)
    assert api.objects["secrets"] == {}  # created before spark-submit, deleted after its failure
    monkeypatch.delenv("FAKE_SPARK_SUBMIT_EXIT")

    record = stream_actions.submit(hook)
    other = replace(record, run_id="20990101T000000Z-00000000")  # a record of another run naming this pod
    target = hook.target_of(record)
    assert target._delete_conf_secret("streams", record.handle["pod"], other.run_id) is False
    assert ("streams", conf_secret_name(record.handle["pod"])) in api.objects["secrets"]
    api.pods.pop(("streams", record.handle["pod"]))  # the pod went without its owned Secret (no GC ran)
    with stream_actions.step_permit(hook):  # a kill is a lifecycle step's
        assert target.kill(record, grace=1).startswith("nothing to kill")
    assert api.objects["secrets"] == {}


def kubeconfig(path: Path, server: str, ca: str, token: str) -> str:
    path.write_text(json.dumps({  # YAML is a superset of JSON
        "apiVersion": "v1", "kind": "Config", "current-context": "streams",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "streams", "context": {"cluster": "c", "user": "u", "namespace": "streams"}}]}))
    return str(path)


def test_a_kubeconfig_gives_the_credentials_for_the_specs_api_server_only(tmp_path, api, tls, token_file,
                                                                           submit_record):
    """The official client's kubeconfig support (here a token user; exec plugins and client certificates work
    the same way): the API server stays the spec's, the kubeconfig only says how to talk to it."""
    hook = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file))
    record = stream_actions.submit(hook)
    config = kubeconfig(tmp_path / "kubeconfig", api.url, tls[0], TOKEN)
    settings = {"image": "i", "namespace": "streams", "kubeconfig": config, "kube_context": "streams"}
    target = KubernetesClusterTarget(hook.storage, hook.paths, settings, master=f"k8s://{api.url}")
    assert target.state(record).liveness == Liveness.ALIVE
    plan = target.plan(hook.spec, "20261123T000000Z-0000cfg0", "l.py", [], {"spark.kubernetes.file.upload.path": "x"},
                       {}, "")
    assert plan.env["KUBECONFIG"] == config and plan.conf["spark.kubernetes.context"] == "streams"
    assert "spark.kubernetes.authenticate.submission.oauthTokenFile" not in plan.conf
    # A kubeconfig whose context points at another server is a configuration error, never a redirect.
    other = kubeconfig(tmp_path / "other", "https://10.0.0.9:6443", tls[0], TOKEN)
    with pytest.raises(ValueError, match="points at https://10.0.0.9:6443, but this stream's API server is"):
        KubernetesClusterTarget(hook.storage, hook.paths, {**settings, "kubeconfig": other},
                                master=f"k8s://{api.url}").state(record)


def test_without_the_kubernetes_client_the_target_says_how_to_install_it(tmp_path, monkeypatch, tls, token_file):
    import sys

    monkeypatch.setitem(sys.modules, "kubernetes", None)  # as if not installed
    target = KubernetesClusterTarget(None, None, {"image": "i", "kube_token_file": token_file},
                                     master="k8s://https://127.0.0.1:6443")
    record = replace(_record_of(), handle={"namespace": "streams", "pod": "p"})
    with pytest.raises(ValueError, match=r"pip install 'airflow-streaming\[kubernetes\]'"):
        target.state(record)


def _record_of():
    from airflow_streaming.control.contract import DriverRecord

    return DriverRecord(run_id="20261123T000000Z-0000none", stream="s", version="v1", application="events_etl",
                        host="h", command="", log_path="", submitted_at=1.0, checkpoint_location="/c",
                        target="kubernetes", handle={})


def test_a_forged_record_naming_another_streams_pod_is_refused(tmp_path, api, tls, token_file, submit_record):
    """Stream B's driver.json naming stream A's pod and run id (the run label matches): the stream and control
    location labels do not, so nothing is deleted and the refusal says why."""
    a = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file, name="a"))
    b = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file, name="b"))
    victim = stream_actions.submit(a)
    api.set_phase("streams", victim.handle["pod"], "Running")
    for record in (victim, replace(victim, stream="b")):
        outcome = stream_actions.kill(b, record, grace=1)
        assert outcome.startswith("refusing to delete pod") and "nothing was deleted" in outcome, outcome
    assert "do not make it a driver of stream 'b'" in outcome
    assert api.deletions == [] and b.target.adopt(victim.run_id) is None
    assert a.target.adopt(victim.run_id) == victim.handle
    assert "deleted driver pod" in stream_actions.kill(a, victim, grace=1)


@pytest.mark.parametrize("key, fix", [
    ("spark.kubernetes.driverEnv.DB_URL", r"non-secret value goes in env_vars\.DB_URL; a secret in a Kubernetes "
                                          r"Secret referenced with spark_conf spark\.kubernetes\.driver\.secretKeyRef"
                                          r"\.DB_URL: <secret>:<key>"),
    ("spark.kubernetes.executorEnv.DB_URL", r"Spark 4 has no such setting.*spark\.executorEnv\.DB_URL"),
])
def test_an_environment_variable_in_private_conf_that_never_reaches_the_pod_is_refused(
        tmp_path, api, tls, token_file, submit_record, key, fix):
    """Issue 35: ``spark.kubernetes.driverEnv.*`` is private conf (env-passing prefixes are never public), so it
    went in the run's Secret, which the driver applies to its session after it started - the variable never
    was in the driver's environment. ``spark.kubernetes.executorEnv.*`` is no Spark setting at all. Both are a
    SpecError naming the entry and the fix, before anything is created or submitted."""
    hook = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file, spark_conf={
        key: "jdbc:postgresql://db:5432/app", "spark.kubernetes.file.upload.path": "s3a://bucket/uploads"}))
    with pytest.raises(SpecError, match=fix) as refused:
        stream_actions.submit(hook)
    assert refused.value.field == f"spark_conf.{key}"
    assert "jdbc:postgresql" not in str(refused.value)
    assert not submit_record.exists() and api.objects["secrets"] == {} and api.pods == {}


def test_an_executor_environment_variable_in_private_conf_travels_in_the_runs_secret(
        tmp_path, api, tls, token_file, submit_record):
    """``spark.executorEnv.*`` (private) is not refused: it goes in the run's Secret, which the runtime applies to
    the SparkSession builder before the SparkContext exists (``DriverSession.create``), and Spark builds every
    executor pod's environment from that context's conf."""
    hook = SparkStreamHook(k8s_spec(tmp_path, api.url, tls, token_file, spark_conf={
        "spark.executorEnv.DB_PASSWORD": SECRET, "spark.kubernetes.file.upload.path": "s3a://bucket/uploads"}))
    record = stream_actions.submit(hook)
    (call,) = calls(submit_record)
    assert SECRET not in " ".join(call["argv"])
    secret = api.objects["secrets"][("streams", conf_secret_name(record.handle["pod"]))]
    assert json.loads(base64.b64decode(secret["data"]["conf.json"])) == {"spark.executorEnv.DB_PASSWORD": SECRET}
