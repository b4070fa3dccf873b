"""The YARN ResourceManager's word about a crashed run (airflow_streaming.control.yarn_word), wired into the hot
standby's takeover rule (issue 36: "the standalone master's (or YARN's, Kubernetes') own word").

The ResourceManager here is a STAND-IN (tests/standins/yarn_rm.py: real HTTP on loopback, the RM REST API's
URLs, JSON shapes and status codes), because YARN cannot run on this machine. Faults injected: an RM that
refuses connections, one that answers 5xx, garbage, an HTML page, a reply about another application, a
standby RM that redirects to the active one (HA), an application the RM does not know."""

from __future__ import annotations

import json
import socket
import time

import pytest

from airflow_streaming.control import contract, takeover
from airflow_streaming.control.contract import ControlPaths, DriverRecord, Lease
from airflow_streaming.control.death_proof import Proof, RunIds, Word, WordKind, word_proof
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.paced_word import PacedWord
from airflow_streaming.control.yarn_word import YarnWord, yarn_application_word
from standins import StandInServer
from standins.yarn_rm import YarnRmStandIn

ACTIVE, STANDBY = "20261128T000000Z-aaaaaaaa", "20261128T000001Z-bbbbbbbb"
TTL = 120.0


class Scripted(StandInServer):
    """A STAND-IN for a misbehaving (or standby) ResourceManager: every request gets ``reply``."""

    def __init__(self, reply: tuple) -> None:
        super().__init__()
        self.reply = reply

    def handle(self, method, path, query, headers, body):
        return self.reply


def closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def rm():
    with YarnRmStandIn() as server:
        yield server


@pytest.mark.parametrize("state,proof", [("ACCEPTED", None), ("RUNNING", None), ("FINISHED", Proof.YARN_APPLICATION_ENDED),
                                         ("FAILED", Proof.YARN_APPLICATION_ENDED),
                                         ("KILLED", Proof.YARN_APPLICATION_ENDED)])
def test_the_rms_state_of_the_recorded_application(rm, state, proof):
    app = rm.register("s1", ["airflow-streaming-run-x"])
    rm.set_state(app, state)
    word = yarn_application_word(rm.url, app)
    assert word == Word(WordKind.YARN_APPLICATION, app, answered=True, state=state)
    assert word_proof(word, RunIds(yarn_app_id=app))[0] is proof
    assert rm.requests[-1][0] == "GET" and rm.requests[-1][1] == f"/ws/v1/cluster/apps/{app}"
    assert rm.requests[-1][2].get("Accept") == "application/json"


def test_an_application_the_rm_does_not_know_is_an_answer_but_no_proof(rm):
    word = yarn_application_word(rm.url, "application_1700000000000_0042")
    assert word.answered and word.state is None
    proof, said = word_proof(word, RunIds(yarn_app_id="application_1700000000000_0042"))
    assert proof is None and "the ResourceManager says" in said and "unknown to it" in said


@pytest.mark.parametrize("reply", [
    (500, {"RemoteException": {"message": "boom"}}, "application/json"),
    (200, b"<html>This is standby RM.</html>", "text/html"),
    (200, b"{not json", "application/json"),
    (200, {"app": {"id": "application_1700000000000_0001"}}, "application/json"),  # no state
    (404, {"RemoteException": {"exception": "WebApplicationException"}}, "application/json"),  # no such route
    (403, b"forbidden", "text/plain"),
])
def test_anything_but_an_answer_is_no_word(reply):
    with Scripted(reply) as server:
        word = yarn_application_word(server.url, "application_1700000000000_0001")
    assert not word.answered and word.subject == "application_1700000000000_0001"


def test_an_unreachable_rm_is_no_word_and_a_reply_about_another_application_is_no_proof(rm):
    assert not yarn_application_word(closed_url(), "application_1700000000000_0001", timeout=1).answered
    other = rm.register("other", [])
    rm.set_state(other, "KILLED")
    with Scripted((200, {"app": {"id": other, "state": "KILLED"}}, "application/json")) as liar:
        word = yarn_application_word(liar.url, "application_1700000000000_0099")
    assert word.answered and word.subject == other
    proof, said = word_proof(word, RunIds(yarn_app_id="application_1700000000000_0099"))
    assert proof is None and "not the one the run recorded" in said


