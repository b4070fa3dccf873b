"""Single faults on the control files, injected into the real code paths (no Spark needed here).

Storage errors are injected with the failpoints of ``airflow_streaming.faults`` (an EIO/ENOSPC raised
inside ``LocalStorage`` exactly where the real call is made) or made real (a path through a file is
ENOTDIR). Lock holders are real processes. Each test states the fault and the outcome it proves.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_streaming.sealing import sealed
from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlFileError, ControlPaths
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.storage import StorageError
from airflow_streaming.exceptions import StreamingError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.control.lifecycle_lock import LifecycleLock, LifecycleLockHeld
from airflow_streaming.lifecycle.operations import stop_stream
from airflow_streaming.lifecycle.record import Action, Step
from airflow_streaming.lifecycle.runner import LifecycleError, LifecycleOptions, LifecycleRunner
from airflow_streaming.spec import StreamSpec

from control_fixtures import deployed_stream, spec_under, tree_digest
import stream_actions


# --------------------------------------------------------------------------- the error rule


def test_only_a_confirmed_absence_is_absent(tmp_path, inject):
    storage = LocalStorage()
    paths = ControlPaths(str(tmp_path / "control" / "s1"))
    storage.write_atomic(paths.marker, b"{}")
    assert contract.marker_present(storage, paths) is True
    # EIO on the marker check: an error naming the file, never "the marker is gone" (a stop request).
    inject([{"point": "storage.exists", "match": "/RUNNING", "action": "error", "errno": "EIO"}])
    with pytest.raises(StorageError, match=r"cannot check .*/RUNNING: Input/output error.*storage is failing"):
        contract.marker_present(storage, paths)
    inject([{"point": "storage.read", "match": "status.json", "action": "error", "errno": "ESTALE"}])
    with pytest.raises(StorageError, match="status.json"):
        contract.read_status(storage, paths)
    inject([{"point": "storage.list", "match": "offsets", "action": "error", "errno": "EACCES"}])
    with pytest.raises(StorageError, match="check the permissions of .*offsets"):
        storage.list_dir(str(tmp_path / "ckpt" / "offsets"))
    inject([])
    storage.delete(paths.marker)
    assert contract.marker_present(storage, paths) is False  # confirmed absent
    # A real ENOTDIR (a configured path runs through a file): an error, not "empty" or "absent".
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StorageError, match="Not a directory"):
        storage.read_bytes(str(tmp_path / "afile" / "status.json"))
    # The message is readable: no "[Errno 0]".
    assert "[Errno" not in str(StorageError(0, "cannot read x"))


def test_unreadable_control_files_give_unknown_health_and_the_supervisor_does_not_act(tmp_path, inject):
    from airflow_streaming.supervision.policy import RestartPolicy
    from airflow_streaming.lifecycle.supervisor import supervise

    spec, hook = deployed_stream(tmp_path)
    record = contract.DriverRecord(run_id="20260101T000000Z-0000aaaa", stream="s1", version="v1",
                                   application="device_signals", host="h", command="c", log_path="l",
                                   submitted_at=1.0, checkpoint_location=spec.checkpoint_location,
                                   handle={"pid": 1, "start_time": 1.0})
    hook.storage.unguarded.write_atomic(hook.paths.driver, record.to_json())
    for point, match in (("storage.read", "status.json"), ("storage.read", "driver.json")):
        inject([{"point": point, "match": match, "action": "error", "errno": "EIO"}])
        verdict = hook.health()
        assert verdict.state.value == "UNKNOWN" and match in verdict.summary(), verdict.summary()
        events: list[dict] = []
        result = supervise(hook, RestartPolicy(), events.append)
        # Unknown is never acted on; it is reported (an unreadable file must not hide an outage).
        assert result.action in ("NOTHING", "NOTIFIED") and result.new_run_id is None, result
        assert not any(e["kind"] in ("RESTARTING", "GAVE_UP") for e in events)
    inject([])
    # Unreadable lease: whether the stream runs cannot be told - a deploy must refuse, not go ahead.
    inject([{"point": "storage.read", "match": "lease.json", "action": "error", "errno": "EIO"}])
    with pytest.raises(StreamingError, match="cannot tell whether stream 's1' runs: the lease cannot be read"):
        hook.running_driver()


# --------------------------------------------------------------------------- compare-and-swap


def test_compare_and_swap_has_exactly_one_winner(tmp_path):
    storage = LocalStorage()
    path = str(tmp_path / "lease.json")
    storage.write_atomic(path, b"v0")
    winners: list[int] = []
    barrier = threading.Barrier(8)

    def swap(i: int) -> None:
        barrier.wait()
        if storage.compare_and_swap(path, b"v0", f"v1-{i}".encode()):
            winners.append(i)

    threads = [threading.Thread(target=swap, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and storage.read_bytes(path) == f"v1-{winners[0]}".encode()
    assert not os.path.exists(path + ".cas")


def test_lease_renewal_is_a_compare_and_swap(tmp_path):
    storage = LocalStorage()
    paths = ControlPaths(str(tmp_path / "control" / "s1"))
    lease = contract.acquire_lease(storage, paths, "run-a", 120.0)
    renewed = contract.renew_lease(storage, paths, lease)
    assert renewed.renewed_at >= lease.renewed_at
    # Another writer replaced the lease with the same run id and pid (read-then-write would not notice).
    storage.write_atomic(paths.lease, contract.Lease(**{**renewed.__dict__, "renewed_at": 5.0}).to_json())
    with pytest.raises(contract.LeaseLostError):
        contract.renew_lease(storage, paths, renewed)


# --------------------------------------------------------------------------- the lock for the whole action


def test_the_lock_is_renewed_while_its_holder_waits(tmp_path):
    storage = LocalStorage()
    control = str(tmp_path / "control" / "s1")
    # A ttl of 4 s, and a holder that waits 6 s (a stop, the gate, a snapshot): never stale meanwhile. (The
    # keeper renews every ttl/4; with a ttl of 1.2 s a busy 2-core machine once delayed a renewal past it -
    # a scheduling hiccup of ~1 s, not what this test is about: real ttls are tens of seconds.)
    lock = LifecycleLock.acquire(storage, control, "upgrade", owner="long action", ttl=4.0)
    try:
        holder = {**lock.holder}
        deadline = time.monotonic() + 6.0
        while time.monotonic() < deadline:
            # As another host would judge it (pid checks do not apply there): renewed within its ttl.
            current = json.loads(storage.read_bytes(lock.path))
            assert time.time() - current["renewed_at"] < 4.0
            time.sleep(0.2)
        with pytest.raises(LifecycleLockHeld):
            LifecycleLock.acquire(storage, control, "supervise")
        assert json.loads(storage.read_bytes(lock.path))["acquired_at"] == holder["acquired_at"]
    finally:
        lock.release()
    assert not storage.exists(lock.path)


def test_an_action_whose_lock_was_taken_over_stops_before_its_next_side_effect(tmp_path):
    spec, hook = deployed_stream(tmp_path)
    hook.storage.unguarded.write_atomic(hook.paths.marker, b'{"run_id": "20260101T000000Z-0000aaaa"}')
    v2 = spec.with_version("v2", application="device_signals_v2")
    taken_over = {}

    def gate_during_which_the_lock_is_taken_over(candidate, allow_warnings, dry_run):
        # Meanwhile (e.g. this task hung past the lock's ttl) another holder took the lock over.
        path = f"{hook.paths.root}/lifecycle.lock"
        other = {"action": "supervise", "owner": "another worker", "pid": 1, "host": "other-host",
                 "acquired_at": time.time(), "renewed_at": time.time(), "ttl": 120.0}
        hook.storage.unguarded.write_atomic(path, json.dumps(other).encode())
        taken_over["bytes"] = hook.storage.read_bytes(path)
        return {"verdict": "COMPATIBLE", "findings": []}

    options = LifecycleOptions(check=gate_during_which_the_lock_is_taken_over, poll_s=0.1)
    with pytest.raises(LifecycleError, match="stopped before its next side effect: its lifecycle lock was taken over"):
        LifecycleRunner(v2, Action.UPGRADE, options).run()
    record = json.loads(hook.storage.read_bytes(f"{hook.paths.root}/lifecycle.json"))
    assert record["step"] == "PLANNED"  # CHECKED was never written, nothing was stopped
    assert hook.storage.exists(hook.paths.marker)
    # The new holder's lock is left alone.
    assert hook.storage.read_bytes(f"{hook.paths.root}/lifecycle.lock") == taken_over["bytes"]


# --------------------------------------------------------------------------- every entry point respects the lock


HOLDER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.lifecycle_lock import LifecycleLock
lock = LifecycleLock.acquire(LocalStorage(), sys.argv[2], "upgrade", owner="upgrade task (probation)")
print("held", flush=True)
time.sleep(120)
"""


