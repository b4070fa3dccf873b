"""The proof-of-death rule (airflow_streaming.control.death_proof) over the product of all its inputs' values,
with its invariants as code, and the takeover rule (control.takeover.judge_takeover) taking a cross-host run
over on the master's word on real control files."""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
import time

import pytest

from airflow_streaming.control import contract, takeover
from airflow_streaming.control.contract import ControlPaths, DriverRecord, Lease
from airflow_streaming.control.death_proof import (
    Decision, Holder, Proof, RunIds, Verdict, Word, WordKind, decide, recorded_id, word_proof,
)
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.process import process_start_time

TTL = 120.0
SUBMISSION, APP = "driver-20261127120000-0001", "app-20261127120001-0001"
YARN_APP = "application_1700000000000_0001"
STATES = (None, "SUBMITTED", "RUNNING", "RELAUNCHING", "WAITING", "FINISHED", "KILLED", "FAILED", "ERROR", "UNKNOWN")
MASTER_STATUSES = (None, "ALIVE", "STANDBY", "RECOVERING", "COMPLETING_RECOVERY")
SUBJECTS = (SUBMISSION, APP, "driver-20261127120000-0002", "app-20261127120001-0002", "")
#: The ResourceManager's application states (``YarnApplicationState``), and None: an id the RM does not know.
YARN_STATES = (None, "NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING", "FINISHED", "FAILED", "KILLED")
YARN_SUBJECTS = (YARN_APP, "application_1700000000000_0002", APP, SUBMISSION, "")
POD = "streams/s1-20261127t000000z-aaaaaaaa-driver"
#: Pod phases (``PodPhase``), and None: a pod the API server does not know.
POD_PHASES = (None, "Pending", "Running", "Succeeded", "Failed", "Unknown")
POD_SUBJECTS = (POD, "streams/another-driver", "other-namespace/s1-20261127t000000z-aaaaaaaa-driver", YARN_APP, "")
WORDS = (None,) + tuple(Word(kind, subject, answered, state, completed, status) for kind, subject, answered, state,
                        completed, status in itertools.product((WordKind.SUBMISSION, WordKind.APPLICATION), SUBJECTS,
                                                               (True, False), STATES, (True, False), MASTER_STATUSES)) \
    + tuple(Word(WordKind.YARN_APPLICATION, subject, answered, state, completed, status) for subject, answered, state,
            completed, status in itertools.product(YARN_SUBJECTS, (True, False), YARN_STATES, (True, False),
                                                   (None, "STANDBY"))) \
    + tuple(Word(WordKind.KUBE_POD, subject, answered, state, False, status) for subject, answered, state, status in
            itertools.product(POD_SUBJECTS, (True, False), POD_PHASES, (None, "STANDBY")))
IDS = tuple(RunIds(s, a, y, p) for s, a, y, p in itertools.product((None, SUBMISSION), (None, APP), (None, YARN_APP),
                                                                   (None, POD)))
LEASE_AGES = (0.0, TTL - 1, TTL, TTL + 1, 10 * TTL)
SEEN = (0.0, TTL - 1, TTL, 10 * TTL)


def before_proof_of_death(holder: Holder, run_alive_here: bool, record_local_here: bool, lease_age: float,
                          ttl: float, seen: float) -> bool:
    """The takeover rule as it was before any proof of death (takeover.judge_takeover of the previous commit,
    written out): whether it took over."""
    here = holder is not Holder.ELSEWHERE
    stale = (holder is not Holder.ALIVE) if here else lease_age > ttl
    if not stale or run_alive_here:
        return False
    if not (here and record_local_here) and seen < ttl:
        return False
    return True


def names_the_run(word: Word, ids: RunIds) -> bool:
    recorded = {WordKind.SUBMISSION: ids.submission_id, WordKind.APPLICATION: ids.app_id,
                WordKind.YARN_APPLICATION: ids.yarn_app_id, WordKind.KUBE_POD: ids.kube_pod}[word.kind]
    assert recorded == recorded_id(word.kind, ids)
    return bool(recorded) and word.subject == recorded


ALL_IDS = RunIds(SUBMISSION, APP, YARN_APP, POD)


def for_the_rule(word: Word | None, ids: RunIds) -> bool:
    """Whether ``(word, ids)`` is one of the pairs the whole rule is checked on: the ids the word is about
    (``recorded_id``) in both its values, and the other ids all absent or all recorded. ``word_proof`` itself
    is checked on every pair (the only way ids reach ``decide``); the rule's product over all 16 combinations
    of ids took 47 s for nothing more."""
    fields = ("submission_id", "app_id", "yarn_app_id", "kube_pod")
    own = {WordKind.SUBMISSION: "submission_id", WordKind.APPLICATION: "app_id",
           WordKind.YARN_APPLICATION: "yarn_app_id", WordKind.KUBE_POD: "kube_pod"}.get(word.kind) if word else None
    others = {getattr(ids, f) is None for f in fields if f != own}
    return len(others) == 1


