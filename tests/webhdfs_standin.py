"""A WebHDFS-protocol STAND-IN for a real HDFS NameNode and DataNode. Tests only.

No NameNode or DataNode can be installed on these machines (no package ships Hadoop's server side
and Maven is unreachable; see NOTES "HDFS here"). This module serves a local directory with the
WebHDFS REST protocol so that the clients we ship can be tested against the protocol they speak on
a real cluster: HdfsCLI (the Airflow side, :mod:`airflow_streaming.control.webhdfs`) and the JVM's
``WebHdfsFileSystem`` (Spark checkpoints at ``webhdfs://``, and the driver's
:mod:`spark_jobs.runtime.hadoop_storage`).

It is NOT a NameNode: no blocks, replication, permissions, quotas, leases, safe mode, HA or
Kerberos. What it does reproduce, because our code relies on it:

- two endpoints on two ports: the "NameNode" answers metadata operations and redirects data
  operations (``CREATE``, ``OPEN``, ``APPEND``) with ``307`` to the "DataNode", which moves the bytes
  (so request counts per endpoint mean what they would mean on a cluster);
- ``CREATE`` with ``overwrite=false`` is exclusive (checked at the DataNode step, as on HDFS, where
  the NameNode's first step creates nothing);
- ``RENAME`` without options has the old ``rename()`` semantics (``{"boolean": false}`` when the
  destination exists as a file; moved *into* an existing directory); with ``renameoptions``
  (``NONE`` or ``OVERWRITE``) it has ``rename2()`` semantics: atomic, ``FileAlreadyExistsException``
  when the destination exists and OVERWRITE was not given, replace otherwise;
- errors as a real NameNode sends them: a ``RemoteException`` JSON body and the status its
  ``ExceptionHandler`` maps to (``FileNotFoundException`` 404, any other ``IOException`` 403,
  ``IllegalArgumentException`` 400);
- a request counter per endpoint and operation, a request log, and injected faults (an HTTP status,
  a dropped connection, a hang) for a path pattern.

The Content-Type trap: pip pyspark's shaded ``WebHdfsFileSystem`` cannot parse a JSON reply that
carries a ``Content-Type`` header (``ClassNotFoundException: ...shaded.org.glassfish.jersey.internal.
RuntimeDelegateImpl``), while a real NameNode sends ``application/json``. So by default this stand-in
sends NO Content-Type at all; ``json_content_type=True`` sends it (realistic, fine for HdfsCLI).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import socket
import stat
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlparse

PREFIX = "/webhdfs/v1"
NN, DN = "nn", "dn"

_JAVA = {
    "FileNotFoundException": "java.io.FileNotFoundException",
    "FileAlreadyExistsException": "org.apache.hadoop.fs.FileAlreadyExistsException",
    "ParentNotDirectoryException": "org.apache.hadoop.fs.ParentNotDirectoryException",
    "PathIsNotEmptyDirectoryException": "org.apache.hadoop.fs.PathIsNotEmptyDirectoryException",
    "IOException": "java.io.IOException",
    "IllegalArgumentException": "java.lang.IllegalArgumentException",
    "AccessControlException": "org.apache.hadoop.security.AccessControlException",
    "StandbyException": "org.apache.hadoop.ipc.StandbyException",
    "RuntimeException": "java.lang.RuntimeException",
}
_STATUS = {"FileNotFoundException": 404, "IllegalArgumentException": 400, "RuntimeException": 500}


class RemoteError(Exception):
    """An error answered as a WebHDFS ``RemoteException``."""

    def __init__(self, exception: str, message: str, status: int | None = None):
        super().__init__(message)
        self.exception, self.message = exception, message
        self.status = status if status is not None else _STATUS.get(exception, 403)


@dataclass
class Fault:
    """An injected fault: requests whose HDFS path matches ``pattern`` (a regex, ``re.search``) and whose
    operation is in ``ops`` (any when empty) on ``endpoint`` (``nn``, ``dn`` or ``any``) get ``action``:
    ``error`` (``status`` with a ``RemoteException`` of ``exception``), ``drop`` (the connection is
    closed without an answer) or ``hang`` (sleep ``seconds``, then answer normally). ``after``: how
    many matching requests pass untouched first; ``times``: how many it hits then (``None``: all)."""

    pattern: str
    ops: frozenset[str] = frozenset()
    endpoint: str = "any"
    action: str = "error"
    status: int = 500
    exception: str = "RuntimeException"
    seconds: float = 60.0
    times: int | None = None
    after: int = 0
    hits: int = 0
    seen: int = 0

    def matches(self, endpoint: str, op: str, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        return ((self.endpoint in ("any", endpoint)) and (not self.ops or op in self.ops)
                and re.search(self.pattern, path) is not None)


@dataclass
class Logged:
    """One request as the stand-in saw it."""

    endpoint: str
    method: str
    op: str
    path: str
    params: dict[str, str]
    headers: dict[str, str] = field(default_factory=dict)
    at: float = 0.0


class WebHdfsStandIn:
    """A stand-in NameNode + DataNode over ``root`` (see the module docstring). Use as a context manager.

    :param root: the local directory that holds the "HDFS" namespace (``/a/b`` is ``root/a/b``).
    :param user: the user reported as owner and home directory.
    :param json_content_type: send ``Content-Type`` headers (a real NameNode does; pip pyspark's
        ``WebHdfsFileSystem`` then fails, see the module docstring).
    :param host: the address both endpoints listen on and name in URIs and DataNode redirects (loopback
        by default; a test with several network namespaces uses an address they all reach).
    """

    def __init__(self, root: str, user: str = "tester", json_content_type: bool = False, host: str = "127.0.0.1"):
        self.root = os.path.abspath(root)
        self.host = host
        os.makedirs(self.root, exist_ok=True)
        self.user = user
        self.json_content_type = json_content_type
        self.lock = threading.RLock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self.log: list[Logged] = []
        self.log_limit = 20000
        self.faults: list[Fault] = []
        self.unsupported: list[tuple[str, str, str]] = []
        self._servers: dict[str, ThreadingHTTPServer] = {}
        self._threads: list[threading.Thread] = []
        self._connections: set[socket.socket] = set()
        self.redirect_base: str | None = None
        """When set (``http://host:port``), data operations are redirected there instead of to the DataNode:
        a NameNode - or whoever answers in its place - naming a host of its choosing."""

    # ------------------------------------------------------------------ lifecycle
    def start(self, nn_port: int = 0, dn_port: int = 0) -> WebHdfsStandIn:
        for endpoint, port in ((NN, nn_port), (DN, dn_port)):
            server = ThreadingHTTPServer((self.host, port), _handler_for(self, endpoint))
            server.daemon_threads = True
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                      name=f"webhdfs-standin-{endpoint}", daemon=True)
            thread.start()
            self._servers[endpoint] = server
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop both endpoints and close every open connection (new connections are refused)."""
        for server in self._servers.values():
            server.shutdown()
            server.server_close()
        with self.lock:
            for sock in list(self._connections):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._connections.clear()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()

    def __enter__(self) -> WebHdfsStandIn:
        return self.start() if not self._servers else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def nn_port(self) -> int:
        return int(self._servers[NN].server_address[1])

    @property
    def dn_port(self) -> int:
        return int(self._servers[DN].server_address[1])

    @property
    def url(self) -> str:
        """The NameNode's HTTP address (what an Airflow ``webhdfs`` connection names)."""
        return f"http://{self.host}:{self.nn_port}"

    @property
    def uri(self) -> str:
        """The Hadoop URI of the namespace root, for Spark: ``webhdfs://<host>:<port>``."""
        return f"webhdfs://{self.host}:{self.nn_port}"

    def local(self, hdfs_path: str) -> str:
        """The local file behind an HDFS path (for assertions)."""
        return _local(self.root, hdfs_path)

    # ------------------------------------------------------------------ counters and faults
    def counts(self, endpoint: str | None = None) -> dict[str, int]:
        """Requests per operation so far (``endpoint`` ``nn`` or ``dn``; both when ``None``)."""
        with self.lock:
            out: Counter[str] = Counter()
            for (ep, op), n in self._counts.items():
                if endpoint in (None, ep):
                    out[op] += n
            return dict(out)

    def total(self, endpoint: str | None = None) -> int:
        return sum(self.counts(endpoint).values())

    def reset(self) -> None:
        with self.lock:
            self._counts.clear()
            self.log.clear()
            self.unsupported.clear()

    def inject(self, pattern: str, **kwargs: Any) -> Fault:
        """Add a :class:`Fault` (see its fields) and return it; :meth:`clear_faults` removes all."""
        if "ops" in kwargs:
            kwargs["ops"] = frozenset(op.upper() for op in kwargs["ops"])
        fault = Fault(pattern, **kwargs)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def _fault_for(self, endpoint: str, op: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(endpoint, op, path):
                    fault.seen += 1
                    if fault.seen <= fault.after:
                        continue
                    fault.hits += 1
                    return fault
        return None

    def _record(self, entry: Logged) -> None:
        with self.lock:
            self._counts[(entry.endpoint, entry.op)] += 1
            if len(self.log) < self.log_limit:
                self.log.append(entry)

    # ------------------------------------------------------------------ namespace
    def status(self, local: str, suffix: str) -> dict[str, Any]:
        st = os.stat(local)
        is_dir = stat.S_ISDIR(st.st_mode)
        return {
            "accessTime": 0 if is_dir else int(st.st_atime * 1000), "blockSize": 0 if is_dir else 134217728,
            "childrenNum": len(os.listdir(local)) if is_dir else 0, "fileId": st.st_ino, "group": "supergroup",
            "length": 0 if is_dir else st.st_size, "modificationTime": int(st.st_mtime * 1000),
            "owner": self.user, "pathSuffix": suffix, "permission": "755" if is_dir else "644",
            "replication": 0 if is_dir else 1, "storagePolicy": 0, "type": "DIRECTORY" if is_dir else "FILE",
        }


def _local(root: str, hdfs_path: str) -> str:
    norm = posixpath.normpath("/" + hdfs_path.lstrip("/"))
    if norm.startswith("/.."):
        raise RemoteError("IllegalArgumentException", f"Invalid path name {hdfs_path}")
    return os.path.join(root, norm.lstrip("/")) if norm != "/" else root


def _parent_check(root: str, hdfs_path: str) -> None:
    """ParentNotDirectoryException when a parent of ``hdfs_path`` is a file."""
    parent = posixpath.dirname(posixpath.normpath(hdfs_path))
    while parent not in ("/", ""):
        local = _local(root, parent)
        if os.path.exists(local) and not os.path.isdir(local):
            raise RemoteError("ParentNotDirectoryException", f"Parent path is not a directory: {parent}")
        parent = posixpath.dirname(parent)


def _handler_for(standin: WebHdfsStandIn, endpoint: str) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        pass

    Handler.standin = standin
    Handler.endpoint = endpoint
    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60
    standin: WebHdfsStandIn
    endpoint: str

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without NODELAY, Nagle + delayed ACK add ~40 ms a request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.standin.lock:
            self.standin._connections.add(self.connection)

    def finish(self) -> None:
        with self.standin.lock:
            self.standin._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._serve("GET")

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")

    # ------------------------------------------------------------------ plumbing
    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes = b"", content_type: str | None = None,
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        if content_type and self.standin.json_content_type:
            self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _error(self, exc: RemoteError) -> None:
        self._json(exc.status, {"RemoteException": {"exception": exc.exception, "javaClassName": _JAVA.get(
            exc.exception, "java.io.IOException"), "message": exc.message}})

    def _serve(self, method: str) -> None:
        url = urlparse(self.path)
        params = {k.lower(): v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        op = params.get("op", "").upper()
        if not url.path.startswith(PREFIX):
            self._body()
            self._send(404, b"not a WebHDFS path")
            return
        path = unquote(url.path[len(PREFIX):]) or "/"
        body = self._body()
        keep = ("x-xsrf-header", "content-type", "user-agent")
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() in keep}
        if self.headers.get("Authorization"):  # recorded as present, never its value
            headers["authorization"] = self.headers["Authorization"].split(" ", 1)[0]
        self.standin._record(Logged(self.endpoint, method, op, path, params, headers, time.time()))
        fault = self.standin._fault_for(self.endpoint, op, path)
        if fault is not None:
            if fault.action == "drop":
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            if fault.action == "hang":
                time.sleep(fault.seconds)
            else:
                self._error(RemoteError(fault.exception, f"injected fault ({fault.status}) for {path}", fault.status))
                return
        try:
            if self.endpoint == NN:
                self._namenode(method, op, path, params)
            else:
                self._datanode(method, op, path, params, body)
        except RemoteError as exc:
            self._error(exc)
        except OSError as exc:
            self._error(RemoteError("IOException", f"{type(exc).__name__}: {exc}"))

    # ------------------------------------------------------------------ NameNode
    def _namenode(self, method: str, op: str, path: str, params: dict[str, str]) -> None:
        s = self.standin
        local = _local(s.root, path)
        if (method, op) in (("GET", "GETFILESTATUS"), ("GET", "GETFILELINKSTATUS")):
            if not os.path.exists(local):
                raise RemoteError("FileNotFoundException", f"File does not exist: {path}")
            self._json(200, {"FileStatus": s.status(local, "")})
        elif (method, op) == ("GET", "LISTSTATUS"):
            self._json(200, {"FileStatuses": {"FileStatus": self._listing(local, path)}})
        elif (method, op) == ("GET", "LISTSTATUS_BATCH"):
            self._json(200, {"DirectoryListing": {"partialListing": {"FileStatuses": {
                "FileStatus": self._listing(local, path)}}, "remainingEntries": 0}})
        elif (method, op) == ("GET", "GETHOMEDIRECTORY"):
            self._json(200, {"Path": f"/user/{params.get('user.name') or s.user}"})
        elif (method, op) == ("GET", "GETTRASHROOT"):
            self._json(200, {"Path": f"/user/{params.get('user.name') or s.user}/.Trash"})
        elif (method, op) == ("GET", "GETSERVERDEFAULTS"):
            self._json(200, {"FsServerDefaults": {
                "blockSize": 134217728, "bytesPerChecksum": 512, "writePacketSize": 65536, "replication": 1,
                "fileBufferSize": 4096, "encryptDataTransfer": False, "trashInterval": 0, "checksumType": 2,
                "keyProviderUri": "", "defaultStoragePolicyId": 7}})
        elif (method, op) in (("GET", "OPEN"), ("PUT", "CREATE"), ("POST", "APPEND")):
            if op == "OPEN":
                if not os.path.exists(local):
                    raise RemoteError("FileNotFoundException", f"File does not exist: {path}")
                if os.path.isdir(local):
                    raise RemoteError("FileNotFoundException", f"Path is not a file: {path}")
            if op == "APPEND" and not os.path.isfile(local):
                raise RemoteError("FileNotFoundException", f"File does not exist: {path}")
            location = self._datanode_url(path, params)
            if params.get("noredirect", "").lower() == "true":
                self._json(200, {"Location": location})
            else:
                self._send(307, headers={"Location": location})
        elif (method, op) == ("PUT", "MKDIRS"):
            with s.lock:
                _parent_check(s.root, path)
                if os.path.exists(local) and not os.path.isdir(local):
                    raise RemoteError("FileAlreadyExistsException", f"Path is not a directory: {path}")
                os.makedirs(local, exist_ok=True)
            self._json(200, {"boolean": True})
        elif (method, op) == ("PUT", "RENAME"):
            self._rename(path, params)
        elif (method, op) == ("DELETE", "DELETE"):
            self._json(200, {"boolean": self._delete(local, path, params.get("recursive", "false").lower() == "true")})
        elif method == "PUT" and op in ("SETPERMISSION", "SETOWNER", "SETTIMES", "SETREPLICATION"):
            if not os.path.exists(local):
                raise RemoteError("FileNotFoundException", f"File does not exist: {path}")
            self._json(200, {"boolean": True}) if op == "SETREPLICATION" else self._send(200)
        else:
            with s.lock:
                s.unsupported.append((method, op, path))
            raise RemoteError("IllegalArgumentException", f"Invalid value for webhdfs parameter \"op\": {op!r} "
                                                          f"is not supported by the stand-in ({method})")

    def _listing(self, local: str, path: str) -> list[dict[str, Any]]:
        s = self.standin
        if not os.path.exists(local):
            raise RemoteError("FileNotFoundException", f"File {path} does not exist.")
        if not os.path.isdir(local):
            return [s.status(local, "")]
        out = []
        for name in sorted(os.listdir(local)):
            try:
                out.append(s.status(os.path.join(local, name), name))
            except FileNotFoundError:
                continue  # deleted while listing
        return out

    def _datanode_url(self, path: str, params: dict[str, str]) -> str:
        query = {k: v for k, v in params.items() if k != "noredirect"}
        query["namenoderpcaddress"] = f"{self.standin.host}:{self.standin.nn_port}"
        base = self.standin.redirect_base or f"http://{self.standin.host}:{self.standin.dn_port}"
        return f"{base}{PREFIX}{quote(path)}?{urlencode(query)}"

    def _rename(self, path: str, params: dict[str, str]) -> None:
        s = self.standin
        destination = params.get("destination")
        if not destination or not destination.startswith("/"):
            raise RemoteError("IllegalArgumentException", f"Invalid value for webhdfs parameter \"destination\": "
                                                          f"{destination!r}")
        options = {o.strip().upper() for o in params.get("renameoptions", "").split(",") if o.strip()}
        src, dst = _local(s.root, path), _local(s.root, destination)
        with s.lock:
            if not options:  # rename(): false instead of most errors; into an existing directory
                if not os.path.exists(src) or not os.path.isdir(os.path.dirname(dst)) or src == s.root:
                    self._json(200, {"boolean": False})
                    return
                if os.path.isdir(dst):
                    dst = os.path.join(dst, os.path.basename(src))
                if os.path.exists(dst) or (dst + os.sep).startswith(src + os.sep):
                    self._json(200, {"boolean": False})
                    return
                os.rename(src, dst)
                self._json(200, {"boolean": True})
                return
            if not options <= {"NONE", "OVERWRITE"}:
                raise RemoteError("IllegalArgumentException", f"Invalid value for webhdfs parameter "
                                                              f"\"renameoptions\": {params['renameoptions']}")
            if not os.path.exists(src):
                raise RemoteError("FileNotFoundException", f"rename source {path} is not found.")
            if not os.path.isdir(os.path.dirname(dst)):
                raise RemoteError("FileNotFoundException", f"rename destination parent {destination} not found.")
            if (dst + os.sep).startswith(src + os.sep):
                raise RemoteError("IOException", f"Rename destination {destination} is a directory or file under "
                                                 f"source {path}")
            if os.path.exists(dst):
                if "OVERWRITE" not in options:
                    raise RemoteError("FileAlreadyExistsException", f"rename destination {destination} already exists")
                if os.path.isdir(dst) != os.path.isdir(src):
                    raise RemoteError("IOException", f"Source {path} and destination {destination} must both be "
                                                     "directories or both files")
                if os.path.isdir(dst) and os.listdir(dst):
                    raise RemoteError("IOException", f"rename destination directory is not empty: {destination}")
                if os.path.isdir(dst):
                    os.rmdir(dst)
            os.replace(src, dst)
        self._send(200)

    def _delete(self, local: str, path: str, recursive: bool) -> bool:
        s = self.standin
        with s.lock:
            if local == s.root or not os.path.lexists(local):
                return False
            if os.path.isdir(local):
                if os.listdir(local) and not recursive:
                    raise RemoteError("PathIsNotEmptyDirectoryException", f"`{path} is non empty': Directory is "
                                                                          "not empty")
                shutil.rmtree(local)
            else:
                os.unlink(local)
            return True

    # ------------------------------------------------------------------ DataNode
    def _datanode(self, method: str, op: str, path: str, params: dict[str, str], body: bytes) -> None:
        s = self.standin
        local = _local(s.root, path)
        if (method, op) == ("PUT", "CREATE"):
            overwrite = params.get("overwrite", "false").lower() == "true"
            with s.lock:
                _parent_check(s.root, path)
                if os.path.isdir(local):
                    raise RemoteError("FileAlreadyExistsException", f"{path} already exists as a directory")
                if os.path.exists(local) and not overwrite:
                    raise RemoteError("FileAlreadyExistsException", f"{path} for client {self.client_address[0]} already exists")
                os.makedirs(os.path.dirname(local), exist_ok=True)
                flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
                fd = os.open(local, flags, 0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(body)
            self._send(201, headers={"Location": f"hdfs://{s.host}:{s.nn_port}{quote(path)}"})
        elif (method, op) == ("POST", "APPEND"):
            if not os.path.isfile(local):
                raise RemoteError("FileNotFoundException", f"File does not exist: {path}")
            with open(local, "ab") as fh:
                fh.write(body)
            self._send(200)
        elif (method, op) == ("GET", "OPEN"):
            try:
                with open(local, "rb") as fh:
                    fh.seek(int(params.get("offset") or 0))
                    length = params.get("length")
                    data = fh.read(int(length)) if length not in (None, "", "null") else fh.read()
            except FileNotFoundError as exc:
                raise RemoteError("FileNotFoundException", f"File does not exist: {path}") from exc
            except IsADirectoryError as exc:
                raise RemoteError("FileNotFoundException", f"Path is not a file: {path}") from exc
            self._send(200, data, "application/octet-stream")
        else:
            with s.lock:
                s.unsupported.append((method, op, path))
            raise RemoteError("IllegalArgumentException", f"unsupported DataNode operation {method} {op}")