def test_a_stop_during_an_upgrade_is_refused_never_half_applied(tmp_path):
    spec, hook = deployed_stream(tmp_path)
    hook.storage.unguarded.write_atomic(hook.paths.marker, b'{"run_id": "r-new"}')
    record = {"stream": "s1", "action": "upgrade", "step": "PROBATION", "id": "u1", "from_spec": spec.to_dict(),
              "to_spec": spec.with_version("v2", application="device_signals_v2").to_dict(),
              "steps": [{"step": "PLANNED", "at": 1.0, "detail": None}], "new_run_id": "r-new"}
    hook.storage.unguarded.write_atomic(f"{hook.paths.root}/lifecycle.json", json.dumps(record).encode())
    project = str(Path(__file__).resolve().parents[2])
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, project, hook.paths.root], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LifecycleLockHeld, match=r"held by upgrade \(owner upgrade task \(probation\)"):
            stop_stream(spec)
        with pytest.raises(LifecycleLockHeld):
            stream_actions.stop(hook)
    finally:
        holder.kill()
        holder.wait()
    # The upgrade's task died (its lock is stale now): a stop is still refused - the upgrade must finish.
    with pytest.raises(StreamingError, match=r"unfinished upgrade u1 \(to version v2\) at step PROBATION: refusing to stop.*Run that upgrade again"):
        stop_stream(spec)
    assert hook.storage.exists(hook.paths.marker), "the stop was never half-applied (the marker is still there)"
    assert json.loads(hook.storage.read_bytes(f"{hook.paths.root}/lifecycle.json"))["step"] == "PROBATION"