def word_proofs() -> list[tuple[Word | None, RunIds, Proof | None]]:
    """Every (word, ids) with the proof the word gives, its own invariants checked here once for each pair;
    returns the pairs the whole rule is checked on (:func:`for_the_rule`)."""
    out = []
    for word, ids in itertools.product(WORDS, IDS):
        proof, said = word_proof(word, ids)
        assert said
        if proof is not None:  # a word is proof only when it names exactly this run, from a master that is ALIVE
            assert word is not None and word.answered and names_the_run(word, ids)
            assert word.master_status in (None, "ALIVE")
            assert word.state in (("Succeeded", "Failed") if word.kind is WordKind.KUBE_POD else
                                  ("FINISHED", "KILLED", "FAILED"))
            assert proof is {WordKind.SUBMISSION: Proof.SUBMISSION_ENDED, WordKind.APPLICATION: Proof.APPLICATION_ENDED,
                             WordKind.YARN_APPLICATION: Proof.YARN_APPLICATION_ENDED,
                             WordKind.KUBE_POD: Proof.POD_ENDED}[word.kind]
            if word.kind is WordKind.APPLICATION:
                assert word.completed
        # Fail closed: every other word is no proof.
        if word is None or not word.answered or not names_the_run(word, ids) or word.state in (
                None, "UNKNOWN", "ERROR", "RUNNING", "SUBMITTED", "RELAUNCHING", "WAITING", "NEW", "NEW_SAVING",
                "ACCEPTED", "Pending", "Running", "Unknown") \
                or word.master_status not in (None, "ALIVE"):
            assert proof is None, (word, ids)
        if for_the_rule(word, ids):
            out.append((word, ids, proof))
    return out


def test_the_rule_over_every_combination_of_its_inputs():
    seen_proofs: set[Proof] = set()
    checked = 0
    pairs = word_proofs()
    for holder, alive_here, local_here, age, seen in itertools.product(Holder, (False, True), (False, True),
                                                                        LEASE_AGES, SEEN):
        before = before_proof_of_death(holder, alive_here, local_here, age, TTL, seen)
        for word, ids, proof in pairs:
            d = decide(holder, alive_here, local_here, age, TTL, seen, word, ids)
            checked += 1
            assert isinstance(d, Decision) and d.reason
            assert (d.verdict is Verdict.PROVEN_DEAD) == (d.proof is not None)
            if d.proof is not None:
                seen_proofs.add(d.proof)
            # Never a takeover while the holder or any process of the run is alive on this host.
            if alive_here or holder is Holder.ALIVE:
                assert d.verdict is Verdict.ALIVE, (holder, alive_here, word, d)
                continue
            assert d.verdict is not Verdict.ALIVE
            if proof is None:  # without a word's proof only the lease decides, exactly as before
                assert (d.verdict is Verdict.PROVEN_DEAD) == before, (holder, local_here, age, seen, word, ids, d)
                if d.verdict is Verdict.PROVEN_DEAD:
                    assert d.proof in (Proof.PROCESS_GONE, Proof.LEASE_EXPIRED)
            else:  # with one: now, whatever the lease's age and the standby's own clock say
                assert d.verdict is Verdict.PROVEN_DEAD
                assert d.proof is (Proof.PROCESS_GONE if holder is not Holder.ELSEWHERE and local_here else proof)
            # A word never holds back a takeover the lease alone allowed.
            if before:
                assert d.verdict is Verdict.PROVEN_DEAD
    assert seen_proofs == set(Proof)
    assert len(pairs) == 2 + (len(WORDS) - 1) * 4  # no word: ids none or all; a word: its own 2 x the others 2
    assert checked == len(Holder) * 2 * 2 * len(LEASE_AGES) * len(SEEN) * len(pairs)


@pytest.mark.parametrize("word,why", [
    (Word(WordKind.SUBMISSION, SUBMISSION, False), "did not answer"),
    (Word(WordKind.SUBMISSION, "driver-20261127120000-0002", True, "FINISHED"), "not the one the run recorded"),
    (Word(WordKind.APPLICATION, APP, True, "FINISHED", True, "RECOVERING"), "not ALIVE"),
    (Word(WordKind.SUBMISSION, SUBMISSION, True, None), "unknown to it"),
    (Word(WordKind.SUBMISSION, SUBMISSION, True, "ERROR"), "is ERROR"),
    (Word(WordKind.APPLICATION, APP, True, "FINISHED", False, "ALIVE"), "is FINISHED"),  # not among completedapps
])
def test_no_proof_says_why(word, why):
    proof, said = word_proof(word, RunIds(SUBMISSION, APP))
    assert proof is None and why in said, said


# ----------------------------------------------------------------------------------- on real control files

ACTIVE, STANDBY = "20261127T000000Z-aaaaaaaa", "20261127T000001Z-bbbbbbbb"


