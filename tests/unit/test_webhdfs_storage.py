"""WebHdfsStorage (the Airflow side's HDFS backend, HdfsCLI) against the WebHDFS-protocol STAND-IN.

No real NameNode can run here (see tests/webhdfs_standin.py): every test in this file talks to the
stand-in, a small HTTP server over a temp directory that answers like a NameNode + DataNode.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from airflow_streaming.checkpoint.batches import read_batch_position
from airflow_streaming.checkpoint.reader import read_checkpoint
from airflow_streaming.control import webhdfs, webhdfs_connection
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.storage import StorageError
from airflow_streaming.control.locations import storage_for
from airflow_streaming.control.webhdfs import WebHdfsStorage
from airflow_streaming.control.webhdfs_connection import WebHdfsSettings, settings_for
from webhdfs_standin import WebHdfsStandIn

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=[False, True], ids=["no-content-type", "json-content-type"])
def standin(tmp_path, request):
    """The NameNode stand-in, with and without Content-Type headers (a real NameNode sends them)."""
    with WebHdfsStandIn(str(tmp_path / "hdfs"), json_content_type=request.param) as server:
        yield server


@pytest.fixture
def nn(tmp_path):
    with WebHdfsStandIn(str(tmp_path / "hdfs")) as server:
        yield server


def storage_of(server: WebHdfsStandIn, **settings: object) -> WebHdfsStorage:
    return WebHdfsStorage(WebHdfsSettings(hosts=("127.0.0.1",), port=server.nn_port, **settings))  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------------------------------ operations


def test_every_operation_round_trip(standin):
    st = storage_of(standin)
    assert (st.read_bytes("/c/s/status.json"), st.exists("/c/s/status.json"), st.list_dir("/c/s")) == (None, False, [])

    st.write_atomic("/c/s/status.json", b"one")
    st.write_atomic("/c/s/status.json", b"two")
    assert st.read_bytes("/c/s/status.json") == b"two" and st.read_text("/c/s/status.json") == "two"
    assert st.exists("/c/s/status.json") and st.exists("/c/s")
    assert st.create_exclusive("/c/s/lease.json", b"mine") is True
    assert st.create_exclusive("/c/s/lease.json", b"theirs") is False
    assert st.read_bytes("/c/s/lease.json") == b"mine"
    assert st.list_dir("/c/s") == ["lease.json", "status.json"]  # no temp files left behind
    assert st.list_dir("/c/s/lease.json") == []  # as on local files: a file has no entries (tree walks rely on it)
    with pytest.raises(StorageError, match="not a directory"):
        st.list_tree("/c/s/lease.json")  # a tree rooted at a file is a configuration error
    assert sorted(os.listdir(standin.local("/c/s"))) == ["lease.json", "status.json"]

    assert st.delete("/c/s/lease.json") is True and st.delete("/c/s/lease.json") is False
    st.makedirs("/c/s/logs/x")
    st.write_once("/c/s/logs/x/a", b"abc")
    with pytest.raises(StorageError) as exists:
        st.write_once("/c/s/logs/x/a", b"again")
    assert exists.value.errno == errno.EEXIST
    assert st.delete("/c/s/logs") is False  # a non-empty directory is not a file (see delete_tree)
    assert st.list_tree("/c/s") == [("logs", True, 0), ("logs/x", True, 0), ("logs/x/a", False, 3),
                                    ("status.json", False, 3)]
    st.move("/c/s/logs", "/c/s/logs.aside")
    with pytest.raises(StorageError) as taken:
        st.move("/c/s/status.json", "/c/s/logs.aside")
    assert taken.value.errno == errno.EEXIST and "/c/s/logs.aside" in str(taken.value)
    st.delete_tree("/c/s/logs.aside")
    st.delete_tree("/c/s/never-there")
    assert st.list_dir("/c/s") == ["status.json"] and st.list_tree("/nothing") == []
    assert standin.unsupported == []


def test_replace_is_one_create_and_one_atomic_rename(nn):
    st = storage_of(nn)
    st.write_atomic("/c/f", b"v1")
    nn.reset()
    st.write_atomic("/c/f", b"v2")
    ops = [(e.endpoint, e.op, e.params.get("renameoptions")) for e in nn.log]
    assert ops == [("nn", "CREATE", None), ("dn", "CREATE", None), ("nn", "RENAME", "OVERWRITE")]
    nn.reset()
    st.create_exclusive("/c/g", b"x")
    assert [(e.op, e.params.get("renameoptions")) for e in nn.log if e.endpoint == "nn"] == [
        ("CREATE", None), ("RENAME", "NONE")]
    temp = nn.log[0].path
    assert temp.startswith("/c/.g.") and temp.endswith(".tmp"), temp


def test_reader_never_sees_a_missing_or_partial_file_while_it_is_replaced(nn):
    st, reader = storage_of(nn), storage_of(nn)
    values = {b"A" * 5000, b"B" * 7000}
    st.write_atomic("/c/status.json", b"A" * 5000)
    seen: list[bytes | None] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.append(reader.read_bytes("/c/status.json"))

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for i in range(60):
            st.write_atomic("/c/status.json", sorted(values)[i % 2])
    finally:
        stop.set()
        thread.join()
    assert len(seen) > 10 and set(seen) <= values, {len(v) if v else v for v in seen}


def test_exclusive_create_race_has_exactly_one_winner(nn):
    clients = [storage_of(nn) for _ in range(4)]
    for round_ in range(15):
        barrier = threading.Barrier(len(clients))
        results: dict[int, bool] = {}

        def create(i: int) -> None:
            barrier.wait()
            results[i] = clients[i].create_exclusive(f"/race/{round_}", f"writer {i}".encode())

        threads = [threading.Thread(target=create, args=(i,)) for i in range(len(clients))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [i for i, won in results.items() if won]
        assert len(winners) == 1, results
        assert clients[0].read_bytes(f"/race/{round_}") == f"writer {winners[0]}".encode()
    assert sorted(os.listdir(nn.local("/race"))) == sorted(str(i) for i in range(15))  # no temp left


def test_compare_and_swap_loses_no_update_between_two_writers(nn):
    a, b = storage_of(nn), storage_of(nn)
    a.write_atomic("/c/counter", b"0")
    per_thread = 12

    def bump(st: WebHdfsStorage) -> None:
        done = 0
        while done < per_thread:
            current = st.read_bytes("/c/counter")
            if st.compare_and_swap("/c/counter", current, str(int(current or b"0") + 1).encode()):
                done += 1

    threads = [threading.Thread(target=bump, args=(st,)) for st in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert a.read_bytes("/c/counter") == str(2 * per_thread).encode()
    assert a.compare_and_swap("/c/counter", b"wrong", b"x") is False
    assert a.compare_and_swap("/c/counter", str(2 * per_thread).encode(), None) is True
    assert a.read_bytes("/c/counter") is None and a.list_dir("/c") == []  # no mutex left behind


# ------------------------------------------------------------------------------------------ error rule

_OPS = {
    "read": lambda st, p: st.read_bytes(p),
    "exists": lambda st, p: st.exists(p),
    "list_dir": lambda st, p: st.list_dir(p),
    "delete": lambda st, p: st.delete(p),
    "write_atomic": lambda st, p: st.write_atomic(p, b"x"),
    "create_exclusive": lambda st, p: st.create_exclusive(p, b"x"),
    "makedirs": lambda st, p: st.makedirs(p),
    "list_tree": lambda st, p: st.list_tree(p),
}


@pytest.mark.parametrize("op", sorted(_OPS))
@pytest.mark.parametrize("endpoint", ["nn", "dn"])
def test_a_500_is_an_error_naming_path_and_namenode_never_absent(nn, op, endpoint):
    st = storage_of(nn)
    # The NameNode answers for a missing file itself; the DataNode is only reached for an existing one.
    path = "/c/missing" if endpoint == "nn" else "/c/present"
    st.write_atomic("/c/present", b"{}")
    nn.inject(r"^/c/", status=500, endpoint=endpoint)
    if endpoint == "dn" and op not in ("read", "write_atomic", "create_exclusive"):
        _OPS[op](st, "/c")  # no DataNode step: unaffected by a DataNode fault
        return
    with pytest.raises(StorageError) as err:
        _OPS[op](st, path)
    message = str(err.value)
    assert path in message and nn.url in message and "HTTP 500" in message, message
    assert "check" in message


@pytest.mark.parametrize("op", sorted(_OPS))
def test_a_refused_connection_is_an_error_never_absent(tmp_path, op):
    port = free_port()  # nothing listens there
    st = WebHdfsStorage(WebHdfsSettings(hosts=("127.0.0.1",), port=port))
    with pytest.raises(StorageError) as err:
        _OPS[op](st, "/c/RUNNING")
    assert err.value.errno == errno.ECONNREFUSED
    assert "/c/RUNNING" in str(err.value) and f"127.0.0.1:{port}" in str(err.value)
    assert "reachable" in str(err.value)


def test_a_namenode_that_goes_away_mid_life_is_an_error(nn):
    st = storage_of(nn)
    st.write_atomic("/c/RUNNING", b"{}")
    assert st.exists("/c/RUNNING")
    nn.stop()
    with pytest.raises(StorageError) as err:
        st.exists("/c/RUNNING")
    assert err.value.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH)


def test_dropped_connection_and_timeout_are_errors(nn):
    st = storage_of(nn, read_timeout=0.5)
    st.write_atomic("/c/RUNNING", b"{}")
    nn.inject("RUNNING", action="drop", times=1)
    with pytest.raises(StorageError):
        st.exists("/c/RUNNING")
    nn.inject("RUNNING", action="hang", seconds=2, times=1)
    with pytest.raises(StorageError) as err:
        st.exists("/c/RUNNING")
    assert err.value.errno == errno.ETIMEDOUT and "no answer in time" in str(err.value)
    assert st.exists("/c/RUNNING") is True  # both faults were one-shot


def test_permission_denied_names_the_user_and_a_reply_that_is_not_webhdfs_is_an_error(nn):
    st = storage_of(nn, user="etl")
    nn.inject("/secure", status=403, exception="AccessControlException", times=1)
    with pytest.raises(StorageError) as err:
        st.read_bytes("/secure/lease.json")
    assert err.value.errno == errno.EACCES and "for user etl" in str(err.value)
    nn.inject("/proxy", status=404, exception="NotAWebHdfsError", times=1)  # a 404 that is not FileNotFound
    with pytest.raises(StorageError):
        st.read_bytes("/proxy/x")
    nn.inject("/garbage", status=200, times=2)  # a 200 that is not a WebHDFS answer
    with pytest.raises(StorageError) as garbage:
        st.list_dir("/garbage")
    assert garbage.value.errno == errno.EPROTO and "WebHDFS endpoint" in str(garbage.value)
    with pytest.raises(StorageError):
        st.delete("/garbage/x")


def test_ha_skips_a_dead_namenode_and_standby_everywhere_is_an_error(nn):
    dead = free_port()
    two = WebHdfsStorage(WebHdfsSettings(hosts=(f"127.0.0.1:{dead}", f"127.0.0.1:{nn.nn_port}")))
    assert two.client.url == f"http://127.0.0.1:{dead};http://127.0.0.1:{nn.nn_port}"
    two.write_atomic("/ha/f", b"1")
    assert two.read_bytes("/ha/f") == b"1"
    nn.inject("/ha", status=403, exception="StandbyException")
    with pytest.raises(StorageError) as err:
        two.read_bytes("/ha/f")
    assert err.value.errno in (errno.EHOSTUNREACH, errno.ECONNREFUSED)
    assert str(dead) in str(err.value) and str(nn.nn_port) in str(err.value)


def test_messages_carry_no_password_and_no_query_string(nn):
    st = storage_of(nn, user="etl", password="s3cr3t-pw", allow_plain_http=True)
    st.write_atomic("/c/f", b"1")
    assert nn.log[0].headers.get("authorization") == "Basic" and nn.log[0].params["user.name"] == "etl"
    nn.inject("/c/f", action="drop")
    with pytest.raises(StorageError) as err:
        st.read_bytes("/c/f")
    nn.stop()
    with pytest.raises(StorageError) as err2:
        st.read_bytes("/c/f")
    for message in (str(err.value), str(err2.value)):
        assert "s3cr3t" not in message and "user.name" not in message and "op=" not in message, message


def test_injected_storage_fault_is_a_storage_error(nn, tmp_path, monkeypatch):
    rules = tmp_path / "faults.json"
    rules.write_text(json.dumps([{"point": "storage.exists", "match": "/RUNNING", "action": "error", "errno": "EIO"}]))
    monkeypatch.setenv("AIRFLOW_STREAMING_FAULTS", str(rules))
    st = storage_of(nn)
    with pytest.raises(StorageError) as err:
        st.exists("/c/RUNNING")
    assert err.value.errno == errno.EIO and "/c/RUNNING" in str(err.value)
    assert nn.total() == 0  # the failpoint fires before any request


# ------------------------------------------------------------------------------------------ settings


def test_settings_from_an_airflow_webhdfs_connection(nn, monkeypatch):
    conn = {"conn_type": "webhdfs", "host": "127.0.0.1", "port": nn.nn_port, "login": "etl",
            "extra": {"use_ssl": "False", "timeout": 7}}
    monkeypatch.setenv("AIRFLOW_CONN_HDFS_PROD", json.dumps(conn))
    webhdfs.clear_cache()
    storage, path = storage_for("hdfs://nameservice1/streams/control/etl", "hdfs_prod")
    assert path == "/streams/control/etl" and isinstance(storage, WebHdfsStorage)
    assert storage.settings.read_timeout == 7 and storage.settings.user == "etl"
    storage.write_atomic(f"{path}/RUNNING", b"{}")
    assert nn.log[-1].params["user.name"] == "etl"
    assert storage_for("hdfs://nameservice1/other", "hdfs_prod")[0] is storage  # reused client
    assert os.path.isfile(nn.local("/streams/control/etl/RUNNING"))


def test_settings_parse_ha_hosts_ssl_verify_and_gateway_path():
    class Conn:
        host, port, login, password, schema = "nn1.example, nn2.example", None, "etl", "pw", "gateway/webhdfs"
        extra_dejson = {"use_ssl": True, "verify": "/etc/ca.pem", "cert": "/c.pem", "key": "/k.pem",
                        "connect_timeout": "3"}

    s = WebHdfsSettings.from_connection(Conn(), "x")
    assert s.urls == ["https://nn1.example:9870/gateway/webhdfs", "https://nn2.example:9870/gateway/webhdfs"]
    assert (s.verify, s.cert, s.key, s.connect_timeout, s.user) == ("/etc/ca.pem", "/c.pem", "/k.pem", 3.0, "etl")
    assert "pw" not in repr(s)
    client = webhdfs_connection.build_client(s)
    assert client.url == "https://nn1.example:9870/gateway/webhdfs;https://nn2.example:9870/gateway/webhdfs"
    assert client._session.verify == "/etc/ca.pem" and client._session.cert == ("/c.pem", "/k.pem")


def test_a_webhdfs_uri_names_its_namenode_and_hdfs_needs_a_connection(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_WEBHDFS_DEFAULT", raising=False)
    assert settings_for("webhdfs://nn.example:50070/x").urls == ["http://nn.example:50070"]
    assert settings_for("webhdfs://nn.example/x").port == 9870
    with pytest.raises(StorageError) as err:
        settings_for("hdfs://nn.example:8020/streams")
    message = str(err.value)
    assert "hdfs://nn.example:8020/streams" in message and "'webhdfs_default'" in message
    assert "RPC" in message and "AIRFLOW_CONN_WEBHDFS_DEFAULT" in message and "storage_conn_id" in message


def test_kerberos_without_the_extension_says_what_to_install():
    try:
        import requests_kerberos  # noqa: F401
        pytest.skip("hdfs[kerberos] is installed here")
    except ImportError:
        pass
    with pytest.raises(StorageError, match=r"hdfs\[kerberos\]"):
        webhdfs_connection.build_client(WebHdfsSettings(hosts=("nn",), kerberos=True, source="connection 'k'"))


def test_module_imports_and_works_without_airflow(nn):
    code = (
        "import sys; sys.modules['airflow'] = None\n"
        "from airflow_streaming.control.locations import storage_for\n"
        "from airflow_streaming.control.storage import StorageError\n"
        f"st, p = storage_for('webhdfs://127.0.0.1:{nn.nn_port}/c/x')\n"
        "st.write_atomic(p, b'ok'); print(st.read_bytes(p).decode())\n"
        "try:\n    storage_for('hdfs://nn:8020/c')\nexcept StorageError as e:\n    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "ok" and lines[1].startswith("ERR") and "Airflow is not importable" in lines[1]


# ------------------------------------------------------------------------------------------ checkpoints


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()))
def test_checkpoint_reader_and_batch_position_through_webhdfs_match_local(nn, fixture):
    shutil.copytree(FIXTURES / fixture, nn.local(f"/ckpt/{fixture}"))
    st = storage_of(nn)
    remote, local = read_checkpoint(f"/ckpt/{fixture}", st), read_checkpoint(str(FIXTURES / fixture))
    position, expected = read_batch_position(st, f"/ckpt/{fixture}"), read_batch_position(LocalStorage(),
                                                                                           str(FIXTURES / fixture))
    assert (position.last_planned, position.last_committed) == (expected.last_planned, expected.last_committed)
    assert position.last_committed is not None
    for name in ("query_id", "last_planned_batch", "last_committed_batch", "conf", "state_store_provider",
                 "shuffle_partitions", "files_read", "dirs_listed", "bytes_read"):
        assert getattr(remote, name) == getattr(local, name), name
    assert [(o.id, o.name, o.key_schema, o.value_schema) for o in remote.operators] == [
        (o.id, o.name, o.key_schema, o.value_schema) for o in local.operators]
    via_uri = read_checkpoint(f"{nn.uri}/ckpt/{fixture}")  # storage_for: the URI names the NameNode
    assert via_uri.query_id == local.query_id