# --------------------------------------------------------------------------- the gate and the snapshot are never skipped


def test_an_upgrade_refuses_when_the_checkpoint_of_a_stream_that_ran_is_missing(tmp_path):
    spec, hook = deployed_stream(tmp_path, with_checkpoint=False)  # e.g. the volume is not mounted
    hook.storage.unguarded.write_atomic(hook.paths.marker, b"{}")
    called = []
    options = LifecycleOptions(check=lambda *a: called.append(a) or {"verdict": "COMPATIBLE", "findings": []})
    record = LifecycleRunner(spec.with_version("v2", application="device_signals_v2"), Action.UPGRADE, options).run()
    assert record.step == Step.REFUSED and not called
    assert spec.checkpoint_location in record.error and "does not exist" in record.error
    assert "status.json of run 20260101T000000Z-0000aaaa records committed batch 3" in record.error
    assert "mounted" in record.error and "Nothing was changed" in record.error
    assert hook.storage.exists(hook.paths.marker)
    # An empty checkpoint directory (a fresh mount point) is refused the same way.
    os.makedirs(spec.checkpoint_location)
    record = LifecycleRunner(spec.with_version("v2", application="device_signals_v2"), Action.UPGRADE, options).run()
    assert record.step == Step.REFUSED and "has no committed batch" in record.error and not called