@pytest.fixture
def cross_host(tmp_path):
    """A stream whose active run is a standalone-cluster submission on another host, its lease FRESH (the
    lease alone would make a standby wait at least the ttl); its status document records its application."""
    storage, paths = LocalStorage(), ControlPaths(str(tmp_path / "s"))
    storage.makedirs(paths.root)
    contract.write_marker(storage, paths, ACTIVE, "v1")
    storage.write_atomic(paths.driver, DriverRecord(
        run_id=ACTIVE, stream="s", version="v1", application="events_etl", host="airflow-host", command="POST ...",
        log_path="/l", submitted_at=time.time(), checkpoint_location="/c", target="standalone-cluster",
        handle={"submission_id": SUBMISSION}).to_json())
    now = time.time()
    storage.write_atomic(paths.lease, Lease(ACTIVE, 4242, 1.0, "worker-host", now, now, TTL).to_json())
    storage.write_atomic(paths.status, json.dumps({"run_id": ACTIVE, "app_id": APP}).encode())
    return storage, paths


def judge(storage, paths, word, **kw):
    asked: list[RunIds] = []

    def ask(ids: RunIds) -> Word | None:
        asked.append(ids)
        return word

    judged = takeover.judge_takeover(storage, paths, STANDBY, "v1", watch=takeover.LeaseWatch(), word=ask, **kw)
    return judged, asked


@pytest.mark.parametrize("word", [Word(WordKind.SUBMISSION, SUBMISSION, True, "KILLED"),
                                  Word(WordKind.APPLICATION, APP, True, "FINISHED", True, "ALIVE")])
def test_a_cross_host_run_is_taken_over_at_once_on_the_masters_word(cross_host, word):
    storage, paths = cross_host
    judged, asked = judge(storage, paths, word)
    assert asked == [RunIds(SUBMISSION, APP)]  # the ids the run recorded: the record's and the status document's
    assert judged.act == "take_over" and judged.run_id == ACTIVE and "ended" in judged.reason, judged
    lease = takeover.take_over(storage, paths, judged, STANDBY, "v1", b'{"x": 1}', TTL, 1, 1.0, socket.gethostname())
    assert lease is not None and contract.read_lease(storage, paths).run_id == STANDBY


@pytest.mark.parametrize("word", [None, Word(WordKind.SUBMISSION, SUBMISSION, False),
                                  Word(WordKind.SUBMISSION, SUBMISSION, True, "RUNNING"),
                                  Word(WordKind.SUBMISSION, SUBMISSION, True, "ERROR"),
                                  Word(WordKind.SUBMISSION, "driver-20261127120000-0002", True, "FINISHED"),
                                  Word(WordKind.APPLICATION, APP, True, "FINISHED", True, "STANDBY")])
def test_without_proof_a_cross_host_run_waits_for_its_lease(cross_host, word):
    storage, paths = cross_host
    before = {p: storage.read_bytes(p) for p in (paths.marker, paths.driver, paths.lease)}
    judged, asked = judge(storage, paths, word)
    assert judged.act == "wait" and "renewed" in judged.reason and asked, judged
    assert {p: storage.read_bytes(p) for p in before} == before


def test_the_status_of_another_run_names_no_application(cross_host):
    storage, paths = cross_host
    storage.write_atomic(paths.status, json.dumps({"run_id": "20261126T000000Z-zzzzzzzz", "app_id": APP}).encode())
    judged, asked = judge(storage, paths, Word(WordKind.APPLICATION, APP, True, "FINISHED", True, "ALIVE"))
    assert asked == [RunIds(SUBMISSION, None)] and judged.act == "wait", judged


def test_a_holder_alive_on_this_host_is_never_taken_over_on_a_word(cross_host):
    """A lease naming a live process of this host (a forged lease, or a master's word about a run whose holder
    is here): the word is not even asked, the run is alive."""
    storage, paths = cross_host
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        now = time.time()
        storage.write_atomic(paths.lease, Lease(ACTIVE, proc.pid, process_start_time(proc.pid), socket.gethostname(),
                                                now - 999, now - 999, TTL).to_json())
        judged, asked = judge(storage, paths, Word(WordKind.SUBMISSION, SUBMISSION, True, "FINISHED"))
        assert judged.act == "wait" and "alive on this host" in judged.reason and asked == [], judged
    finally:
        proc.kill()
        proc.wait()
    # Gone now (its pid absent), but the record puts the run elsewhere: the word is what proves it, at once.
    judged, asked = judge(storage, paths, Word(WordKind.SUBMISSION, SUBMISSION, True, "FINISHED"))
    assert judged.act == "take_over" and "submission_ended" in judged.reason and asked, judged


def test_a_process_of_the_run_alive_here_wins_over_the_word(cross_host):
    storage, paths = cross_host
    judged, asked = judge(storage, paths, Word(WordKind.SUBMISSION, SUBMISSION, True, "FINISHED"),
                          alive_here=lambda run: [4321] if run == ACTIVE else [])
    assert judged.act == "wait" and "pid 4321" in judged.reason and asked == [], judged
