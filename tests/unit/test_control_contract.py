"""Unit tests of the control storage and the control-location contract.

Everything runs on real files under ``tmp_path`` and real processes; nothing is mocked.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace

import pytest

from airflow_streaming.control import contract
from airflow_streaming.control.contract import (
    EXIT_GRACEFUL,
    EXIT_JVM_GONE,
    EXIT_LEASE_HELD,
    EXIT_QUERY_FAILED,
    EXIT_REASONS,
    EXIT_STARTUP_FAILED,
    SCHEMA_VERSION,
    ControlFileError,
    ControlPaths,
    DriverRecord,
    Lease,
    LeaseHeldError,
    QueryStatus,
    StatusDocument,
    acquire_lease,
    marker_present,
    new_run_id,
    process_alive,
    process_start_time,
    read_driver_record,
    read_lease,
    read_status,
    release_lease,
    renew_lease,
    request_stop,
    write_marker,
    write_status,
)
from airflow_streaming.control.storage import StorageError, local_path
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.locations import storage_for

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOST = socket.gethostname()
OTHER_HOST = HOST + "-not-this-one"


@pytest.fixture
def storage() -> LocalStorage:
    return LocalStorage()


@pytest.fixture
def paths(tmp_path) -> ControlPaths:
    return ControlPaths(str(tmp_path / "control" / "stream-a"))


def _dead_pid() -> int:
    """The pid of a process that ran and was reaped (so it no longer exists)."""
    proc = subprocess.Popen(["true"])
    assert proc.wait() == 0
    return proc.pid


def _proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()[0]


def _hidden_entries(directory: str) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(".") or n.endswith(".tmp")]


# =========================================================================== storage


class TestLocalStorage:
    def test_write_atomic_replaces_content_and_leaves_no_temp_files(self, storage, tmp_path):
        path = str(tmp_path / "sub" / "dir" / "status.json")  # parent dirs are created
        storage.write_atomic(path, b"first")
        assert storage.read_bytes(path) == b"first"
        storage.write_atomic(path, b"second, longer content")
        assert storage.read_bytes(path) == b"second, longer content"
        storage.write_atomic(path, b"")
        assert storage.read_bytes(path) == b""
        assert storage.list_dir(str(tmp_path / "sub" / "dir")) == ["status.json"]

    def test_write_atomic_failure_keeps_old_content_and_removes_temp_file(self, storage, tmp_path):
        path = str(tmp_path / "f")
        storage.write_atomic(path, b"old")
        with pytest.raises(TypeError):
            storage.write_atomic(path, "not bytes")  # type: ignore[arg-type]
        assert storage.read_bytes(path) == b"old"
        assert os.listdir(tmp_path) == ["f"]

    def test_concurrent_reader_never_sees_partial_content(self, storage, tmp_path):
        path = str(tmp_path / "big")
        first = b"A" * (1 << 20)
        second = (b"0123456789abcdef" * (1 << 16))[: (1 << 20) - 7]  # distinct content and size
        storage.write_atomic(path, first)
        errors: list[BaseException] = []

        def writer() -> None:
            try:
                for i in range(200):
                    storage.write_atomic(path, second if i % 2 == 0 else first)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        thread = threading.Thread(target=writer)
        thread.start()
        reads = 0
        seen: set[bytes] = set()
        bad: list[int] = []
        try:
            while reads < 500 or thread.is_alive():
                data = storage.read_bytes(path)
                reads += 1
                if data == first:
                    seen.add(b"first")
                elif data == second:
                    seen.add(b"second")
                else:
                    bad.append(len(data) if data is not None else -1)
        finally:
            thread.join()
        assert not errors
        assert not bad, f"reader saw {len(bad)} partial/missing files (sizes {bad[:5]})"
        assert reads >= 500
        assert seen == {b"first", b"second"}, "reads did not overlap the rewrites"
        assert _hidden_entries(str(tmp_path)) == []

    def test_create_exclusive_first_wins_second_keeps_content(self, storage, tmp_path):
        path = str(tmp_path / "new" / "lease.json")
        assert storage.create_exclusive(path, b"mine") is True
        assert storage.create_exclusive(path, b"theirs") is False
        assert storage.read_bytes(path) == b"mine"
        assert os.listdir(tmp_path / "new") == ["lease.json"]

    def test_create_exclusive_race_has_exactly_one_winner(self, storage, tmp_path):
        path = str(tmp_path / "lease.json")
        barrier = threading.Barrier(8)
        results: dict[int, bool] = {}

        def racer(i: int) -> None:
            barrier.wait()
            results[i] = storage.create_exclusive(path, f"racer-{i}".encode())

        threads = [threading.Thread(target=racer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [i for i, won in results.items() if won]
        assert len(results) == 8
        assert len(winners) == 1
        assert storage.read_bytes(path) == f"racer-{winners[0]}".encode()
        assert os.listdir(tmp_path) == ["lease.json"]

    def test_missing_paths(self, storage, tmp_path):
        missing = str(tmp_path / "nope")
        assert storage.read_bytes(missing) is None
        assert storage.read_text(missing) is None
        assert storage.exists(missing) is False
        assert storage.delete(missing) is False
        assert storage.list_dir(missing) == []
        assert storage.list_dir(str(tmp_path / "nope" / "deeper")) == []

    def test_delete_exists_list_dir_read_text(self, storage, tmp_path):
        storage.write_atomic(str(tmp_path / "b"), "h\u00e9llo".encode())
        storage.write_atomic(str(tmp_path / "a"), b"x")
        storage.makedirs(str(tmp_path / "c" / "d"))
        storage.makedirs(str(tmp_path / "c" / "d"))  # idempotent
        assert storage.list_dir(str(tmp_path)) == ["a", "b", "c"]
        assert storage.exists(str(tmp_path / "c" / "d")) is True  # directories count
        assert storage.read_text(str(tmp_path / "b")) == "h\u00e9llo"
        assert storage.list_dir(str(tmp_path / "a")) == []  # a file has no entries
        with pytest.raises(StorageError, match="Not a directory"):  # but a path through a file is an error
            storage.list_dir(str(tmp_path / "a" / "sub"))
        assert storage.delete(str(tmp_path / "a")) is True
        assert storage.exists(str(tmp_path / "a")) is False
        assert storage.delete(str(tmp_path / "a")) is False
        assert storage.list_dir(str(tmp_path)) == ["b", "c"]

    def test_read_error_is_storage_error_naming_the_path(self, storage, tmp_path):
        with pytest.raises(StorageError, match=re.escape(str(tmp_path))) as info:
            storage.read_bytes(str(tmp_path))  # a directory
        assert isinstance(info.value, OSError)
        assert info.value.errno is not None and info.value.errno != 0


class TestLocations:
    @pytest.mark.parametrize(
        "location, expected",
        [
            ("file:///x", "/x"),
            ("file:///data/control/dir", "/data/control/dir"),
            ("file://localhost/data/ctl", "/data/ctl"),
            ("/abs/path", "/abs/path"),
        ],
    )
    def test_local_locations(self, location, expected):
        assert local_path(location) == expected
        backend, path = storage_for(location)
        assert isinstance(backend, LocalStorage)
        assert path == expected

    @pytest.mark.parametrize("location", ["hdfs://namenode:8020/data/ctl", "s3://bucket/x"])
    def test_other_schemes_are_rejected_naming_the_location(self, location, monkeypatch):
        monkeypatch.delenv("AIRFLOW_CONN_WEBHDFS_DEFAULT", raising=False)  # hdfs:// needs that connection
        with pytest.raises(StorageError, match=re.escape(location)):
            storage_for(location)

    def test_a_webhdfs_uri_is_a_webhdfs_storage_of_its_namenode(self):
        from airflow_streaming.control.webhdfs import WebHdfsStorage

        backend, path = storage_for("webhdfs://nn:9870/x/y")
        assert isinstance(backend, WebHdfsStorage) and path == "/x/y"
        assert backend.settings.urls == ["http://nn:9870"]

    def test_storage_for_file_uri_reaches_the_same_files(self, tmp_path):
        backend, path = storage_for("file://" + str(tmp_path))
        backend.write_atomic(path + "/x", b"1")
        assert (tmp_path / "x").read_bytes() == b"1"


# =========================================================================== small contract pieces


def test_control_paths_layout():
    p = ControlPaths("/ctl/stream")
    assert p.marker == "/ctl/stream/RUNNING"
    assert p.status == "/ctl/stream/status.json"
    assert p.lease == "/ctl/stream/lease.json"
    assert p.driver == "/ctl/stream/driver.json"
    assert p.log("R1") == "/ctl/stream/logs/R1.log"


def test_new_run_id_format_unique_and_sortable():
    ids = [new_run_id() for _ in range(200)]
    assert all(re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{8}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    # The prefix is the current UTC time, so ids sort by submission time.
    assert abs(calendar.timegm(time.strptime(ids[0][:16], "%Y%m%dT%H%M%SZ")) - time.time()) < 5
    assert [i[:16] for i in ids] == sorted(i[:16] for i in ids)


def test_exit_codes_are_distinct_and_described():
    codes = [EXIT_GRACEFUL, EXIT_QUERY_FAILED, EXIT_STARTUP_FAILED, EXIT_LEASE_HELD, EXIT_JVM_GONE]
    assert EXIT_GRACEFUL == 0
    assert len(set(codes)) == 5
    assert set(EXIT_REASONS) == set(codes)
    assert all(isinstance(EXIT_REASONS[c], str) and EXIT_REASONS[c] for c in codes)


def test_run_marker_write_present_and_stop(storage, paths):
    assert marker_present(storage, paths) is False
    assert request_stop(storage, paths) is False
    write_marker(storage, paths, "run-1", "v3")
    assert marker_present(storage, paths) is True
    content = json.loads(storage.read_text(paths.marker))
    assert content["run_id"] == "run-1"
    assert content["version"] == "v3"
    assert abs(content["created_at"] - time.time()) < 60
    assert request_stop(storage, paths) is True
    assert marker_present(storage, paths) is False
    assert request_stop(storage, paths) is False



# =========================================================================== reading a control file's JSON

GARBAGE = [b"", b"{oops", b"\xff\xfe{}", b"\xef\xbb\xbf{}", "{oops"]
NOT_OBJECTS = [b"[1, 2]", b"null", b'"RUNNING"', b"42", "[]"]


@pytest.mark.parametrize("data", [b'{"run_id": "r1", "n": [1]}', '{"run_id": "r1", "n": [1]}'])
def test_a_json_object_reads_the_same_both_ways(data):
    assert contract.parse_json_object("/c/s1/x.json", data) == {"run_id": "r1", "n": [1]}
    assert contract.json_object_or_none(data) == {"run_id": "r1", "n": [1]}
    assert contract.parse_json("/c/s1/x.json", data) == {"run_id": "r1", "n": [1]}


@pytest.mark.parametrize("data", GARBAGE + NOT_OBJECTS)
def test_garbage_is_a_named_error_or_absent(data):
    with pytest.raises(ControlFileError, match=re.escape("/c/s1/x.json: ")):
        contract.parse_json_object("/c/s1/x.json", data)
    assert contract.json_object_or_none(data) is None


def test_no_file_is_absent():
    assert contract.json_object_or_none(None) is None


@pytest.mark.parametrize("data, why", [(b"{oops", "not valid JSON (Expecting property name"),
                                       (b"[1]", "expected a JSON object, got list")])
def test_the_error_says_why_and_with_advice_what_to_do(data, why):
    with pytest.raises(ControlFileError) as plain:
        contract.parse_json_object("/c/s1/x.json", data)
    assert str(plain.value).startswith(f"/c/s1/x.json: {why}")
    with pytest.raises(ControlFileError) as advised:
        contract.parse_json_object("/c/s1/x.json", data, "it is X: move it aside")
    assert str(advised.value).startswith(f"/c/s1/x.json is unreadable ({why}")
    assert str(advised.value).endswith("); it is X: move it aside")


def test_parse_json_reads_any_value_and_names_the_file_on_garbage():
    assert contract.parse_json("/c/s1/history.json", b"[{}]") == [{}]
    with pytest.raises(ControlFileError, match=re.escape("/c/s1/history.json is unreadable (not valid JSON")):
        contract.parse_json("/c/s1/history.json", b"[{", "repair it")


@pytest.mark.parametrize("data", GARBAGE + NOT_OBJECTS)
def test_an_unreadable_run_marker_reads_as_none(storage, paths, data):
    storage.write_atomic(paths.marker, data.encode() if isinstance(data, str) else data)
    assert contract.read_marker(storage, paths) is None

# =========================================================================== process identity


def _seconds_since_boot() -> float:
    with open("/proc/uptime") as fh:
        return float(fh.read().split()[0])


class TestProcessIdentity:
    def test_own_process_is_alive(self):
        pid = os.getpid()
        start = process_start_time(pid)
        assert start is not None
        assert start <= time.time()
        assert process_alive(pid) is True
        assert process_alive(pid, start) is True
        assert process_alive(pid, start, HOST) is True

    def test_wrong_start_time_means_recycled_pid(self):
        pid = os.getpid()
        start = process_start_time(pid)
        assert process_alive(pid, start - 100) is False
        assert process_alive(pid, start + 100) is False
        assert process_alive(pid, start - 100, HOST) is False

    def test_start_time_of_a_new_child_is_now(self):
        before = _seconds_since_boot()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
        try:
            start = process_start_time(child.pid)
            assert start is not None
            assert abs(start - before) < 2.0
            assert process_alive(child.pid, start) is True
        finally:
            child.kill()
            child.wait()

    def test_finished_process_is_not_alive(self):
        pid = _dead_pid()
        assert process_start_time(pid) is None
        assert process_alive(pid) is False
        assert process_alive(pid, time.time()) is False

    def test_zombie_is_not_alive(self):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert process_alive(child.pid) is True
            os.kill(child.pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while _proc_state(child.pid) != "Z" and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _proc_state(child.pid) == "Z"  # killed, not yet reaped
            assert process_start_time(child.pid) is None
            assert process_alive(child.pid) is False
        finally:
            child.kill()
            child.wait()

    def test_no_pid_is_not_alive(self):
        assert process_alive(None) is False
        assert process_alive(0) is False
        assert process_alive(None, None, HOST) is False

    def test_other_host_counts_as_alive(self):
        assert process_alive(_dead_pid(), None, OTHER_HOST) is True
        assert process_alive(None, None, OTHER_HOST) is True


# =========================================================================== lease


def _hand_lease(run_id="other-run", pid=None, start=None, host=HOST, renewed_ago=0.0, ttl=30.0) -> Lease:
    now = time.time()
    return Lease(
        run_id=run_id,
        pid=pid if pid is not None else os.getpid(),
        pid_start_time=start,
        host=host,
        acquired_at=now - renewed_ago - 5,
        renewed_at=now - renewed_ago,
        ttl=ttl,
    )


class TestLease:
    def test_acquire_creates_lease_for_this_process(self, storage, paths):
        before = time.time()
        lease = acquire_lease(storage, paths, "run-1", 30.0)
        assert lease.run_id == "run-1"
        assert lease.pid == os.getpid()
        assert lease.pid_start_time == process_start_time(os.getpid())
        assert lease.host == HOST
        assert lease.ttl == 30.0
        assert before <= lease.acquired_at == lease.renewed_at <= time.time()
        assert storage.exists(paths.lease)
        assert read_lease(storage, paths) == lease
        assert lease.is_stale() is False
        assert json.loads(storage.read_text(paths.lease))["pid"] == os.getpid()
        assert _hidden_entries(paths.root) == []

    def test_second_acquire_while_held_raises_naming_holder(self, storage, paths):
        first = acquire_lease(storage, paths, "run-1", 30.0)
        with pytest.raises(LeaseHeldError) as info:
            acquire_lease(storage, paths, "run-2", 30.0)
        message = str(info.value)
        assert str(os.getpid()) in message
        assert "run-1" in message
        assert HOST in message
        assert info.value.lease == first
        assert read_lease(storage, paths) == first  # untouched

    def test_dead_pid_on_this_host_is_stale_and_taken_over(self, storage, paths):
        dead = _hand_lease(run_id="crashed", pid=_dead_pid(), start=time.time() - 60)
        storage.write_atomic(paths.lease, dead.to_json())
        assert dead.is_stale() is True
        lease = acquire_lease(storage, paths, "run-2", 30.0)
        assert lease.run_id == "run-2"
        assert read_lease(storage, paths) == lease
        assert read_lease(storage, paths).pid == os.getpid()

    def test_recycled_pid_is_stale(self, storage, paths):
        # Our own (live) pid, but a start time of some earlier process that had the same pid.
        recycled = _hand_lease(run_id="old", pid=os.getpid(), start=process_start_time(os.getpid()) - 500)
        assert recycled.is_stale() is True
        storage.write_atomic(paths.lease, recycled.to_json())
        assert acquire_lease(storage, paths, "run-2", 30.0).run_id == "run-2"

    def test_same_host_live_pid_is_held_however_old_the_renewal(self, storage, paths):
        old = _hand_lease(run_id="slow", start=process_start_time(os.getpid()), renewed_ago=10_000, ttl=1)
        assert old.is_stale() is False
        storage.write_atomic(paths.lease, old.to_json())
        with pytest.raises(LeaseHeldError):
            acquire_lease(storage, paths, "run-2", 30.0)

    def test_other_host_not_renewed_for_ttl_is_stale_and_taken_over(self, storage, paths):
        old = _hand_lease(run_id="remote", pid=1, host=OTHER_HOST, renewed_ago=1000, ttl=30)
        assert old.is_stale() is True
        storage.write_atomic(paths.lease, old.to_json())
        lease = acquire_lease(storage, paths, "run-2", 30.0)
        assert read_lease(storage, paths) == lease
        assert lease.host == HOST

    def test_other_host_renewed_now_is_held(self, storage, paths):
        fresh = _hand_lease(run_id="remote", pid=4242, host=OTHER_HOST, renewed_ago=0, ttl=30)
        assert fresh.is_stale() is False
        storage.write_atomic(paths.lease, fresh.to_json())
        with pytest.raises(LeaseHeldError) as info:
            acquire_lease(storage, paths, "run-2", 30.0)
        assert "4242" in str(info.value) and OTHER_HOST in str(info.value) and "remote" in str(info.value)
        assert read_lease(storage, paths) == fresh

    def test_other_host_staleness_uses_ttl_against_now(self):
        lease = Lease("r", 1, None, OTHER_HOST, 1000.0, 1000.0, 30.0)
        assert lease.is_stale(now=1029.0) is False
        assert lease.is_stale(now=1031.0) is True

    @pytest.mark.parametrize(
        "garbage",
        [b"\x00\xffnot json", b'{"run_id": "x", "pid": 1', b"[1, 2]", b'{"run_id": "x"}', b""],
        ids=["binary", "truncated", "list", "missing-fields", "empty"],
    )
    def test_unreadable_lease_is_taken_over(self, storage, paths, garbage):
        storage.write_atomic(paths.lease, garbage)
        with pytest.raises(ControlFileError, match=re.escape(paths.lease)):
            read_lease(storage, paths)
        lease = acquire_lease(storage, paths, "run-2", 30.0)
        assert read_lease(storage, paths) == lease

    def test_read_lease_missing_is_none_and_round_trip(self, storage, paths):
        assert read_lease(storage, paths) is None
        lease = _hand_lease(start=123.5)
        assert Lease.from_json("x", lease.to_json()) == lease

    def test_lease_missing_field_names_field(self):
        raw = asdict(_hand_lease())
        del raw["renewed_at"]
        with pytest.raises(ControlFileError, match="renewed_at") as info:
            Lease.from_json("/ctl/lease.json", json.dumps(raw).encode())
        assert "/ctl/lease.json" in str(info.value)

    def test_release_deletes_own_lease(self, storage, paths):
        lease = acquire_lease(storage, paths, "run-1", 30.0)
        release_lease(storage, paths, lease)
        assert not storage.exists(paths.lease)
        release_lease(storage, paths, lease)  # already gone: no error
        assert acquire_lease(storage, paths, "run-2", 30.0).run_id == "run-2"

    def test_release_keeps_someone_elses_lease(self, storage, paths):
        ours = _hand_lease(run_id="ours")
        theirs = _hand_lease(run_id="theirs", pid=4242, host=OTHER_HOST)
        storage.write_atomic(paths.lease, theirs.to_json())
        release_lease(storage, paths, ours)
        assert read_lease(storage, paths) == theirs
        # Same run id but another pid is not ours either.
        same_run_other_pid = replace(theirs, run_id="ours")
        storage.write_atomic(paths.lease, same_run_other_pid.to_json())
        release_lease(storage, paths, ours)
        assert read_lease(storage, paths) == same_run_other_pid

    def test_release_after_takeover_keeps_new_holders_lease(self, storage, paths):
        old = _hand_lease(run_id="crashed", pid=_dead_pid(), start=time.time() - 60)
        storage.write_atomic(paths.lease, old.to_json())
        new = acquire_lease(storage, paths, "run-2", 30.0)
        release_lease(storage, paths, old)
        assert read_lease(storage, paths) == new

    def test_release_leaves_unreadable_lease_alone(self, storage, paths):
        storage.write_atomic(paths.lease, b"garbage")
        release_lease(storage, paths, _hand_lease())
        assert storage.read_bytes(paths.lease) == b"garbage"

    def test_renew_updates_renewed_at_only(self, storage, paths):
        lease = acquire_lease(storage, paths, "run-1", 30.0)
        aged = replace(lease, renewed_at=lease.renewed_at - 100)
        storage.write_atomic(paths.lease, aged.to_json())
        renewed = renew_lease(storage, paths, aged)
        assert renewed.renewed_at > aged.renewed_at
        assert renewed.renewed_at >= lease.renewed_at
        assert replace(renewed, renewed_at=aged.renewed_at) == aged
        assert read_lease(storage, paths) == renewed
        assert _hidden_entries(paths.root) == []

    def test_two_takers_of_a_stale_lease_cannot_both_win(self, storage, paths):
        stale = _hand_lease(run_id="crashed", pid=_dead_pid(), start=time.time() - 60)
        storage.write_atomic(paths.lease, stale.to_json())
        first_taker: list[Lease] = []

        class SlowTaker(LocalStorage):
            """Real local storage where another taker runs its full acquire right after this one
            judged the lease stale and before it takes the takeover lock: the interleaving of two
            drivers that start at the same time and both read the same stale lease."""

            def create_exclusive(self, path: str, data: bytes) -> bool:
                if path.endswith(".cas") and not first_taker:
                    first_taker.append(acquire_lease(LocalStorage(), paths, "taker-A", 30.0))
                return super().create_exclusive(path, data)

        assert read_lease(storage, paths) == stale
        try:
            second = acquire_lease(SlowTaker(), paths, "taker-B", 30.0)
        except LeaseHeldError:
            second = None
        assert first_taker and first_taker[0].run_id == "taker-A"
        assert read_lease(storage, paths).run_id == "taker-A"
        assert second is None, (
            f"both takers got the lease: {first_taker[0].run_id} (lease file now says "
            f"{read_lease(storage, paths).run_id}) and {second.run_id}"
        )
        assert not storage.exists(paths.lease + ".cas")


_CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from airflow_streaming.control.contract import ControlPaths, acquire_lease
from airflow_streaming.control.local import LocalStorage
lease = acquire_lease(LocalStorage(), ControlPaths(sys.argv[2]), "child-run", 30.0)
print(lease.pid, flush=True)
time.sleep(60)
"""