def test_only_a_stream_that_never_ran_skips_the_gate_and_the_record_says_so(tmp_path):
    spec = spec_under(tmp_path, application=str(tmp_path / "missing_job.py"))
    called = []
    options = LifecycleOptions(check=lambda *a: called.append(a) or {"verdict": "COMPATIBLE", "findings": []})
    record = LifecycleRunner(spec.with_version("v2"), Action.UPGRADE, options).run()
    details = {s["step"]: s.get("detail") or "" for s in record.steps}
    assert not called and "never ran" in details["CHECKED"] and "never ran" in details["STARTING"]
    assert record.step == Step.FAILED and "does not exist" in record.error  # then the start failed: nothing ran


# --------------------------------------------------------------------------- unreadable files are never overwritten


@pytest.mark.parametrize("name", ["history.json", "lifecycle.json"])
def test_an_action_refuses_to_overwrite_an_unreadable_control_file(tmp_path, name):
    spec, hook = deployed_stream(tmp_path)
    path = f"{hook.paths.root}/{name}"
    hook.storage.unguarded.write_atomic(path, b'[{"id": "u0", "outcome": "SUCC')  # truncated by a crash or a full disk
    before = tree_digest(hook.paths.root)
    with pytest.raises(ControlFileError) as info:
        LifecycleRunner(spec.with_version("v2", application="device_signals_v2"), Action.UPGRADE).run()
    message = str(info.value)
    assert path in message and f"mv {path} {path}.bad" in message
    assert hook.storage.read_bytes(path) == b'[{"id": "u0", "outcome": "SUCC'
    assert tree_digest(hook.paths.root) == before


def test_the_supervisor_refuses_an_unreadable_ledger_and_keeps_it(tmp_path):
    from airflow_streaming.supervision.policy import RestartPolicy
    from airflow_streaming.lifecycle.supervisor import supervise

    spec, hook = deployed_stream(tmp_path)
    record = contract.DriverRecord(run_id="20260101T000000Z-0000aaaa", stream="s1", version="v1",
                                   application="device_signals", host="h", command="c", log_path="l",
                                   submitted_at=1.0, checkpoint_location=spec.checkpoint_location)
    hook.storage.unguarded.write_atomic(hook.paths.driver, record.to_json())
    ledger = f"{hook.paths.root}/supervisor.json"
    hook.storage.unguarded.write_atomic(ledger, b'{"gave_up": tr')
    with pytest.raises(ControlFileError, match=f"{ledger} is unreadable.*restart ledger.*mv {ledger}"):
        supervise(hook, RestartPolicy(), lambda e: None)
    assert hook.storage.read_bytes(ledger) == b'{"gave_up": tr'


def test_a_full_disk_while_saving_the_record_leaves_the_last_record_to_resume_from(tmp_path, inject):
    spec, hook = deployed_stream(tmp_path)
    hook.storage.unguarded.write_atomic(hook.paths.marker, b"{}")
    inject([{"point": "storage.write", "match": "lifecycle.json", "action": "error", "errno": "ENOSPC"}])
    with pytest.raises(StorageError, match="No space left on device.*free space"):
        LifecycleRunner(spec.with_version("v2", application="device_signals_v2"), Action.UPGRADE).run()
    assert not hook.storage.exists(f"{hook.paths.root}/lifecycle.json")
    assert hook.storage.exists(hook.paths.marker)  # nothing else was touched
    assert errno.ENOSPC == 28


# --------------------------------------------------------------------------- signal only what we started


