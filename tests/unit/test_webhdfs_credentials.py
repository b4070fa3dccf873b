"""Trust boundary (issue 25, item 8): the WebHDFS password goes only over TLS and only to the NameNode.

Against the WebHDFS STAND-IN (tests/webhdfs_standin.py: a NameNode and a DataNode on two ports, no real
HDFS can run here) and an attacker's HTTP listener on another loopback address. Each test reproduces
an attack and sees it refused:

- a connection with a password and no TLS: the password would cross the network in cleartext
  (Basic auth is base64, not encryption) -> :class:`PlainHttpCredentialsError`, no request at all;
- a NameNode redirect (``CREATE``, ``OPEN``) to a DataNode or to a host of the redirecter's choosing:
  before, the DataNode step of ``CREATE`` carried the password wherever ``Location`` pointed -> now the
  password goes to the NameNode's own scheme, host and port only, unless the connection lists the
  redirect host in ``trusted_redirect_hosts``.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airflow_streaming.control import webhdfs
from airflow_streaming.control.locations import storage_for
from airflow_streaming.control.storage import StorageError
from airflow_streaming.control.webhdfs import WebHdfsStorage
from airflow_streaming.control.webhdfs_connection import CredentialScope, PlainHttpCredentialsError, WebHdfsSettings
from webhdfs_standin import WebHdfsStandIn

PASSWORD = "gateway-pa55-word"


@pytest.fixture
def nn(tmp_path):
    with WebHdfsStandIn(str(tmp_path / "hdfs")) as server:
        yield server


class Listener:
    """The attacker's server on another address (127.0.0.2): records the Authorization header it gets."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                outer.seen.append(self.headers.get("Authorization"))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                self.send_response(201)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_PUT = do_POST = _any  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.2:{self.server.server_address[1]}"

    def __enter__(self) -> Listener:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def _storage(server: WebHdfsStandIn, **settings: object) -> WebHdfsStorage:
    return WebHdfsStorage(WebHdfsSettings(hosts=("127.0.0.1",), port=server.nn_port, user="etl",
                                          password=PASSWORD, **settings))  # type: ignore[arg-type]


def _auth(server: WebHdfsStandIn, endpoint: str) -> set[str | None]:
    return {entry.headers.get("authorization") for entry in server.log if entry.endpoint == endpoint}


def test_a_password_without_tls_is_refused_before_any_request(nn):
    with pytest.raises(PlainHttpCredentialsError) as err:
        _storage(nn)
    message = str(err.value)
    assert "plain http" in message and "use_ssl" in message and "allow_plain_http" in message
    assert PASSWORD not in message and isinstance(err.value, StorageError) and isinstance(err.value, ValueError)
    assert nn.total() == 0


def test_the_refusal_from_an_airflow_connection(nn, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_HDFS_GATEWAY", json.dumps(
        {"conn_type": "webhdfs", "host": "127.0.0.1", "port": nn.nn_port, "login": "etl", "password": PASSWORD}))
    webhdfs.clear_cache()
    with pytest.raises(PlainHttpCredentialsError, match="connection 'hdfs_gateway'"):
        storage_for("hdfs://ns1/streams/x", "hdfs_gateway")
    assert nn.total() == 0
    # Without a password (simple auth: user.name) plain http is fine, as before.
    monkeypatch.setenv("AIRFLOW_CONN_HDFS_SIMPLE", json.dumps(
        {"conn_type": "webhdfs", "host": "127.0.0.1", "port": nn.nn_port, "login": "etl"}))
    storage, path = storage_for("hdfs://ns1/streams/x", "hdfs_simple")
    storage.write_atomic(f"{path}/f", b"1")
    assert _auth(nn, "nn") == {None}


