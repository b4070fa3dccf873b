"""Proof that a hot standby's crashed run is dead (plain Python, driver side; no I/O).

The takeover rule (:mod:`.takeover`) asks one question of the run that holds the stream's lease: is it
dead? This module answers it from what the standby has already gathered - it reads nothing itself:

- the lease (:class:`~.contract.Lease`): its host, its ``renewed_at`` and ``ttl``;
- on this host, the holder process as ``/proc`` shows it (:class:`Holder`: the lease's pid absent, now
  another process, or alive) and whether any process of the run is alive here (``--run-id`` on its
  command line: :func:`~.process.live_run_pids`);
- whether the driver record also puts the run on this host (local target);
- how long the standby ITSELF has seen the lease's bytes unchanged (:class:`~.takeover.LeaseWatch`);
- the cluster manager's word when the run has one (:class:`Word`: the standalone master's state of the
  driver submission or of the application, the YARN ResourceManager's state of the application, or the
  Kubernetes API server's phase of the driver pod, and which id it names) and the ids the run recorded
  (:class:`RunIds`: the submission id of its driver record, the application id of its status document, the
  YARN application id or the driver pod of its driver record).

The answer (:func:`decide`) is a :class:`Decision`: ``PROVEN_DEAD`` with the proof (take over now),
``ALIVE`` (never take over), or ``WAIT`` (no proof yet). The proofs, strongest first:

1. ``PROCESS_GONE`` - the holder's pid on this host is absent or is another process now, and the driver
   record puts the run on this host (local target): the identity check of a same-host standby.
2. ``SUBMISSION_ENDED`` - the standalone master says the driver submission THE RUN RECORDED is FINISHED,
   KILLED or FAILED: states a worker reports after the driver process exited (``DriverRunner``). ``ERROR``
   is not proof: the master also gives it to the drivers of a worker it lost (a worker cut off from the
   master, whose driver may run on) and to drivers not re-found after a master's recovery.
3. ``APPLICATION_ENDED`` - the master, in its ALIVE state, lists the application THE RUN RECORDED among
   its completed applications as FINISHED, KILLED or FAILED: the master dropped that driver (it
   unregistered, or its connection to the master ended) and had its executors killed. A client-mode
   driver cut off from the master is not a dead process; it has no executors left from this master,
   and once the lease moved, its lease check before each batch's write (``spark_jobs/runtime/lease_check.py``)
   stops it from committing.
4. ``YARN_APPLICATION_ENDED`` - the YARN ResourceManager says the application THE RUN'S DRIVER RECORD names
   (the id the submission read from ``spark-submit``'s output, a record of the ``yarn`` target) is FINISHED,
   FAILED or KILLED: the RM ended its application master's container, in which a cluster-mode driver runs.
   An application the RM does not know (404: an RM restarted without its state store) is no proof. As with
   ``APPLICATION_ENDED``, a driver whose NodeManager lost the RM may outlive its application (the RM fails
   an attempt of a lost node; the NodeManager kills its containers only once it hears of it): once the lease
   moved, its next renewal or its lease check before a ``foreachBatch`` write stops it.
5. ``POD_ENDED`` - the Kubernetes API server says the driver pod THE RUN'S DRIVER RECORD names
   (``<namespace>/<pod>``, a record of the ``kubernetes`` target) is in phase ``Succeeded`` or ``Failed``:
   the kubelet reports these once every container of the pod terminated, and they are final. A pod the API
   server does not know (404) is no proof: a force-deleted pod's containers may still run on its node. A pod
   on a node the control plane lost keeps its last phase (Running), so a partitioned driver gives no proof.
6. ``LEASE_EXPIRED`` - no word, only the lease: stale by its content (the holder here gone; elsewhere not
   renewed for its ttl) and seen unchanged by the standby itself for the lease's ttl. This is exactly the
   rule before proof-of-death existed (its own clock, so a forged ``renewed_at`` cannot shorten it).

Fail closed: an unreachable master, a master not ALIVE (standby, recovering), a master that does not know
the id (it restarted without its state, or forgot the entry), UNKNOWN, RUNNING/SUBMITTED/RELAUNCHING/
WAITING, ERROR, and any word about another submission or application than the one the run recorded are
never proof; the lease alone then decides, as before. A process of the run alive on this host, or the
holder's own pid alive here, is ``ALIVE`` whatever the master says.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Verdict(enum.Enum):
    """What a standby does about the run holding the lease."""

    PROVEN_DEAD = "proven_dead"
    ALIVE = "alive"
    WAIT = "wait"


class Proof(enum.Enum):
    """Why a run is dead (see the module docstring, strongest first)."""

    PROCESS_GONE = "process_gone"
    SUBMISSION_ENDED = "submission_ended"
    APPLICATION_ENDED = "application_ended"
    YARN_APPLICATION_ENDED = "yarn_application_ended"
    POD_ENDED = "pod_ended"
    LEASE_EXPIRED = "lease_expired"


class Holder(enum.Enum):
    """The lease's holder process as this host sees it."""

    ELSEWHERE = "elsewhere"
    """The lease names another host: its pid says nothing here."""
    ABSENT = "absent"
    """The lease names this host and no process has its pid."""
    OTHER = "other"
    """The lease names this host and its pid is another process now (other start time or command line)."""
    ALIVE = "alive"
    """The lease names this host and its holder process is alive."""


