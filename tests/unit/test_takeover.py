"""The hot standby's takeover rule (airflow_streaming.control.takeover) on real files: it takes over only a
run that crashed (a stale lease, the marker and the record still naming it), never beside a live holder,
a stop or another action, and of two standbys racing exactly one wins."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from airflow_streaming.control import contract, takeover
from airflow_streaming.control.contract import ControlPaths, DriverRecord, Lease
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.process import process_start_time

ACTIVE, STANDBY, OTHER = "20261126T000000Z-aaaaaaaa", "20261126T000001Z-bbbbbbbb", "20261126T000002Z-cccccccc"


def record(run_id: str) -> bytes:
    return DriverRecord(run_id=run_id, stream="s", version="v1", application="events_etl", host=socket.gethostname(),
                        command="spark-submit ...", log_path="/l", submitted_at=time.time(), checkpoint_location="/c",
                        target="local", handle={"pid": 1, "start_time": 1.0}).to_json()


@pytest.fixture(scope="module")
def dead_process() -> tuple[int, float]:
    """The pid and start time of a process that has exited (the crashed driver's lease holder)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    start = process_start_time(proc.pid)
    proc.kill()
    proc.wait()
    assert start is not None
    return proc.pid, start


@pytest.fixture
def stream(tmp_path, dead_process):
    """A stream whose active run crashed: marker, record and (stale) lease name ACTIVE; a standby's record."""
    storage, paths = LocalStorage(), ControlPaths(str(tmp_path / "s"))
    storage.makedirs(paths.root)
    contract.write_marker(storage, paths, ACTIVE, "v1")
    storage.write_atomic(paths.driver, record(ACTIVE))
    storage.write_atomic(paths.standby_driver, record(STANDBY))
    pid, start = dead_process
    now = time.time()
    storage.write_atomic(paths.lease, Lease(ACTIVE, pid, start, socket.gethostname(), now, now, 120).to_json())
    return storage, paths


def take(storage, paths, me=STANDBY, version="v1", own=None, watch=None):
    judged = takeover.judge_takeover(storage, paths, me, version, watch=watch)
    if judged.act != "take_over":
        return judged, None
    own = own if own is not None else storage.read_bytes(paths.standby_driver)
    return judged, takeover.take_over(storage, paths, judged, me, version, own, 120.0, 4242, 1.0, socket.gethostname())


def names(storage, paths) -> tuple[str | None, str | None, str | None]:
    """(marker, driver record, lease) run ids."""
    marker = contract.read_marker(storage, paths)
    raw = storage.read_bytes(paths.driver)
    lease = contract.read_lease(storage, paths)
    return (marker or {}).get("run_id"), json.loads(raw)["run_id"] if raw else None, lease.run_id if lease else None


def test_a_crashed_run_is_taken_over_lease_record_and_marker(stream):
    storage, paths = stream
    judged, lease = take(storage, paths)
    assert judged.run_id == ACTIVE and "crashed" in judged.reason
    assert lease is not None and lease.run_id == STANDBY
    assert names(storage, paths) == (STANDBY, STANDBY, STANDBY)
    assert contract.read_marker(storage, paths)["took_over_from"] == ACTIVE
    assert storage.read_bytes(paths.driver) == storage.read_bytes(paths.standby_driver)
    # Done once: the next look finds itself promoted.
    assert takeover.judge_takeover(storage, paths, STANDBY, "v1").act == "wait"


def test_a_live_holder_is_never_taken_over(stream):
    storage, paths = stream
    now = time.time()
    mine = Lease(ACTIVE, __import__("os").getpid(), process_start_time(__import__("os").getpid()),
                 socket.gethostname(), now, now, 120)
    storage.write_atomic(paths.lease, mine.to_json())
    judged, lease = take(storage, paths)
    assert judged.act == "wait" and "holds its lease" in judged.reason and lease is None
    assert names(storage, paths) == (ACTIVE, ACTIVE, ACTIVE)


def test_another_hosts_lease_is_taken_over_only_after_its_ttl_on_the_standbys_own_clock(stream):
    storage, paths = stream
    now = time.time()
    storage.write_atomic(paths.lease, Lease(ACTIVE, 1, 1.0, "another-host", now - 60, now - 60, 2).to_json())
    watch = takeover.LeaseWatch()
    assert take(storage, paths, watch=watch)[0].act == "wait"  # stale by renewed_at, but just seen: not yet
    judged, _ = take(storage, paths, watch=watch)
    assert judged.act == "wait" and "seen it unchanged" in judged.reason, judged
    time.sleep(2.1)  # the standby itself saw the same bytes for the lease's ttl
    assert take(storage, paths, watch=watch)[1] is not None
    assert names(storage, paths) == (STANDBY, STANDBY, STANDBY)


def test_a_forged_stale_lease_naming_the_live_run_is_not_a_crash(stream):
    """The second review's proof: a stale lease.json naming the live run (a dead pid on this host) made the
    standby take over while the active driver ran on. The standby's own proof: a process of that run is alive
    here (its command line carries the run id, the stream and the control directory), whatever lease.json says."""
    storage, paths = stream
    active = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--stream", "s",
                               "--control-dir", "/ctl/s", "--run-id", ACTIVE])
    try:
        time.sleep(0.2)
        for stream_name, control_dir in ((None, None), ("s", "/ctl/s")):
            judged = takeover.judge_takeover(storage, paths, STANDBY, "v1", stream=stream_name, control_dir=control_dir)
            assert judged.act == "wait" and f"pid {active.pid}" in judged.reason, judged
        # The same process for another stream's standby is not its run: the crash rule applies as before.
        other = takeover.judge_takeover(storage, paths, STANDBY, "v1", stream="t", control_dir="/ctl/t")
        assert other.act == "take_over"
        assert names(storage, paths) == (ACTIVE, ACTIVE, ACTIVE)
    finally:
        active.kill()
        active.wait()
    assert take(storage, paths)[1] is not None  # once it really is gone: a crash