def test_stop_kill_and_supervisor_never_signal_a_process_that_is_not_the_recorded_driver(tmp_path):
    """driver.json names a pid that now belongs to an unrelated live process group (after a reboot or a
    pid wrap): with its real start time even. Stop, kill and the supervisor leave it alive and say why."""
    from airflow_streaming.supervision.policy import RestartPolicy
    from airflow_streaming.lifecycle.supervisor import supervise

    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        spec, hook = deployed_stream(tmp_path)
        spec = StreamSpec.from_dict({**spec.to_dict(), "application": str(tmp_path / "gone_job.py")})
        hook = SparkStreamHook(spec)
        hook.storage.unguarded.write_atomic(hook.deployed_path, json.dumps({"run_id": "r-old", "at": 1.0,
                                                                  "spec": sealed(spec.to_dict())}).encode())
        record = contract.DriverRecord(
            run_id="20260101T000000Z-0000aaaa", stream="s1", version="v1", application=spec.application,
            host=os.uname().nodename, command="spark-submit ...", log_path=str(tmp_path / "l.log"), submitted_at=1.0,
            checkpoint_location=spec.checkpoint_location,
            handle={"pid": victim.pid, "start_time": contract.process_start_time(victim.pid)})
        hook.storage.unguarded.write_atomic(hook.paths.driver, record.to_json())
        hook.storage.unguarded.write_atomic(hook.paths.marker, b'{"run_id": "20260101T000000Z-0000aaaa"}')
        doc = hook.status()
        doc.state, doc.exit, doc.heartbeat_at = contract.RUNNING, None, time.time() - 600  # it died, long ago
        contract.write_status(hook.storage.unguarded, hook.paths, doc)

        state = hook.target_of(record).state(record)
        assert state.gone and f"pid {victim.pid} runs 'sleep 300'" in state.detail, state.detail
        report = stop_stream(spec)
        assert report["was_running"] is False and victim.poll() is None
        outcome = stream_actions.kill(hook, record, grace=1)
        assert "nothing was signalled" in outcome and "does not carry '20260101T000000Z-0000aaaa'" in outcome
        assert victim.poll() is None
        verdict = hook.health()
        assert verdict.state.value == "FAILED" and f"pid {victim.pid} runs 'sleep 300'" in verdict.summary()
        result = supervise(hook, RestartPolicy(), lambda e: None)
        assert result.action == "NOTHING" and result.reason == "stopped by the user", result  # the stop above
        assert victim.poll() is None, "the supervisor signalled an unrelated process"
        os.rename(f"{hook.paths.root}/lifecycle.json", f"{hook.paths.root}/lifecycle.json.aside")  # wanted running
        result = supervise(hook, RestartPolicy(), lambda e: None)
        assert result.action in ("RESTART_FAILED", "GAVE_UP"), result  # its application is gone: nothing runs
        assert os.getpgid(victim.pid) == victim.pid
    finally:
        victim.kill()
        victim.wait()


def test_a_failpoint_follows_the_environment_as_it_changes(tmp_path, monkeypatch):
    """``faults.hit`` tells an absent ``AIRFLOW_STREAMING_FAULTS`` by a look into the dict behind ``os.environ``
    (not ``os.environ.get``): a variable set, changed or removed while the process runs - through
    ``os.environ`` or ``monkeypatch`` - is what the next hit sees."""
    from airflow_streaming import faults

    rules = tmp_path / "faults.json"
    rules.write_text(json.dumps([{"point": "p.x", "action": "error", "errno": "ENOSPC"}]))
    monkeypatch.delenv(faults.ENV, raising=False)
    faults.hit("p.x")  # absent: nothing
    monkeypatch.setenv(faults.ENV, str(rules))
    with pytest.raises(OSError) as raised:
        faults.hit("p.x")
    assert raised.value.errno == errno.ENOSPC
    os.environ[faults.ENV] = ""  # set but empty: inactive
    faults.hit("p.x")
    os.environ[faults.ENV] = str(rules)
    with pytest.raises(OSError):
        faults.hit("p.x")
    del os.environ[faults.ENV]
    faults.hit("p.x")
    monkeypatch.setenv(faults.ENV, str(tmp_path / "absent.json"))  # a file that is not there: no faults
    faults.hit("p.x")