class WordKind(enum.Enum):
    """What the master was asked about."""

    SUBMISSION = "submission"
    """A driver submission (``GET /v1/submissions/status/<id>``): standalone cluster mode."""
    APPLICATION = "application"
    """An application (the master's ``/json/``): a client-mode driver on any host."""
    YARN_APPLICATION = "yarn_application"
    """A YARN application (the ResourceManager's ``GET /ws/v1/cluster/apps/<id>``): YARN cluster mode."""
    KUBE_POD = "kube_pod"
    """A driver pod, ``<namespace>/<name>`` (``GET /api/v1/namespaces/<ns>/pods/<name>``): Kubernetes cluster mode."""


#: Driver states a worker reports once the driver process exited (Spark's ``DriverState``).
SUBMISSION_EXITED = frozenset({"FINISHED", "KILLED", "FAILED"})
#: Application states of the master's completed applications (Spark's ``ApplicationState``).
APPLICATION_ENDED = frozenset({"FINISHED", "KILLED", "FAILED"})
#: Final states of a YARN application (the ResourceManager's ``YarnApplicationState``).
YARN_APPLICATION_ENDED = frozenset({"FINISHED", "FAILED", "KILLED"})
#: Final phases of a Kubernetes pod (``PodPhase``): every container terminated.
POD_ENDED = frozenset({"Succeeded", "Failed"})
#: The master's own state in ``/json/`` (``status``) in which its word counts.
MASTER_ALIVE = "ALIVE"


@dataclass(frozen=True)
class Word:
    """The cluster manager's answer about one id (``answered=False``: unreachable, or an answer that could not
    be read - never proof)."""

    kind: WordKind
    subject: str
    """The id the answer names (the submission id of the status reply, or the application's ``id``)."""
    answered: bool
    state: str | None = None
    """The master's state of ``subject``; ``None``: the master does not know it."""
    completed: bool = False
    """Applications: listed among ``completedapps`` (not ``activeapps``)."""
    master_status: str | None = None
    """The master's ``status`` (``/json/``: ALIVE, STANDBY, RECOVERING, ...); ``None`` when the reply has none
    (the REST status reply: a master that is not ALIVE answers it with ``success: false``)."""


@dataclass(frozen=True)
class RunIds:
    """The cluster manager's ids the crashed run itself recorded (``None``: not recorded)."""

    submission_id: str | None = None
    app_id: str | None = None
    yarn_app_id: str | None = None
    """The YARN application id of a ``yarn`` target's driver record (its ``handle``), read by the submission."""
    kube_pod: str | None = None
    """``<namespace>/<pod>`` of a ``kubernetes`` target's driver record (its ``handle``), named by the submission."""