def test_allowed_plain_http_sends_the_password_to_the_namenode_only(nn):
    st = _storage(nn, allow_plain_http=True)
    st.write_atomic("/c/status.json", b"written")
    assert st.read_bytes("/c/status.json") == b"written"  # CREATE and OPEN both went through the DataNode
    assert nn.counts("dn").get("CREATE") == 1 and nn.counts("dn").get("OPEN") == 1
    assert _auth(nn, "nn") == {"Basic"}
    assert _auth(nn, "dn") == {None}  # another port is another origin: no password there


def test_a_trusted_redirect_host_gets_the_password(nn):
    st = _storage(nn, allow_plain_http=True, trusted_redirect_hosts=(f"127.0.0.1:{nn.dn_port}",))
    st.write_atomic("/c/f", b"1")
    assert st.read_bytes("/c/f") == b"1"
    assert _auth(nn, "dn") == {"Basic"}


@pytest.mark.parametrize("operation", ["write", "read"])
def test_a_redirect_to_another_host_never_carries_the_password(nn, operation):
    st = _storage(nn, allow_plain_http=True)
    st.write_atomic("/c/f", b"1")
    with Listener() as attacker:
        nn.redirect_base = attacker.url
        if operation == "write":
            st.write_once("/c/g", b"data for the DataNode")  # CREATE: NameNode 307 -> the Location it names
        else:
            st.read_bytes("/c/f")  # OPEN: requests follows the 307 itself
    assert attacker.seen and attacker.seen == [None] * len(attacker.seen)
    assert _auth(nn, "nn") == {"Basic"}


def test_the_credential_scope_rules():
    settings = WebHdfsSettings(hosts=("nn1.example", "nn2.example:9999"), port=9871, use_ssl=True,
                               password="x", trusted_redirect_hosts=("gw.example", "dn3.example:9865"))
    scope = CredentialScope.of(settings)
    assert scope.allows("https://nn1.example:9871/webhdfs/v1/a?op=OPEN")
    assert scope.allows("https://NN2.example:9999/webhdfs/v1/a")
    assert not scope.allows("http://nn1.example:9871/webhdfs/v1/a")  # a downgrade to plain http
    assert not scope.allows("https://nn1.example:9872/webhdfs/v1/a")  # another port
    assert not scope.allows("https://dn1.example:9865/webhdfs/v1/a")  # a DataNode
    assert not scope.allows("https://nn1.example.attacker.net:9871/")
    assert scope.allows("https://gw.example:8443/x") and scope.allows("https://dn3.example:9865/x")
    assert not scope.allows("https://dn3.example:9866/x") and not scope.allows("http://gw.example/x")
    assert not scope.allows("ftp://nn1.example:9871/")
    plain = CredentialScope.of(WebHdfsSettings(hosts=("nn",), password="x", allow_plain_http=True))
    assert plain.allows("http://nn:9870/a") and not plain.allows("http://nn:80/a")


def test_trusted_redirect_hosts_from_the_connection():
    class Conn:
        host, port, login, password, schema = "nn.example", 9871, "etl", "pw", None
        extra_dejson = {"use_ssl": True, "trusted_redirect_hosts": "GW1.example, gw2.example:8443"}

    assert WebHdfsSettings.from_connection(Conn(), "x").trusted_redirect_hosts == ("gw1.example", "gw2.example:8443")
    Conn.extra_dejson = {"use_ssl": True, "trusted_redirect_hosts": 7}
    with pytest.raises(ValueError, match="trusted_redirect_hosts"):
        WebHdfsSettings.from_connection(Conn(), "x")


def test_the_basic_auth_header_the_namenode_gets_is_the_connections(nn):
    """The positive control of the header checks above: the stand-in records the scheme only, so the
    value is checked against a listener standing in for the NameNode."""
    with Listener() as gateway:
        port = int(gateway.url.rsplit(":", 1)[1])
        st = WebHdfsStorage(WebHdfsSettings(hosts=("127.0.0.2",), port=port, user="etl", password=PASSWORD,
                                            allow_plain_http=True))
        st.exists("/x")
    expected = "Basic " + base64.b64encode(f"etl:{PASSWORD}".encode()).decode()
    assert gateway.seen and set(gateway.seen) == {expected}
