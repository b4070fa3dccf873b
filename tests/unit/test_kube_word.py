"""The Kubernetes API server's word about a crashed run's driver pod (airflow_streaming.control.kube_word), wired
into the hot standby's takeover rule (issue 36: "the standalone master's (or YARN's, Kubernetes') own word").

The API server here is a STAND-IN (tests/standins/kube_api.py: the pod API's paths, objects and status codes,
bearer-token auth, over TLS with a self-signed certificate), because Kubernetes cannot run on this machine.
The standby asks with its pod's OWN service account (a directory shaped like
``/var/run/secrets/kubernetes.io/serviceaccount``: ``token``, ``ca.crt``). Faults injected: a wrong token,
no token, a certificate the CA does not vouch for, plain http (no token sent in clear), a refused
connection, a reply about another pod, a pod the API server does not know, a record of another target."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import threading
import time

import pytest

from airflow_streaming.control import contract, takeover
from airflow_streaming.control.contract import ControlPaths, DriverRecord, Lease
from airflow_streaming.control.death_proof import Proof, RunIds, Word, WordKind, word_proof
from airflow_streaming.control.kube_word import SERVICE_ACCOUNT_DIR_ENV, KubeWord
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.paced_word import PacedWord
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from control_fixtures import spec_under
from spark_jobs.runtime.launcher import parse_args
from spark_jobs.runtime.standby import Standby
from standins import StandInServer
from standins.kube_api import KubeApiStandIn, make_self_signed_cert

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI for a test certificate")

TOKEN = "standby-sa-token-7d1e"
NS, POD = "streams", "s1-20261128t000000z-aaaaaaaa-driver"
ACTIVE, STANDBY = "20261128T000000Z-aaaaaaaa", "20261128T000001Z-bbbbbbbb"
TTL = 120.0


@pytest.fixture
def tls(tmp_path):
    (tmp_path / "server").mkdir()
    return make_self_signed_cert(tmp_path / "server")


@pytest.fixture
def sa_dir(tmp_path, tls):
    """The standby pod's service account: its token, and the cluster's CA (the stand-in's certificate)."""
    directory = tmp_path / "serviceaccount"
    directory.mkdir()
    (directory / "token").write_text(TOKEN + "\n")
    shutil.copy(tls[0], directory / "ca.crt")
    return str(directory)


@pytest.fixture
def api(tls):
    with KubeApiStandIn(TOKEN, tls=tls) as server:
        yield server


def driver_pod(api, phase="Running"):
    api.create_pod(NS, POD, {"airflow-streaming/run-id": ACTIVE.lower(), "spark-role": "driver"}, phase)


@pytest.mark.parametrize("phase,proof", [("Pending", None), ("Running", None), ("Unknown", None),
                                         ("Succeeded", Proof.POD_ENDED), ("Failed", Proof.POD_ENDED)])
def test_the_phase_of_the_recorded_driver_pod(api, sa_dir, phase, proof):
    driver_pod(api, phase)
    word = KubeWord(api.url, sa_dir).pod(NS, POD)
    assert word == Word(WordKind.KUBE_POD, f"{NS}/{POD}", answered=True, state=phase)
    assert word_proof(word, RunIds(kube_pod=f"{NS}/{POD}"))[0] is proof
    method, path, headers, _ = api.requests[-1]
    assert (method, path) == ("GET", f"/api/v1/namespaces/{NS}/pods/{POD}")
    assert headers.get("Authorization") == f"Bearer {TOKEN}"


def test_a_pod_the_api_server_does_not_know_is_an_answer_but_no_proof(api, sa_dir):
    word = KubeWord(api.url, sa_dir).pod(NS, POD)
    assert word.answered and word.state is None
    proof, said = word_proof(word, RunIds(kube_pod=f"{NS}/{POD}"))
    assert proof is None and "the API server says" in said and "unknown to it" in said


def test_wrong_or_missing_credentials_and_an_untrusted_certificate_are_no_word(api, sa_dir, tmp_path):
    driver_pod(api, "Failed")
    (tmp_path / "serviceaccount" / "token").write_text("someone-elses-token")
    assert not KubeWord(api.url, sa_dir).pod(NS, POD).answered  # 401
    (tmp_path / "serviceaccount" / "token").unlink()
    assert not KubeWord(api.url, sa_dir).pod(NS, POD).answered  # no token: 401
    (tmp_path / "other").mkdir()
    other_cert, _ = make_self_signed_cert(tmp_path / "other")
    (tmp_path / "serviceaccount" / "token").write_text(TOKEN)
    shutil.copy(other_cert, tmp_path / "serviceaccount" / "ca.crt")
    assert not KubeWord(api.url, sa_dir).pod(NS, POD).answered  # the CA does not vouch for the server


def test_over_plain_http_the_token_is_never_sent(sa_dir):
    with KubeApiStandIn(TOKEN) as plain:
        driver_pod(plain, "Failed")
        word = KubeWord(plain.url, sa_dir).pod(NS, POD)
        assert not word.answered  # asked without credentials: 401
        assert plain.requests and all("Authorization" not in headers for _, _, headers, _ in plain.requests)


class Liar(StandInServer):
    """A STAND-IN API server that answers every request with another pod, Failed."""

    def handle(self, method, path, query, headers, body):
        return 200, {"kind": "Pod", "metadata": {"namespace": NS, "name": "another-driver"},
                     "status": {"phase": "Failed"}}, "application/json"


def test_an_unreachable_api_server_is_no_word_and_a_reply_about_another_pod_is_no_proof(sa_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"https://127.0.0.1:{s.getsockname()[1]}"
    assert not KubeWord(closed, sa_dir, timeout=1).pod(NS, POD).answered
    with Liar() as liar:
        word = KubeWord(liar.url, sa_dir).pod(NS, POD)
    assert word.answered and word.subject == f"{NS}/another-driver"
    proof, said = word_proof(word, RunIds(kube_pod=f"{NS}/{POD}"))
    assert proof is None and "not the one the run recorded" in said
    assert KubeWord(closed, sa_dir)(RunIds(yarn_app_id="application_1_1")) is None  # no pod recorded
    assert KubeWord(None, sa_dir)(RunIds(kube_pod=f"{NS}/{POD}")) is None


# ----------------------------------------------------------------------------- the takeover rule, real files

@pytest.fixture
def kube_stream(tmp_path, api):
    """A stream whose active run is a driver pod on another node, its lease FRESH (the lease alone would make a
    standby wait at least the ttl)."""
    storage, paths = LocalStorage(), ControlPaths(str(tmp_path / "s"))
    storage.makedirs(paths.root)
    driver_pod(api, "Running")
    contract.write_marker(storage, paths, ACTIVE, "v1")
    storage.write_atomic(paths.driver, DriverRecord(
        run_id=ACTIVE, stream="s", version="v1", application="events_etl", host="airflow-host",
        command="spark-submit --master k8s://... ", log_path="/l", submitted_at=time.time(), checkpoint_location="/c",
        target="kubernetes", handle={"namespace": NS, "pod": POD, "api_server": api.url}).to_json())
    now = time.time()
    storage.write_atomic(paths.lease, Lease(ACTIVE, 1, 1.0, POD, now, now, TTL).to_json())
    return storage, paths


def test_a_driver_pod_on_another_node_is_taken_over_once_the_api_server_says_it_ended(kube_stream, api, sa_dir):
    storage, paths = kube_stream
    judged = takeover.judge_takeover(storage, paths, STANDBY, "v1", watch=takeover.LeaseWatch(),
                                     word=KubeWord(api.url, sa_dir))
    assert judged.act == "wait" and "is Running" in judged.reason, judged  # alive by the API server
    api.set_phase(NS, POD, "Failed", "Error")
    judged = takeover.judge_takeover(storage, paths, STANDBY, "v1", watch=takeover.LeaseWatch(),
                                     word=PacedWord(KubeWord(api.url, sa_dir)))
    assert judged.act == "take_over" and "pod_ended" in judged.reason, judged
    lease = takeover.take_over(storage, paths, judged, STANDBY, "v1", b'{"x": 1}', TTL, 1, 1.0, socket.gethostname())
    assert lease is not None and contract.read_lease(storage, paths).run_id == STANDBY


def test_a_deleted_pod_and_a_record_of_another_target_are_no_proof(kube_stream, api, sa_dir):
    storage, paths = kube_stream
    api.pods.clear()  # force-deleted: its containers may still run on the node
    judged = takeover.judge_takeover(storage, paths, STANDBY, "v1", watch=takeover.LeaseWatch(),
                                     word=KubeWord(api.url, sa_dir))
    assert judged.act == "wait" and "unknown to it" in judged.reason, judged
    driver_pod(api, "Failed")
    record = DriverRecord.from_json(paths.driver, storage.read_bytes(paths.driver))
    storage.write_atomic(paths.driver, DriverRecord(**{**record.__dict__, "target": "yarn"}).to_json())
    before = len(api.requests)
    judged = takeover.judge_takeover(storage, paths, STANDBY, "v1", watch=takeover.LeaseWatch(),
                                     word=KubeWord(api.url, sa_dir))
    assert judged.act == "wait" and len(api.requests) == before, judged


def test_a_kubernetes_hot_standby_asks_the_api_server_of_its_own_spec_with_its_own_account(tmp_path, sa_dir,
                                                                                          monkeypatch):
    spec = spec_under(tmp_path, hot_standby=True, master="k8s://https://kube.example:6443", deploy_mode="cluster",
                      cluster={"image": "example/spark:4.2", "namespace": NS, "runtime_path": "/opt/streams"})
    args = SparkStreamHook(spec).launch_plan(STANDBY, standby=True, failover=True).runtime_args
    assert args[args.index("--kube-api-server") + 1] == "https://kube.example:6443"
    assert "--yarn-rm-url" not in args and "--master-ui-url" not in args
    ns = parse_args(args)
    monkeypatch.setenv(SERVICE_ACCOUNT_DIR_ENV, sa_dir)
    word = Standby(ns, LocalStorage(), ControlPaths(ns.control_dir), False, threading.Event()).master_word()
    assert isinstance(word, PacedWord) and isinstance(word.word, KubeWord)
    assert (word.word.api_server, word.word.sa_dir) == ("https://kube.example:6443", sa_dir)
    monkeypatch.delenv(SERVICE_ACCOUNT_DIR_ENV)
    assert KubeWord("https://kube.example:6443").sa_dir == "/var/run/secrets/kubernetes.io/serviceaccount"
    active = SparkStreamHook(spec_under(tmp_path, master="k8s://https://kube.example:6443", deploy_mode="cluster",
                                        cluster={"image": "example/spark:4.2", "runtime_path": "/opt/streams"})).launch_plan(ACTIVE).runtime_args
    assert "--kube-api-server" not in active  # the active driver asks no one
    assert json.dumps(args).count(TOKEN) == 0



class RedirectingApi(StandInServer):
    """A STAND-IN API server over TLS that redirects every request (307) to ``target``."""

    def __init__(self, target: str, tls: tuple[str, str]):
        super().__init__()
        self.target = target
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.scheme = "https"

    def handle(self, method, path, query, headers, body):
        return 307, b"", "text/plain", {"Location": f"{self.target}{path}"}


def test_the_token_never_follows_a_redirect(api, sa_dir, tls):
    """urllib follows a GET's redirect; the standby's token goes to the configured API server only."""
    driver_pod(api, "Failed")
    with RedirectingApi(api.url, tls) as hop:
        before = len(api.requests)
        word = KubeWord(hop.url, sa_dir).pod(NS, POD)
        assert hop.requests[-1][2].get("Authorization") == f"Bearer {TOKEN}"  # the configured server got it
        followed = api.requests[before:]
        assert followed and all("Authorization" not in h for _, _, h, _ in followed), followed  # not the next
        assert not word.answered  # the redirect's target refused the unauthenticated ask (401): no word