def test_lease_held_by_live_child_process_then_taken_over_after_it_dies(storage, paths):
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, PROJECT_ROOT, paths.root],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline()
        assert line.strip() == str(child.pid), child.stderr.read() if child.poll() is not None else line
        held = read_lease(storage, paths)
        assert held.pid == child.pid
        assert held.run_id == "child-run"
        assert held.pid_start_time == process_start_time(child.pid)
        with pytest.raises(LeaseHeldError) as info:
            acquire_lease(storage, paths, "parent-run", 30.0)
        assert str(child.pid) in str(info.value) and "child-run" in str(info.value)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        child.stderr.close()
    lease = acquire_lease(storage, paths, "parent-run", 30.0)
    assert lease.pid == os.getpid()
    assert read_lease(storage, paths) == lease


# =========================================================================== driver record


def _record(**overrides) -> DriverRecord:
    values = dict(
        run_id="20240101T000000Z-abcdef12",
        stream="orders",
        version="v1",
        application="/jobs/orders.py",
        handle={"pid": os.getpid(), "start_time": process_start_time(os.getpid())},
        host=HOST,
        command="spark-submit --conf spark.secret=*** /jobs/orders.py",
        log_path="/ctl/orders/logs/20240101T000000Z-abcdef12.log",
        submitted_at=1_700_000_000.25,
        checkpoint_location="file:///ckpt/orders",
    )
    values.update(overrides)
    return DriverRecord(**values)