def test_ha_the_next_rm_answers_when_the_first_is_down_and_a_standby_rms_redirect_is_followed(rm):
    app = rm.register("s1", [])
    rm.set_state(app, "KILLED")
    ids = RunIds(yarn_app_id=app)
    assert YarnWord([closed_url(), rm.url], timeout=1)(ids).state == "KILLED"
    with Scripted((307, b"", "text/plain", {"Location": f"{rm.url}/ws/v1/cluster/apps/{app}"})) as standby_rm:
        word = YarnWord([standby_rm.url + "/"])(ids)
        assert word.answered and word.state == "KILLED" and standby_rm.requests
    with Scripted((200, b"<html>standby</html>", "text/html")) as standby_rm:
        assert YarnWord([standby_rm.url, rm.url])(ids).state == "KILLED"  # a page is no answer: the next RM
    assert not YarnWord([closed_url()], timeout=1)(ids).answered
    assert YarnWord([rm.url])(RunIds(app_id="app-20261128000000-0001")) is None  # no YARN application recorded
    assert YarnWord([])(ids) is None


# ----------------------------------------------------------------------------- the takeover rule, real files

@pytest.fixture
def yarn_stream(tmp_path, rm):
    """A stream whose active run is a YARN application on another host, its lease FRESH (the lease alone would
    make a standby wait at least the ttl)."""
    storage, paths = LocalStorage(), ControlPaths(str(tmp_path / "s"))
    storage.makedirs(paths.root)
    app = rm.register("s", [f"airflow-streaming-run-{ACTIVE}"])
    rm.set_state(app, "RUNNING")
    contract.write_marker(storage, paths, ACTIVE, "v1")
    storage.write_atomic(paths.driver, DriverRecord(
        run_id=ACTIVE, stream="s", version="v1", application="events_etl", host="airflow-host",
        command="spark-submit --master yarn ...", log_path="/l", submitted_at=time.time(), checkpoint_location="/c",
        target="yarn", handle={"app_id": app, "rm_url": rm.url}).to_json())
    now = time.time()
    storage.write_atomic(paths.lease, Lease(ACTIVE, 4242, 1.0, "nodemanager-7", now, now, TTL).to_json())
    storage.write_atomic(paths.status, json.dumps({"run_id": ACTIVE, "app_id": app}).encode())
    return storage, paths, app


def test_a_yarn_run_on_another_host_is_taken_over_once_the_rm_says_its_application_ended(yarn_stream, rm):
    storage, paths, app = yarn_stream
    word = PacedWord(YarnWord([rm.url]))
    judged = takeover.judge_takeover(storage, paths, STANDBY, "v1", watch=takeover.LeaseWatch(), word=word)
    assert judged.act == "wait" and "is RUNNING" in judged.reason, judged  # alive by the RM: the lease decides
    rm.set_state(app, "FAILED", "FAILED", "Application application_... failed 1 times")
    judged = takeover.judge_takeover(storage, paths, STANDBY, "v1", watch=takeover.LeaseWatch(),
                                     word=YarnWord([rm.url]))
    assert judged.act == "take_over" and "yarn_application_ended" in judged.reason, judged
    lease = takeover.take_over(storage, paths, judged, STANDBY, "v1", b'{"x": 1}', TTL, 1, 1.0, socket.gethostname())
    assert lease is not None and contract.read_lease(storage, paths).run_id == STANDBY


