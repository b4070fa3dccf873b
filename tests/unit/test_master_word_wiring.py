"""The standalone master's word wired into the hot standby (issue 36): the standby learns the master from its
own launch plan (never a control file), asks it only about a holder on another host whose lease is quiet,
at most once a second and backing off while the master does not answer (``paced_word.PacedWord``), and
the word feeds ``takeover.judge_takeover``."""

from __future__ import annotations

import json
import time

from airflow_streaming.control import contract, takeover
from airflow_streaming.control.contract import ControlPaths, DriverRecord, Lease
from airflow_streaming.control.death_proof import RunIds, Word, WordKind
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.paced_word import PacedWord
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from control_fixtures import spec_under
from spark_jobs.runtime.launcher import parse_args

ACTIVE, STANDBY = "20261127T000000Z-aaaaaaaa", "20261127T000001Z-bbbbbbbb"
APP = "app-20261127000000-0001"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Master:
    """A word that counts the asks; ``answer`` says what it answers (``None``: unreachable)."""

    def __init__(self, state: str | None = "FINISHED", completed: bool = True):
        self.asks: list[RunIds] = []
        self.answer: tuple[str | None, bool] | None = (state, completed)

    def __call__(self, ids: RunIds) -> Word:
        self.asks.append(ids)
        if self.answer is None:
            return Word(WordKind.APPLICATION, ids.app_id or "", answered=False)
        state, completed = self.answer
        return Word(WordKind.APPLICATION, ids.app_id or "", True, state, completed, "ALIVE")


# --------------------------------------------------------------------------- pacing

def test_the_master_is_asked_at_most_once_a_second_and_the_same_ids_get_the_last_word_between_asks():
    master, clock = Master("RUNNING", False), Clock()
    word = PacedWord(master, clock=clock)
    ids = RunIds(app_id=APP)
    first = word(ids)
    assert first.state == "RUNNING" and len(master.asks) == 1
    for _ in range(19):  # 20 looks of a 50 ms loop
        clock.now += 0.049
        assert word(ids) == first
    assert len(master.asks) == 1
    assert word(RunIds(app_id="app-other")) is None  # no word about other ids between asks
    clock.now += 0.1
    master.answer = ("FINISHED", True)
    assert word(ids).state == "FINISHED" and len(master.asks) == 2


def test_an_unreachable_master_is_asked_again_only_after_a_growing_back_off_reset_by_an_answer():
    master, clock = Master(), Clock()
    master.answer = None
    word = PacedWord(master, every_s=1.0, max_backoff_s=8.0, clock=clock)
    ids = RunIds(app_id=APP)
    asked_at = []
    for _ in range(int(40 / 0.05)):  # 40 s of looks every 50 ms
        before = len(master.asks)
        said = word(ids)
        assert said is None or not said.answered  # never a proof from a master that does not answer
        if len(master.asks) > before:
            asked_at.append(round(clock.now - 100.0, 2))
        clock.now += 0.05
    gaps = [round(b - a) for a, b in zip(asked_at, asked_at[1:])]
    assert gaps[:4] == [2, 4, 8, 8], asked_at  # 2 s, doubling, capped
    assert len(master.asks) <= 7
    master.answer = ("RUNNING", False)
    clock.now += 8.0
    word(ids)
    clock.now += 1.0
    word(ids)
    assert len(master.asks) == len(asked_at) + 2  # answered: once a second again


# --------------------------------------------------------------------------- the rule's gate

def crashed_elsewhere(tmp_path, renewed_ago: float) -> tuple[LocalStorage, ControlPaths]:
    """A run recorded on another host (client mode there) with application APP, its lease renewed
    ``renewed_ago`` seconds ago, its process not on this host."""
    storage, paths = LocalStorage(), ControlPaths(str(tmp_path / "control"))
    storage.makedirs(paths.root)
    contract.write_marker(storage, paths, ACTIVE, "v1")
    storage.write_atomic(paths.driver, DriverRecord(
        run_id=ACTIVE, stream="s", version="v1", application="a", host="host-b", command="spark-submit",
        log_path="/l", submitted_at=time.time(), checkpoint_location="/c", handle={}).to_json())
    at = time.time() - renewed_ago
    storage.write_atomic(paths.lease, Lease(ACTIVE, 4242, 1.0, "host-b", at, at, 120).to_json())
    storage.write_atomic(paths.status, json.dumps({"run_id": ACTIVE, "app_id": APP}).encode())
    return storage, paths


def judge(storage, paths, watch, master, quiet_s=10.0):
    return takeover.judge_takeover(storage, paths, STANDBY, "v1", watch=watch, alive_here=lambda run: [],
                                   word=master, word_quiet_s=quiet_s)