def test_a_forged_lease_elsewhere_restarts_the_standbys_wait(stream):
    """A forged lease naming a holder on another host, stale by its renewed_at: the standby waits the lease's
    ttl from when IT saw those bytes - time for the live holder's next renewal to find bytes it did not write
    and stop itself."""
    storage, paths = stream
    now = time.time()
    watch = takeover.LeaseWatch()
    storage.write_atomic(paths.lease, Lease(ACTIVE, 1, 1.0, "another-host", now, now, 120).to_json())
    assert take(storage, paths, watch=watch)[0].act == "wait"  # fresh: held
    storage.write_atomic(paths.lease, Lease(ACTIVE, 1, 1.0, "another-host", now - 999, now - 999, 120).to_json())
    judged, lease = take(storage, paths, watch=watch)
    assert judged.act == "wait" and "seen it unchanged for 0s" in judged.reason and lease is None, judged
    assert names(storage, paths) == (ACTIVE, ACTIVE, ACTIVE)


@pytest.mark.parametrize("change,act,why", [
    ("stop", "exit", "stopped"),
    ("upgrade", "exit", "version"),
    ("restart", "wait", "does not name the marker's run"),
    ("no lease", "wait", "holds no lease"),
    ("lease of another run", "wait", "not the marker's run"),
    ("garbage lease", "wait", "not readable"),
    ("garbage marker", "wait", "not readable"),
    ("garbage record", "wait", "not readable"),
])
def test_a_stop_an_action_or_garbage_is_never_taken_over(stream, change, act, why):
    storage, paths = stream
    if change == "stop":
        contract.request_stop(storage, paths)
    elif change == "upgrade":
        contract.write_marker(storage, paths, OTHER, "v2")
    elif change == "restart":  # an action submitted another run: its record, not yet its marker
        storage.write_atomic(paths.driver, record(OTHER))
    elif change == "no lease":
        storage.delete(paths.lease)
    elif change == "lease of another run":
        lease = contract.read_lease(storage, paths)
        storage.write_atomic(paths.lease, Lease(OTHER, lease.pid, lease.pid_start_time, lease.host, lease.acquired_at,
                                                lease.renewed_at, lease.ttl).to_json())
    elif change == "garbage lease":
        storage.write_atomic(paths.lease, b"{not json")
    elif change == "garbage marker":
        storage.write_atomic(paths.marker, b"\x00\xff")
    else:
        storage.write_atomic(paths.driver, b"[]")
    before = {p: storage.read_bytes(p) for p in (paths.marker, paths.driver, paths.lease)}
    judged, lease = take(storage, paths)
    assert (judged.act, lease) == (act, None) and why in judged.reason, judged
    assert {p: storage.read_bytes(p) for p in before} == before  # nothing touched