def recorded_id(kind: WordKind, ids: RunIds) -> str | None:
    """The id of ``ids`` that a word of ``kind`` must name to say anything about the run."""
    return {WordKind.SUBMISSION: ids.submission_id, WordKind.APPLICATION: ids.app_id,
            WordKind.YARN_APPLICATION: ids.yarn_app_id, WordKind.KUBE_POD: ids.kube_pod}[kind]


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    proof: Proof | None = None


def word_proof(word: Word | None, ids: RunIds) -> tuple[Proof | None, str]:
    """The proof a master's ``word`` gives about the run that recorded ``ids``, and what it says (``None``: no
    proof, and why not)."""
    if word is None:
        return None, "no word from the cluster manager"
    who = {WordKind.YARN_APPLICATION: "the ResourceManager", WordKind.KUBE_POD: "the API server"}.get(word.kind,
                                                                                                   "the master")
    if not word.answered:
        return None, f"{who} did not answer about {word.kind.value} {word.subject}"
    recorded = recorded_id(word.kind, ids)
    if not recorded or word.subject != recorded:
        return None, (f"{who}'s word is about {word.kind.value} {word.subject}, not the one the run recorded "
                      f"({recorded or 'none'})")
    if word.master_status is not None and word.master_status != MASTER_ALIVE:
        return None, f"{who} is {word.master_status}, not {MASTER_ALIVE}: its word is not final"
    said = f"{who} says {word.kind.value} {word.subject} is {word.state or 'unknown to it'}"
    if word.kind is WordKind.SUBMISSION and word.state in SUBMISSION_EXITED:
        return Proof.SUBMISSION_ENDED, said
    if word.kind is WordKind.APPLICATION and word.completed and word.state in APPLICATION_ENDED:
        return Proof.APPLICATION_ENDED, said
    if word.kind is WordKind.YARN_APPLICATION and word.state in YARN_APPLICATION_ENDED:
        return Proof.YARN_APPLICATION_ENDED, said
    if word.kind is WordKind.KUBE_POD and word.state in POD_ENDED:
        return Proof.POD_ENDED, said
    return None, said


def decide(holder: Holder, run_alive_here: bool, record_local_here: bool, lease_age: float, ttl: float,
           seen_unchanged: float, word: Word | None = None, ids: RunIds = RunIds()) -> Decision:
    """Whether the run holding the lease is dead (see the module docstring).

    ``lease_age``: now minus the lease's ``renewed_at`` (the lease's own clock); ``seen_unchanged``: how long
    this standby has seen the lease's bytes unchanged (its own monotonic clock); ``run_alive_here``: a process
    of the run (its ``--run-id``) is alive on this host; ``record_local_here``: the driver record puts the run
    on this host, local target."""
    if run_alive_here:
        return Decision(Verdict.ALIVE, "a process of the run is alive on this host")
    if holder is Holder.ALIVE:
        return Decision(Verdict.ALIVE, "the lease's holder process is alive on this host")
    here = holder is not Holder.ELSEWHERE
    if here and record_local_here:
        return Decision(Verdict.PROVEN_DEAD, f"the holder's pid on this host is {holder.value} and the run was "
                                             "submitted from this host", Proof.PROCESS_GONE)
    proof, said = word_proof(word, ids)
    if proof is not None:
        return Decision(Verdict.PROVEN_DEAD, said, proof)
    stale = here or lease_age > ttl
    if not stale:
        return Decision(Verdict.WAIT, f"the lease was renewed {lease_age:.0f}s ago, within its ttl {ttl:.0f}s ({said})")
    if seen_unchanged < ttl:
        return Decision(Verdict.WAIT, f"the lease is stale by its content, but this standby has seen it unchanged for "
                                      f"{seen_unchanged:.0f}s of its ttl {ttl:.0f}s only ({said})")
    return Decision(Verdict.PROVEN_DEAD, f"the lease is stale and this standby saw it unchanged for its ttl "
                                         f"{ttl:.0f}s ({said})", Proof.LEASE_EXPIRED)


__all__ = ["APPLICATION_ENDED", "MASTER_ALIVE", "POD_ENDED", "SUBMISSION_EXITED", "YARN_APPLICATION_ENDED", "Decision",
           "Holder", "Proof", "RunIds", "Verdict", "Word", "WordKind", "decide", "recorded_id", "word_proof"]