def test_a_holder_elsewhere_that_renews_its_lease_is_not_asked_about(tmp_path):
    storage, paths = crashed_elsewhere(tmp_path, renewed_ago=1.0)
    master, watch = Master(), takeover.LeaseWatch()
    for _ in range(5):
        assert judge(storage, paths, watch, master).act == "wait"
    assert master.asks == []  # the lease is fresh and has not been seen unchanged for 10 s: nothing asked
    assert judge(storage, paths, watch, master, quiet_s=0.0).act == "take_over"  # the same state, once quiet


def test_a_quiet_lease_elsewhere_is_taken_over_on_the_masters_word_long_before_its_ttl(tmp_path):
    storage, paths = crashed_elsewhere(tmp_path, renewed_ago=11.0)  # two renewals missed, ttl 120 s
    master, watch = Master("RUNNING", False), takeover.LeaseWatch()
    assert judge(storage, paths, watch, master).act == "wait"  # the master says it runs
    assert master.asks == [RunIds(app_id=APP)]
    master.answer = ("FINISHED", True)
    judged = judge(storage, paths, watch, master)
    assert judged.act == "take_over" and "application_ended" in judged.reason, judged
    master.answer = None  # unreachable: the lease alone decides, and it is within its ttl
    assert judge(storage, paths, watch, master).act == "wait"


def test_the_standbys_own_watch_also_opens_the_gate(tmp_path):
    """A lease whose renewed_at is forged fresh is still asked about once the standby saw it unchanged for
    the quiet time (its own clock)."""
    storage, paths = crashed_elsewhere(tmp_path, renewed_ago=0.0)
    master, watch = Master(), takeover.LeaseWatch()
    assert judge(storage, paths, watch, master, quiet_s=0.3).act == "wait" and master.asks == []
    time.sleep(0.35)
    assert judge(storage, paths, watch, master, quiet_s=0.3).act == "take_over"


# --------------------------------------------------------------------------- the launch plan

def failover_args(tmp_path, **fields) -> list[str]:
    hook = SparkStreamHook(spec_under(tmp_path, hot_standby=True, **fields))
    return hook.launch_plan(STANDBY, standby=True, failover=True).runtime_args


def test_the_hot_standby_is_launched_with_the_master_of_its_own_spec(tmp_path):
    client = failover_args(tmp_path, master="spark://m1.example:7077", deploy_mode="client")
    assert client[client.index("--master-ui-url") + 1] == "http://m1.example:8080"
    assert "--master-rest-url" not in client  # a client-mode run records no submission
    ns = parse_args(client)
    assert (ns.failover, ns.master_ui_url, ns.master_rest_url) == (True, "http://m1.example:8080", None)
    cluster = failover_args(tmp_path, master="spark://m1.example:7077", deploy_mode="cluster",
                            master_ui_url="http://ui.example:18080/", cluster={"rest_url": "https://m1.example:16066"})
    assert cluster[cluster.index("--master-rest-url") + 1] == "https://m1.example:16066"
    assert cluster[cluster.index("--master-ui-url") + 1] == "http://ui.example:18080"
    local = failover_args(tmp_path)  # local[2]: no master to ask
    assert "--master-ui-url" not in local and "--master-rest-url" not in local
    hook = SparkStreamHook(spec_under(tmp_path, master="spark://m1.example:7077", deploy_mode="client"))
    plain = hook.launch_plan(ACTIVE).runtime_args  # the active driver asks no master
    assert "--master-ui-url" not in plain


def test_a_yarn_hot_standby_asks_every_rm_of_its_own_spec_never_one_a_record_names(tmp_path):
    import threading

    from airflow_streaming.control.yarn_word import YarnWord
    from spark_jobs.runtime.standby import Standby

    args = failover_args(tmp_path, master="yarn", deploy_mode="cluster",
                         cluster={"resourcemanager_url": "http://rm1.example:8088, http://rm2.example:8088/"})
    assert args[args.index("--yarn-rm-url") + 1] == "http://rm1.example:8088,http://rm2.example:8088"
    assert "--master-ui-url" not in args and "--master-rest-url" not in args
    ns = parse_args(args)
    standby = Standby(ns, LocalStorage(), ControlPaths(ns.control_dir), False, threading.Event())
    word = standby.master_word()
    assert isinstance(word, PacedWord) and isinstance(word.word, YarnWord)
    assert word.word.rm_urls == ["http://rm1.example:8088", "http://rm2.example:8088"]
    hook = SparkStreamHook(spec_under(tmp_path, master="yarn", deploy_mode="cluster",
                                      cluster={"resourcemanager_url": "http://rm1.example:8088"}))
    assert "--yarn-rm-url" not in hook.launch_plan(ACTIVE).runtime_args  # the active driver asks no one
    plain = Standby(parse_args(failover_args(tmp_path)), LocalStorage(), ControlPaths(ns.control_dir), False,
                    threading.Event())
    assert plain.master_word() is None  # local[2]: only the lease decides