class TestDriverRecord:
    def test_round_trip_through_storage(self, storage, paths):
        assert read_driver_record(storage, paths) is None
        record = _record()
        storage.write_atomic(paths.driver, record.to_json())
        assert read_driver_record(storage, paths) == record
        assert DriverRecord.from_json("x", record.to_json()) == record

    def test_missing_field_names_the_field_and_file(self, storage, paths):
        raw = asdict(_record())
        del raw["checkpoint_location"]
        storage.write_atomic(paths.driver, json.dumps(raw).encode())
        with pytest.raises(ControlFileError, match="checkpoint_location") as info:
            read_driver_record(storage, paths)
        assert paths.driver in str(info.value)

    def test_garbage_names_the_file(self, storage, paths):
        storage.write_atomic(paths.driver, b"{nope")
        with pytest.raises(ControlFileError, match=re.escape(paths.driver)):
            read_driver_record(storage, paths)

    def test_local_identity_needs_pid_start_time_and_run_id(self):
        me = {"pid": os.getpid(), "start_time": process_start_time(os.getpid())}
        # This test process does not carry --run-id <run id>: it is not the recorded driver.
        ok, why = _record(handle=me).local_identity().check()
        assert not ok and "does not carry" in why
        assert not _record(handle={**me, "pid": _dead_pid()}).local_identity().alive()
        assert not _record(handle={**me, "start_time": time.time() - 10_000}).local_identity().alive()
        assert not _record(handle={**me, "start_time": None}).local_identity().alive()  # cannot be told apart
        assert _record(handle={}).local_identity() is None

    def test_a_record_written_by_0_1_is_read_as_a_local_target(self, storage, paths):
        old = {k: v for k, v in asdict(_record()).items() if k not in ("target", "handle")}
        old.update(submit_pid=123, submit_pid_start_time=45.5)
        storage.write_atomic(paths.driver, json.dumps(old).encode())
        record = read_driver_record(storage, paths)
        assert (record.target, record.submit_pid, record.submit_pid_start_time) == ("local", 123, 45.5)


