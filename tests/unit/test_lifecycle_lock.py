"""The per-stream lifecycle lock on real files, with real live and dead processes as holders."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

import pytest

from airflow_streaming.control.contract import process_start_time
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.lifecycle_lock import LOCK_NAME, LifecycleLock, LifecycleLockHeld, LifecycleLockLost, adoptable

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def storage():
    return LocalStorage()


@pytest.fixture
def control(tmp_path):
    return str(tmp_path / "control" / "s1")


@pytest.fixture
def live_process():
    proc = subprocess.Popen(SLEEPER)
    try:
        start = process_start_time(proc.pid)
        assert start is not None
        yield proc.pid, start
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def dead_process():
    """(pid, start time) of a process that ran and is gone (reaped, so not even a zombie)."""
    proc = subprocess.Popen(SLEEPER)
    try:
        start = process_start_time(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert start is not None and process_start_time(proc.pid) != start
    return proc.pid, start


class SlowStorage(LocalStorage):
    """Local files with a little latency on reads and deletes (like a remote store): widens race windows."""

    def read_bytes(self, path):
        data = super().read_bytes(path)
        time.sleep(random.uniform(0, 0.003))
        return data

    def delete(self, path):
        time.sleep(random.uniform(0, 0.003))
        return super().delete(path)


def write_holder(control: str, pid: int, pid_start_time: float | None, **overrides) -> dict:
    now = time.time()
    holder = {"action": "upgrade", "owner": "alice", "pid": pid, "pid_start_time": pid_start_time,
              "host": socket.gethostname(), "acquired_at": now, "renewed_at": now, "ttl": 600.0, **overrides}
    os.makedirs(control, exist_ok=True)
    with open(os.path.join(control, LOCK_NAME), "w") as fh:
        json.dump(holder, fh)
    return holder


def on_disk(control: str) -> dict | None:
    path = os.path.join(control, LOCK_NAME)
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def test_acquire_creates_the_lock_file_naming_this_process(storage, control):
    lock = LifecycleLock.acquire(storage, control, "upgrade", owner="alice", ttl=30.0)
    held = on_disk(control)
    assert lock.path == os.path.join(control, LOCK_NAME) and lock.took_over is None
    assert held == lock.holder
    assert (held["action"], held["owner"], held["pid"], held["host"], held["ttl"]) == \
        ("upgrade", "alice", os.getpid(), socket.gethostname(), 30.0)
    assert held["pid_start_time"] == process_start_time(os.getpid())
    lock.release()
    assert on_disk(control) is None


def test_second_acquire_while_held_raises_naming_the_holder(storage, control):
    with LifecycleLock.acquire(storage, control, "upgrade", owner="alice") as lock:
        with pytest.raises(LifecycleLockHeld) as exc:
            LifecycleLock.acquire(storage, control, "restart", owner="bob")
        msg = str(exc.value)
        assert "upgrade" in msg and "alice" in msg and f"pid {os.getpid()}" in msg
        assert exc.value.holder == lock.holder
        assert on_disk(control) == lock.holder  # the loser did not touch it


def test_lock_held_by_another_live_process_is_not_taken_over(storage, control, live_process):
    holder = write_holder(control, *live_process)
    with pytest.raises(LifecycleLockHeld):
        LifecycleLock.acquire(storage, control, "restart")
    assert on_disk(control) == holder


def test_lock_of_a_dead_process_on_this_host_is_taken_over(storage, control, dead_process):
    old = write_holder(control, *dead_process)
    with LifecycleLock.acquire(storage, control, "restart", owner="bob") as lock:
        assert lock.took_over == old
        assert on_disk(control) == lock.holder and lock.holder["pid"] == os.getpid()
    assert not os.path.exists(os.path.join(control, LOCK_NAME + ".takeover"))


def test_lock_of_a_recycled_pid_is_taken_over(storage, control, live_process):
    pid, start = live_process
    old = write_holder(control, pid, start - 100.0)  # same pid, another process's start time
    with LifecycleLock.acquire(storage, control, "restart") as lock:
        assert lock.took_over == old


def test_lock_not_renewed_within_its_ttl_is_taken_over_though_its_holder_lives(storage, control, live_process):
    old = write_holder(control, *live_process, renewed_at=time.time() - 120, ttl=60.0)
    with LifecycleLock.acquire(storage, control, "restart") as lock:
        assert lock.took_over == old


def test_lock_on_another_host_renewed_recently_is_held(storage, control, dead_process):
    write_holder(control, *dead_process, host="some-other-host")  # its pid cannot be checked from here
    with pytest.raises(LifecycleLockHeld, match="some-other-host"):
        LifecycleLock.acquire(storage, control, "restart")


def test_renew_updates_renewed_at(storage, control):
    with LifecycleLock.acquire(storage, control, "upgrade", keep_alive=False) as lock:
        first = on_disk(control)
        time.sleep(0.01)
        before = time.time()
        lock.renew()
        assert on_disk(control)["renewed_at"] >= before > first["renewed_at"]
        assert on_disk(control) == lock.holder and lock.holder["acquired_at"] == first["acquired_at"]


def test_renew_is_a_compare_and_swap_a_rewritten_lock_is_lost(storage, control):
    # Someone rewrote the file with the same holder fields (a read-then-write renewal would not notice).
    with LifecycleLock.acquire(storage, control, "upgrade", keep_alive=False) as lock:
        with open(lock.path, "w") as fh:
            json.dump({**lock.holder, "renewed_at": lock.holder["renewed_at"] - 500}, fh)
        with pytest.raises(LifecycleLockLost, match="taken over"):
            lock.renew()
        with pytest.raises(LifecycleLockLost):
            lock.ensure()


def test_after_a_takeover_renew_raises_and_release_keeps_the_new_holders_file(storage, control, live_process):
    lock = LifecycleLock.acquire(storage, control, "upgrade")
    other = write_holder(control, *live_process, action="rollback")
    with pytest.raises(LifecycleLockLost):
        lock.renew()
    lock.release()
    assert on_disk(control) == other


def test_renew_after_the_lock_file_vanished_raises(storage, control):
    lock = LifecycleLock.acquire(storage, control, "upgrade")
    os.unlink(lock.path)
    with pytest.raises(LifecycleLockLost):
        lock.renew()


def test_context_manager_releases_even_on_error(storage, control):
    with pytest.raises(ZeroDivisionError):
        with LifecycleLock.acquire(storage, control, "upgrade"):
            assert on_disk(control) is not None
            1 / 0
    assert on_disk(control) is None
    LifecycleLock.acquire(storage, control, "restart").release()  # free again


def test_two_threads_taking_over_the_same_stale_lock_exactly_one_wins(tmp_path, dead_process):
    storage = SlowStorage()
    for attempt in range(20):
        control = str(tmp_path / f"c{attempt}")
        write_holder(control, *dead_process)
        barrier = threading.Barrier(2)
        results: list[object] = []

        def take(name: str) -> None:
            barrier.wait()
            try:
                results.append(LifecycleLock.acquire(storage, control, "upgrade", owner=name))
            except LifecycleLockHeld as exc:
                results.append(exc)

        threads = [threading.Thread(target=take, args=(n,)) for n in ("t1", "t2")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        winners = [r for r in results if isinstance(r, LifecycleLock)]
        losers = [r for r in results if isinstance(r, LifecycleLockHeld)]
        assert len(winners) == 1 and len(losers) == 1, f"attempt {attempt}: {results}"
        assert on_disk(control) == winners[0].holder
        assert losers[0].holder["owner"] == winners[0].holder["owner"]  # the loser saw the winner's lock
        winners[0].release()


def test_supervise_skips_a_stream_whose_lifecycle_lock_another_process_holds(tmp_path, live_process):
    from airflow_streaming.hooks.streaming_job import SparkStreamHook
    from airflow_streaming.spec import StreamSpec
    from airflow_streaming.supervision.policy import RestartPolicy
    from airflow_streaming.lifecycle.supervisor import supervise

    spec = StreamSpec(name="s1", application="events_etl", checkpoint_location=str(tmp_path / "ckpt"),
                      control_location=str(tmp_path / "control"))
    hook = SparkStreamHook(spec)
    events: list[dict] = []

    free = supervise(hook, RestartPolicy(), notify=events.append)
    assert free.action == "NOTHING"                 # lock free: the pass runs (nothing deployed)
    assert on_disk(hook.paths.root) is None         # and releases the lock

    holder = write_holder(hook.paths.root, *live_process, action="upgrade", owner="bob")
    result = supervise(hook, RestartPolicy(), notify=events.append)
    assert (result.stream, result.action) == ("s1", "SKIPPED")
    assert "upgrade" in result.reason and "bob" in result.reason
    assert on_disk(hook.paths.root) == holder and events == []


def test_ensure_never_mistakes_the_keepers_own_renewal_for_a_takeover(storage, control):
    # The keeper renews every 0.5 s while the action checks the lock as often as it can: a check that
    # reads the file between the keeper's write and its bookkeeping must not call the lock lost.
    with LifecycleLock.acquire(storage, control, "upgrade", ttl=2.0) as lock:
        deadline = time.monotonic() + 3.0
        checks = 0
        while time.monotonic() < deadline:
            lock.ensure()
            checks += 1
        assert checks > 100 and lock.lost is None
        assert on_disk(control)["renewed_at"] > lock.holder["acquired_at"]  # it was renewed meanwhile


def test_a_lock_handed_to_a_trigger_is_kept_by_its_id_and_taken_back(storage, control):
    from airflow_streaming.control.lifecycle_lock import renew_deferred

    lock = LifecycleLock.acquire(storage, control, "upgrade", owner="task try 1", ttl=60.0)
    holder_id = lock.defer()
    held = on_disk(control)
    assert held["deferred"] and held["pid"] == 0 and held["id"] == holder_id
    # While deferred, no process holds it, yet nobody can take it (not stale while renewed).
    with pytest.raises(LifecycleLockHeld):
        LifecycleLock.acquire(storage, control, "supervise")
    time.sleep(0.01)
    assert renew_deferred(storage, control, holder_id) and on_disk(control)["renewed_at"] > held["renewed_at"]
    assert not renew_deferred(storage, control, "someone-else")
    # The resumed task (another process, maybe another host) takes it back by id.
    resumed = LifecycleLock.resume(storage, control, holder_id)
    try:
        assert on_disk(control)["pid"] == os.getpid() and not on_disk(control)["deferred"]
        assert not renew_deferred(storage, control, holder_id)  # the trigger's renewals end there
    finally:
        resumed.release()
    assert on_disk(control) is None


def test_a_deferred_lock_that_expired_and_was_taken_over_cannot_be_resumed(storage, control):
    lock = LifecycleLock.acquire(storage, control, "upgrade", ttl=0.2)
    holder_id = lock.defer()
    time.sleep(0.3)  # nobody renewed it (the triggerer was down longer than the ttl)
    with LifecycleLock.acquire(storage, control, "supervise") as other:
        assert other.took_over and other.took_over["id"] == holder_id
        with pytest.raises(LifecycleLockLost, match=f"no longer names the deferred action {holder_id}"):
            LifecycleLock.resume(storage, control, holder_id)


def test_adoptable_over_every_combination_of_holder_and_taker():
    """Exhaustive over the dimensions that matter: only a later try of the same task instance may take a lock
    that an earlier try handed to its trigger; nothing else changes the takeover rules. The expected answer
    comes from how each owner was built, not from parsing it."""
    import itertools

    from types import SimpleNamespace

    from airflow_streaming.task_owner import TaskOwner, parse_task_owner, task_owner

    instances = ["d.t run manual__1", "d.t run manual__2", "d.u run manual__1", "d.t[0] run manual__1",
                 "d.t[1] run manual__1", "a.b.c run scheduled__2026 try x"]
    owners: list[tuple[str | None, tuple[str, int] | None]] = [(None, None), ("supervisor pid 42", None),
                                                                ("alice", None)]
    owners += [(f"{ti} try {n}", (ti, n)) for ti in instances for n in (1, 2, 3)]
    for (holder_owner, theirs), deferred, (taker, mine) in itertools.product(owners, (True, False), owners):
        holder = {"pid": 0, "host": "h", "owner": holder_owner, "deferred": deferred}
        expected = bool(deferred and theirs and mine and theirs[0] == mine[0] and theirs[1] < mine[1])
        assert adoptable(holder, taker) is expected, (holder_owner, deferred, taker)
    assert not adoptable(None, "d.t run r try 2")
    assert parse_task_owner("d.t[3] run manual__1 try 12") == TaskOwner("d.t", 3, "manual__1", 12)
    assert parse_task_owner("dag.with.dots.task run run with spaces try 2") == \
        TaskOwner("dag.with.dots.task", None, "run with spaces", 2)
    assert parse_task_owner("supervisor pid 42") is None and parse_task_owner(7) is None
    ti = SimpleNamespace(dag_id="a.b", task_id="apply", run_id="r 1", try_number=3, map_index=4)
    assert parse_task_owner(task_owner(ti)) == TaskOwner("a.b.apply", 4, "r 1", 3)  # written and read alike
    unmapped = SimpleNamespace(dag_id="d", task_id="t", run_id="r", try_number=1, map_index=-1)
    assert task_owner(unmapped) == "d.t run r try 1"


def test_a_later_try_of_the_same_task_takes_over_the_lock_its_earlier_try_handed_to_a_trigger(storage, control):
    """Airflow failed try 1 after its trigger fired (the defer race of apache/airflow#72716): try 2 takes the
    lock at once, the old trigger can no longer renew it, and the old holder id resumes nothing. Another
    task, or an older try, still finds it held."""
    from airflow_streaming.control.lifecycle_lock import renew_deferred

    first = LifecycleLock.acquire(storage, control, "stop", owner="ops.operate run manual__1 try 1", ttl=600.0)
    holder_id = first.defer()
    for other in ("ops.operate run manual__2 try 2", "ops.other run manual__1 try 2", "ops.operate run manual__1 try 1",
                  "supervisor pid 1"):
        with pytest.raises(LifecycleLockHeld):
            LifecycleLock.acquire(storage, control, "stop", owner=other, keep_alive=False)
    assert on_disk(control)["id"] == holder_id
    with LifecycleLock.acquire(storage, control, "stop", owner="ops.operate run manual__1 try 2") as second:
        assert second.took_over and second.took_over["id"] == holder_id
        assert on_disk(control)["pid"] == os.getpid() and not on_disk(control).get("deferred")
        assert not renew_deferred(storage, control, holder_id)
        with pytest.raises(LifecycleLockLost, match=f"no longer names the deferred action {holder_id}"):
            LifecycleLock.resume(storage, control, holder_id)
        # and a resumed (non-deferred) holder of try 2 is never adopted by a try 3: the usual rules apply
        with pytest.raises(LifecycleLockHeld):
            LifecycleLock.acquire(storage, control, "stop", owner="ops.operate run manual__1 try 3", keep_alive=False)