def test_the_word_is_about_the_application_the_record_names_never_one_a_status_or_another_target_names(
        yarn_stream, rm):
    storage, paths, app = yarn_stream
    other = rm.register("s", [])
    rm.set_state(other, "KILLED")
    # The status document (written by the driver) names another, ended application: not what is asked about.
    storage.write_atomic(paths.status, json.dumps({"run_id": ACTIVE, "app_id": other}).encode())
    judged = takeover.judge_takeover(storage, paths, STANDBY, "v1", watch=takeover.LeaseWatch(),
                                     word=YarnWord([rm.url]))
    assert judged.act == "wait" and f"{app} is RUNNING" in judged.reason, judged
    # A record of another target holding an "app_id" is no YARN application to ask about.
    record = DriverRecord.from_json(paths.driver, storage.read_bytes(paths.driver))
    storage.write_atomic(paths.driver, DriverRecord(**{**record.__dict__, "target": "standalone-cluster",
                                                       "handle": {"app_id": other}}).to_json())
    before = len(rm.requests)
    judged = takeover.judge_takeover(storage, paths, STANDBY, "v1", watch=takeover.LeaseWatch(),
                                     word=YarnWord([rm.url]))
    assert judged.act == "wait" and len(rm.requests) == before, judged


def test_a_hot_standby_submitted_to_yarn_by_the_product_takes_over_on_the_rms_word(tmp_path, rm, monkeypatch):
    """Through the product's own submissions (the YARN target, a STAND-IN spark-submit that registers the
    application with the RM stand-in): the active run and its hot standby are two YARN applications; the
    standby's driver arguments (what the AM would run) name the RM; the RM says the active application was
    KILLED; the standby, built from exactly those arguments, takes over at once although the lease is fresh."""
    import threading

    from airflow_streaming.hooks.streaming_job import SparkStreamHook
    from airflow_streaming.spec import StreamSpec
    from spark_jobs.runtime.launcher import parse_args
    from spark_jobs.runtime.standby import Standby
    from standins import fake_spark_submit
    import stream_actions

    record_file = fake_spark_submit.put_first_on_path(tmp_path, monkeypatch, FAKE_YARN_RM=rm.url)
    spec = StreamSpec(name="etl", application="events_etl", checkpoint_location=str(tmp_path / "ckpt"),
                      control_location=str(tmp_path / "ctl"), master="yarn", deploy_mode="cluster", hot_standby=True,
                      application_args=["--input", "/in", "--output", "/out", "--quarantine", "/q"],
                      cluster={"resourcemanager_url": rm.url})
    hook = SparkStreamHook(spec)
    active = stream_actions.submit(hook)
    standby = stream_actions.prepare_hot_standby(hook)
    assert active.target == standby.target == "yarn" and active.handle["app_id"] != standby.handle["app_id"]
    argv = json.loads(record_file.read_text().splitlines()[-1])["argv"]
    runtime = argv[argv.index(next(a for a in argv if a.endswith("spark_jobs/launch.py"))) + 1:]
    assert runtime[runtime.index("--yarn-rm-url") + 1] == rm.url and "--failover" in runtime
    ns = parse_args(runtime)
    assert ns.run_id == standby.run_id
    now = time.time()  # the active driver (in its AM container, on a NodeManager) took its lease
    hook.storage.unguarded.write_atomic(hook.paths.lease, Lease(active.run_id, 4242, 1.0, "nodemanager-3", now, now,
                                                      TTL).to_json())
    the_standby = Standby(ns, hook.storage.unguarded, hook.paths, False, threading.Event())
    word = the_standby.master_word()
    judge = lambda: takeover.judge_takeover(hook.storage.unguarded, hook.paths, ns.run_id, ns.version,  # noqa: E731
                                            watch=takeover.LeaseWatch(), word=word)
    rm.set_state(active.handle["app_id"], "RUNNING")
    assert judge().act == "wait"
    rm.set_state(active.handle["app_id"], "KILLED", "KILLED", "killed by a NodeManager's OOM")
    word.next_at = 0.0  # the paced word asks again at its next second; the test does not wait for it
    judged = judge()
    assert judged.act == "take_over" and "yarn_application_ended" in judged.reason \
        and active.handle["app_id"] in judged.reason, judged