# =========================================================================== status document


def _status(**overrides) -> StatusDocument:
    values = dict(
        stream="orders",
        version="v1",
        run_id="run-1",
        state=contract.RUNNING,
        pid=1234,
        host=HOST,
        started_at=1_700_000_000.5,
        heartbeat_at=1_700_000_010.5,
        app_id="local-1700000000",
        spark_ui="http://127.0.0.1:4040",
        master="local[2]",
        checkpoint_location="/ckpt/orders",
        ready=True,
        queries=[
            QueryStatus(
                id="q-1",
                run_id="qr-1",
                name="orders_sink",
                active=True,
                status={"message": "Waiting for data to arrive", "isDataAvailable": False, "isTriggerActive": False},
                recent_progress=[{"batchId": 6, "numInputRows": 10}, {"batchId": 7, "numInputRows": 0}],
                last_batch_id=7,
            ),
            QueryStatus(id="q-2", run_id="qr-2", name=None, active=False),
        ],
        totals={"batches": 8, "input_rows": 10, "quarantined_rows": 1},
        last_exception={"message": "boom", "error_class": "RuntimeError"},
        exit=None,
    )
    values.update(overrides)
    return StatusDocument(**values)


class TestStatusDocument:
    def test_round_trip_with_queries(self, storage, paths):
        doc = _status()
        data = doc.to_json()
        raw = json.loads(data)
        assert raw["schema"] == SCHEMA_VERSION
        assert [q["id"] for q in raw["queries"]] == ["q-1", "q-2"]
        back = StatusDocument.from_json("status.json", data)
        assert back == doc
        assert all(isinstance(q, QueryStatus) for q in back.queries)
        assert back.queries[0].recent_progress[1]["batchId"] == 7

    def test_write_and_read_status(self, storage, paths):
        assert read_status(storage, paths) is None
        doc = _status()
        write_status(storage, paths, doc)
        assert read_status(storage, paths) == doc
        doc2 = _status(state=contract.STOPPED, exit={"code": 0, "reason": "graceful stop", "last_committed_batch": 7})
        write_status(storage, paths, doc2)
        assert read_status(storage, paths) == doc2
        assert _hidden_entries(paths.root) == []

    def test_defaults_round_trip_and_are_not_shared(self):
        a = StatusDocument("s", "v", "r", contract.STARTING, 1, HOST, 1.0, 1.0)
        b = StatusDocument("s", "v", "r", contract.STARTING, 1, HOST, 1.0, 1.0)
        a.totals["batches"] += 1
        a.queries.append(QueryStatus("q", "r", None, True))
        assert b.totals == {"batches": 0, "input_rows": 0, "quarantined_rows": 0}
        assert b.queries == []
        assert StatusDocument.from_json("p", b.to_json()) == b
        assert b.ready is False and b.schema == SCHEMA_VERSION

    @staticmethod
    def _mutated(mutate) -> bytes:
        raw = json.loads(_status().to_json())
        mutate(raw)
        return json.dumps(raw).encode()

    @pytest.mark.parametrize(
        "case",
        [
            "truncated",
            "binary",
            "list",
            "string",
            "wrong-schema",
            "no-schema",
            "missing-field",
            "missing-query-field",
            "queries-not-list",
            "query-not-object",
            "wrong-typed-pid",
            "wrong-typed-totals",
            "unknown-state",
            "progress-not-objects",
        ],
    )
    def test_unreadable_status_raises_naming_file(self, storage, paths, case):
        good = _status().to_json()
        data = {
            "truncated": good[: len(good) // 2],
            "binary": b"\xff\xfe\x00garbage",
            "list": b"[1, 2, 3]",
            "string": b'"RUNNING"',
            "wrong-schema": self._mutated(lambda r: r.update(schema=SCHEMA_VERSION + 1)),
            "no-schema": self._mutated(lambda r: r.pop("schema")),
            "missing-field": self._mutated(lambda r: r.pop("pid")),
            "wrong-typed-pid": self._mutated(lambda r: r.update(pid="1234")),
            "wrong-typed-totals": self._mutated(lambda r: r["totals"].update(batches="many")),
            "unknown-state": self._mutated(lambda r: r.update(state="DANCING")),
            "progress-not-objects": self._mutated(lambda r: r["queries"][0].update(recent_progress=[1, 2])),
            "missing-query-field": self._mutated(lambda r: r["queries"][0].pop("id")),
            "queries-not-list": self._mutated(lambda r: r.update(queries=5)),
            "query-not-object": self._mutated(lambda r: r.update(queries=[1])),
        }[case]
        storage.write_atomic(paths.status, data)
        with pytest.raises(ControlFileError, match=re.escape(paths.status)):
            read_status(storage, paths)
        with pytest.raises(ControlFileError, match="/some/where/status.json"):
            StatusDocument.from_json("/some/where/status.json", data)

    def test_unknown_query_field_is_ignored(self):
        # Forward compatibility inside queries too: a newer driver may record more per query.
        data = self._mutated(lambda r: r["queries"][0].update(surprise=1))
        assert StatusDocument.from_json("p", data) == _status()

    def test_unknown_top_level_field_is_ignored(self):
        # Forward compatibility: a newer driver may add top-level fields (filtered explicitly by from_json).
        data = self._mutated(lambda r: r.update(added_in_a_later_version={"x": 1}))
        assert StatusDocument.from_json("p", data) == _status()

    @pytest.mark.parametrize(
        "state, terminal",
        [
            (contract.STARTING, False),
            (contract.RUNNING, False),
            (contract.STOPPING, False),
            (contract.STOPPED, True),
            (contract.FAILED, True),
        ],
    )
    def test_is_terminal(self, state, terminal):
        assert _status(state=state).is_terminal is terminal

    @pytest.mark.parametrize(
        "batch_ids, expected",
        [
            ([], None),
            ([None], None),
            ([None, None], None),
            ([0], 0),
            ([0, None], 0),
            ([3, None, 7, 5], 7),
            ([12, 2], 12),
        ],
    )
    def test_last_batch_id_over_queries(self, batch_ids, expected):
        queries = [QueryStatus(f"q{i}", f"r{i}", None, True, last_batch_id=b) for i, b in enumerate(batch_ids)]
        doc = _status(queries=queries)
        assert doc.last_batch_id() == expected
        assert StatusDocument.from_json("p", doc.to_json()).last_batch_id() == expected


def test_renew_refuses_to_overwrite_a_lease_taken_over_by_another_driver(storage, paths):
    from airflow_streaming.control.contract import LeaseLostError

    mine = acquire_lease(storage, paths, "mine", 30.0)
    theirs = _hand_lease(run_id="theirs", pid=1, host=OTHER_HOST)
    storage.write_atomic(paths.lease, theirs.to_json())
    with pytest.raises(LeaseLostError, match="now names theirs pid 1, not this driver"):
        renew_lease(storage, paths, mine)
    assert read_lease(storage, paths) == theirs