@pytest.mark.parametrize("moved", ["marker removed (a stop)", "marker rewritten (an action)", "record rewritten",
                                   "lease taken"])
def test_files_that_move_between_the_judgement_and_the_takeover_win(stream, moved):
    storage, paths = stream
    judged = takeover.judge_takeover(storage, paths, STANDBY, "v1")
    assert judged.act == "take_over"
    if moved == "marker removed (a stop)":
        contract.request_stop(storage, paths)
    elif moved == "marker rewritten (an action)":
        contract.write_marker(storage, paths, OTHER, "v1")
    elif moved == "record rewritten":
        storage.write_atomic(paths.driver, record(OTHER))
    else:
        now = time.time()
        storage.write_atomic(paths.lease, Lease(OTHER, 1, 1.0, "h", now, now, 120).to_json())
    before = {p: storage.read_bytes(p) for p in (paths.marker, paths.driver, paths.lease)}
    lease = takeover.take_over(storage, paths, judged, STANDBY, "v1", record(STANDBY), 120.0, 4242, 1.0,
                               socket.gethostname())
    assert lease is None
    after = {p: storage.read_bytes(p) for p in before}
    if moved == "lease taken":
        assert after == before
    else:  # the lease it took is given back (the stale one was replaced: now free), record and marker theirs
        assert after[paths.marker] == before[paths.marker] and after[paths.driver] == before[paths.driver]
        assert after[paths.lease] is None


def test_of_two_standbys_racing_exactly_one_takes_over(stream):
    storage, paths = stream
    standbys = [STANDBY, OTHER]
    for me in standbys:
        assert takeover.judge_takeover(storage, paths, me, "v1").act == "take_over"
    judgements = {me: takeover.judge_takeover(storage, paths, me, "v1") for me in standbys}  # both judged first
    won: dict[str, object] = {}
    barrier = threading.Barrier(2)

    def race(me: str) -> None:
        barrier.wait()
        won[me] = takeover.take_over(storage, paths, judgements[me], me, "v1", record(me), 120.0, 4242, 1.0,
                                     socket.gethostname())

    threads = [threading.Thread(target=race, args=(me,)) for me in standbys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    winners = [me for me, lease in won.items() if lease is not None]
    assert len(winners) == 1, won
    assert names(storage, paths) == (winners[0],) * 3


@pytest.mark.parametrize("failing", ["driver.json", "RUNNING"])
def test_a_storage_error_mid_takeover_gives_everything_back(stream, failing, monkeypatch):
    """The record's or the marker's swap fails with a storage error after the lease was taken: the error
    reaches the caller (it looks again) and the stream is as before the takeover, minus the stale lease
    (before: the lease stayed with the live standby, and the stream waited for a person)."""
    from airflow_streaming.control.storage import StorageError

    storage, paths = stream
    judged = takeover.judge_takeover(storage, paths, STANDBY, "v1")
    before = {p: storage.read_bytes(p) for p in (paths.marker, paths.driver)}
    real = storage.compare_and_swap

    def failing_cas(path, expected, new):
        if path.endswith("/" + failing) and new is not None and STANDBY.encode() in new:
            raise StorageError(5, f"injected on {path}")
        return real(path, expected, new)

    monkeypatch.setattr(storage, "compare_and_swap", failing_cas)
    with pytest.raises(StorageError, match="injected"):
        takeover.take_over(storage, paths, judged, STANDBY, "v1", storage.read_bytes(paths.standby_driver), 120.0,
                           4242, 1.0, socket.gethostname())
    assert {p: storage.read_bytes(p) for p in before} == before
    assert storage.read_bytes(paths.lease) is None  # neither the standby's nor (judged stale) the crashed run's
