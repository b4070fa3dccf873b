""":class:`ControlStorage` over WebHDFS (HdfsCLI) for the Airflow side of ``hdfs://`` and ``webhdfs://``.

The Airflow side never needs a JVM: it reads and writes control files and reads checkpoints through
the NameNode's WebHDFS REST endpoint with HdfsCLI (``hdfs.InsecureClient``, or ``KerberosClient``
when ``hdfs[kerberos]`` is installed and asked for). The driver does not use this module: it goes
through the JVM's Hadoop FileSystem (``spark_jobs/runtime/hadoop_storage.py``). Replace and exclusive
create are :mod:`airflow_streaming.control.rename_commit`'s temp file + one rename.

How each operation maps onto WebHDFS (requests: NN = NameNode, DN = DataNode):

- ``read_bytes``: ``OPEN`` (NN 307 -> DN). ``None`` only for ``FileNotFoundException``.
- ``write_atomic``: ``CREATE`` a hidden temp ``.<name>.<uuid>.tmp`` in the same directory (NN 307 ->
  DN), then ``RENAME`` it over the target with ``renameoptions=OVERWRITE``: the NameNode's
  ``rename2(OVERWRITE)``, which replaces the destination atomically (a reader sees the old or the
  new file, never none and never a mix). Plain ``RENAME`` (without options) refuses an existing
  destination, and delete + rename would leave a window with no file at all.
- ``create_exclusive``: ``CREATE`` a temp, then ``RENAME`` with ``renameoptions=NONE``:
  ``rename2`` without OVERWRITE fails with ``FileAlreadyExistsException`` if the target exists, so
  exactly one creator wins, and the file appears with its whole content. (``CREATE
  overwrite=false`` is exclusive too, but the file is visible - empty - while its DataNode write is
  under way; a lease or mutex read in that window would look like garbage.)
- ``delete``: ``DELETE`` (a file or an empty directory; a non-empty directory is left alone and
  reads as "not a file", ``False``); ``delete_tree``: ``DELETE recursive=true``.
- ``exists``: ``GETFILESTATUS``; ``list_dir``: ``LISTSTATUS``; ``list_tree``: one ``LISTSTATUS`` per
  directory; ``makedirs``: ``MKDIRS``; ``move``: ``RENAME renameoptions=NONE``; ``write_once``:
  ``CREATE overwrite=false``.

Credentials (the connection's password, sent as HTTP Basic auth as the HDFS provider does) go only
over TLS (``use_ssl``) unless the connection's extra ``allow_plain_http: true`` says otherwise
(:class:`PlainHttpCredentialsError` before any request), and only to the NameNode(s) of the settings:
a redirect (``OPEN``, ``CREATE``) to a DataNode or any other scheme, host or port gets no
``Authorization`` header unless the extra ``trusted_redirect_hosts`` lists that host (``host`` or
``host:port``; still TLS only unless plain http is allowed). A normal HDFS DataNode authenticates the
redirect by the delegation token in its query string, never by the password.

The error rule (see :mod:`airflow_streaming.control.storage`): only ``FileNotFoundException`` (404)
is "absent". Connection refused, timeouts (every request has one), 401/403, 5xx, a standby or
safe-mode NameNode, a reply that is not WebHDFS: :class:`StorageError` naming the path, the
NameNode(s) and what to check. Messages never carry a URL's query string (delegation tokens,
``user.name``) nor the connection's password.
"""

from __future__ import annotations

import errno
import getpass
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from airflow_streaming.control.hdfs_errors import hint_for
from airflow_streaming.control.rename_commit import RenameCommitStorage
from airflow_streaming.control.storage import ControlStorage, StorageError, TreeEntry
from airflow_streaming.control.tree_walk import walk_tree

log = logging.getLogger(__name__)

DEFAULT_CONN_ID = "webhdfs_default"
DEFAULT_PORT = 9870
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 30.0
#: Built clients are reused (one HTTP session, keep-alive) for this long, then the connection is read again.
CLIENT_CACHE_SECONDS = 300.0



@dataclass(frozen=True)
class WebHdfsSettings:
    """Where the NameNode's WebHDFS endpoint is and how to talk to it.

    Built from an Airflow connection of the HDFS provider's ``webhdfs`` type
    (:meth:`from_connection`) or from a ``webhdfs://host:port`` URI (:meth:`from_uri`).
    """

    hosts: tuple[str, ...]
    """NameNode hosts; more than one for HA (tried in turn on connection errors and StandbyException).
    An entry may carry its own port (``nn2:9871``)."""
    port: int = DEFAULT_PORT
    user: str | None = None
    """The HDFS user (``user.name``); default ``HADOOP_USER_NAME`` or the OS user."""
    password: str | None = field(default=None, repr=False)
    """Sent as HTTP basic auth (e.g. through a Knox gateway), like the HDFS provider does. Never logged."""
    use_ssl: bool = False
    verify: bool | str = True
    """TLS certificate check: ``True``, ``False`` or a CA bundle path (the HDFS provider defaults to False)."""
    cert: str | None = None
    key: str | None = None
    path_prefix: str | None = None
    """The connection's ``schema``, appended to the base URL (a gateway path), as the HDFS provider does."""
    kerberos: bool = False
    connect_timeout: float = CONNECT_TIMEOUT
    read_timeout: float = READ_TIMEOUT
    source: str = ""
    """Where these settings came from, for messages (``connection 'webhdfs_default'``, ``URI ...``)."""
    allow_plain_http: bool = False
    """Send the password over plain http too (extra ``allow_plain_http``; a trusted network only)."""
    trusted_redirect_hosts: tuple[str, ...] = ()
    """Redirect targets other than the NameNodes that may receive the password (``host`` or ``host:port``;
    extra ``trusted_redirect_hosts``, a list or a comma-separated string)."""

    @property
    def urls(self) -> list[str]:
        scheme = "https" if self.use_ssl else "http"
        prefix = f"/{self.path_prefix.strip('/')}" if self.path_prefix else ""
        return [f"{scheme}://{host if ':' in host else f'{host}:{self.port}'}{prefix}" for host in self.hosts]

    @property
    def effective_user(self) -> str:
        return self.user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()

    @classmethod
    def from_uri(cls, location: str) -> WebHdfsSettings:
        """Settings for ``webhdfs://host[:port]/...`` (port default 9870)."""
        parsed = urlparse(location)
        if parsed.scheme != "webhdfs" or not parsed.hostname:
            raise ValueError(f"{location!r} does not name a WebHDFS NameNode (webhdfs://host:port/...)")
        return cls(hosts=(parsed.hostname,), port=parsed.port or DEFAULT_PORT, source=f"URI {location}")

    @classmethod
    def from_connection(cls, conn: Any, conn_id: str) -> WebHdfsSettings:
        """Settings from an Airflow connection: host (comma-separated for HA), port, login, password,
        schema, and ``extra`` ``use_ssl``, ``verify``, ``cert``, ``key`` (as the HDFS provider reads
        them), plus ``kerberos``, ``timeout`` and ``connect_timeout`` (seconds)."""
        extra = dict(getattr(conn, "extra_dejson", None) or {})
        hosts = tuple(h.strip() for h in (conn.host or "").split(",") if h.strip())
        if not hosts:
            raise ValueError(f"the Airflow connection {conn_id!r} has no host: set the NameNode host(s)")
        verify: bool | str = extra.get("verify", True)
        if isinstance(verify, str) and verify.lower() in ("true", "false"):
            verify = verify.lower() == "true"
        kerberos = _truthy(extra.get("kerberos")) or _airflow_security_is_kerberos()
        return cls(
            hosts=hosts, port=int(conn.port or DEFAULT_PORT), user=conn.login or None,
            password=conn.password or None, use_ssl=_truthy(extra.get("use_ssl")), verify=verify,
            cert=extra.get("cert"), key=extra.get("key"), path_prefix=conn.schema or None, kerberos=kerberos,
            connect_timeout=float(extra.get("connect_timeout", CONNECT_TIMEOUT)),
            read_timeout=float(extra.get("timeout", READ_TIMEOUT)), source=f"connection {conn_id!r}",
            allow_plain_http=_truthy(extra.get("allow_plain_http")),
            trusted_redirect_hosts=_host_list(extra.get("trusted_redirect_hosts"), conn_id))


class PlainHttpCredentialsError(StorageError, ValueError):
    """A WebHDFS connection with a password but without TLS, and without ``allow_plain_http``: the
    password would cross the network readable by anyone on the path. Nothing was sent. A ``ValueError``
    too: retrying cannot fix a connection."""


def _host_list(value: Any, conn_id: str) -> tuple[str, ...]:
    if value in (None, "", []):
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
        raise ValueError(f"the Airflow connection {conn_id!r}: extra trusted_redirect_hosts must be a list of "
                         f"host or host:port strings (or one comma-separated string), got {value!r}")
    return tuple(i.strip().lower() for i in items if i.strip())


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int | None]:
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    try:
        port = parsed.port
    except ValueError:
        port = -1  # an unparsable port matches nothing
    return scheme, (parsed.hostname or "").lower(), port if port is not None else _DEFAULT_PORTS.get(scheme)


@dataclass(frozen=True)
class CredentialScope:
    """Where the password may go: the NameNodes' own origins (scheme, host, port), plus the trusted
    redirect hosts over TLS (over plain http too when allowed)."""

    origins: frozenset[tuple[str, str, int | None]]
    trusted_hosts: tuple[str, ...] = ()
    allow_plain_http: bool = False

    @classmethod
    def of(cls, settings: WebHdfsSettings) -> CredentialScope:
        return cls(frozenset(_origin(u) for u in settings.urls), settings.trusted_redirect_hosts,
                   settings.allow_plain_http)

    def allows(self, url: str) -> bool:
        scheme, host, port = _origin(url)
        if scheme not in ("https", "http") or (scheme == "http" and not self.allow_plain_http):
            return False
        if (scheme, host, port) in self.origins:
            return True
        return host in self.trusted_hosts or f"{host}:{port}" in self.trusted_hosts


def _scoped_session(user: str, password: str, scope: CredentialScope) -> Any:
    """A requests session whose Basic auth is attached only to URLs ``scope`` allows: the first request
    and every redirect it follows (requests keeps a header on some redirects, e.g. to another port of the
    same host over https, and the DataNode step of ``CREATE`` is a request of its own)."""
    import requests
    from requests.auth import AuthBase, HTTPBasicAuth

    basic = HTTPBasicAuth(user, password)

    class ScopedBasicAuth(AuthBase):
        def __call__(self, request: Any) -> Any:
            if scope.allows(request.url):
                return basic(request)
            request.headers.pop("Authorization", None)
            return request

    class ScopedSession(requests.Session):
        def rebuild_auth(self, prepared_request: Any, response: Any) -> None:
            super().rebuild_auth(prepared_request, response)
            prepared_request.headers.pop("Authorization", None)
            if scope.allows(prepared_request.url):
                prepared_request.prepare_auth(self.auth)

    session = ScopedSession()
    session.auth = ScopedBasicAuth()
    return session


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in ("true", "1", "yes"))


def _airflow_security_is_kerberos() -> bool:
    try:
        from airflow.configuration import conf

        return str(conf.get("core", "security", fallback="")).lower() == "kerberos"
    except Exception:  # noqa: BLE001 - no Airflow configuration: not Kerberos
        return False


def build_client(settings: WebHdfsSettings) -> Any:
    """An HdfsCLI client for ``settings`` (HA URLs joined with ``;``, HdfsCLI's own syntax)."""
    import requests
    from hdfs import InsecureClient

    if settings.password and not settings.use_ssl and not settings.allow_plain_http:
        raise PlainHttpCredentialsError(errno.EACCES, (
            f"{settings.source or 'WebHDFS'}: refusing to send the connection's password to "
            f"{', '.join(settings.urls)} over plain http, where anyone on the network path can read it. Use TLS "
            "(extra use_ssl: true and the NameNode's https port, 9871 by default), remove the password, or - on a "
            "trusted network only - set extra allow_plain_http: true. Nothing was sent"))
    if settings.password and not settings.use_ssl:
        log.warning("%s sends its password over plain http (extra allow_plain_http is set)",
                    settings.source or ", ".join(settings.urls))
    if settings.password:
        session = _scoped_session(settings.effective_user, settings.password, CredentialScope.of(settings))
    else:
        session = requests.Session()
    # The environment's proxy and CA settings are read once here instead of on every request and redirect
    # (requests scans os.environ each time: a quarter of a health poll's CPU in bench/namenode_bench.py).
    url = ";".join(settings.urls)
    session.proxies = {k: v for u in settings.urls for k, v in requests.utils.get_environ_proxies(u).items()}
    session.trust_env = False
    if settings.use_ssl:
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        session.verify = bundle if settings.verify is True and bundle else settings.verify
        if settings.cert:
            session.cert = (settings.cert, settings.key) if settings.key else settings.cert
    timeout = (settings.connect_timeout, settings.read_timeout)
    if settings.kerberos:
        try:
            from hdfs.ext.kerberos import KerberosClient
        except ImportError as exc:
            raise StorageError(errno.ENOSYS, f"{settings.source} asks for Kerberos, but HdfsCLI's Kerberos extension "
                                             "is not installed: pip install 'hdfs[kerberos]' (needs libkrb5-dev)") from exc
        return KerberosClient(url, session=session, timeout=timeout)
    return InsecureClient(url, user=settings.effective_user, session=session, timeout=timeout)


class WebHdfsStorage(RenameCommitStorage):
    """Control files and checkpoints on HDFS through WebHDFS (see the module docstring).

    :param settings: the NameNode(s) and how to reach them.
    :param client: an HdfsCLI client (default: built from ``settings``).
    """

    _log = log

    def __init__(self, settings: WebHdfsSettings, client: Any = None):
        self.settings = settings
        self.client = client if client is not None else build_client(settings)
        self._secret = settings.password

    def describe(self) -> str:
        return f"WebHDFS at {self.namenode}"

    @property
    def namenode(self) -> str:
        urls = self.settings.urls
        return f"the NameNode {urls[0]}" if len(urls) == 1 else f"the NameNodes {', '.join(urls)}"

    # ------------------------------------------------------------------ requests and errors
    def _scrub(self, text: str) -> str:
        text = re.sub(r"\?[^\s'\"<>)]*", "?...", text)  # query strings carry user.name and delegation tokens
        return text.replace(self._secret, "***") if self._secret else text

    def _error(self, doing: str, path: str, code: int, reason: str, hint: str, via: str | None = None) -> StorageError:
        where = f"{path} (through the temporary file {via})" if via else path
        return StorageError(code, f"cannot {doing} {where} on {self.namenode}: {self._scrub(reason)}; {hint}")

    def _call(self, doing: str, path: str, request: Callable[[], Any], absent: bool = False,
              via: str | None = None) -> Any:
        """Run one WebHDFS request; the response, ``None`` for a confirmed absence when ``absent``, or
        :class:`StorageError` naming ``path`` (and the temporary file ``via`` the request was about)."""
        import requests
        from hdfs.util import HdfsError

        try:
            res = request()
            if res.status_code < 300 or res.status_code == 307:
                return res
            exception, message = _remote_exception(res)
        except HdfsError as exc:  # every NameNode standby or unreachable, 401, a reply HdfsCLI could not use
            exception, message = exc.exception, exc.message if isinstance(exc.message, str) else repr(exc.message)
            if exception is None and "Authentication" in message:
                raise self._error(doing, path, errno.EACCES, message, "check the connection's login/password or "
                                  "the Kerberos ticket", via=via) from exc
            code, hint = hint_for([exception or ""], path, self.settings.effective_user)
            raise self._error(doing, path, code, f"{exception or 'error'}: {message}", hint, via=via) from exc
        except requests.exceptions.Timeout as exc:
            limits = f"{self.settings.connect_timeout:g}s to connect, {self.settings.read_timeout:g}s to answer"
            raise self._error(doing, path, errno.ETIMEDOUT, f"no answer in time ({limits}; {type(exc).__name__})", "check the NameNode's health and load (the connection's "
                              "extra 'timeout' raises the limit)", via=via) from exc
        except requests.exceptions.RequestException as exc:
            refused = "refused" in str(exc).lower()
            raise self._error(doing, path, errno.ECONNREFUSED if refused else errno.EHOSTUNREACH,
                              f"{type(exc).__name__}: {exc}", "check that the NameNode's WebHDFS endpoint "
                              "(dfs.namenode.http-address, port 9870 by default) is up and reachable from this host, "
                              f"and the {self.settings.source}", via=via) from exc
        except (KeyError, ValueError, TypeError) as exc:
            raise self._error(doing, path, errno.EPROTO, f"unexpected reply ({type(exc).__name__}: {exc})",
                              "is this address a WebHDFS endpoint?", via=via) from exc
        if absent and res.status_code == 404 and exception == "FileNotFoundException":
            if "is not a file" in message:  # HDFS answers OPEN of a directory with FileNotFoundException
                raise self._error(doing, path, errno.EISDIR, message, "it is a directory, not a file", via=via)
            return None
        if res.status_code == 401:
            raise self._error(doing, path, errno.EACCES, "HTTP 401", "check the connection's login/password or the "
                              "Kerberos ticket (the password goes only to the NameNode's own scheme, host and port: "
                              "list another host that needs it in the extra trusted_redirect_hosts)", via=via)
        code, hint = hint_for([exception or ""], path, self.settings.effective_user)
        if exception is None or res.status_code >= 500:
            hint = f"the NameNode answered HTTP {res.status_code}: check its health and logs"
        raise self._error(doing, path, code, f"HTTP {res.status_code} {exception or ''}: {message}".replace("  ", " "),
                          hint, via=via)

    def _field(self, res: Any, key: str, doing: str, path: str) -> Any:
        """``key`` of a JSON reply; :class:`StorageError` when the reply is not what WebHDFS sends."""
        try:
            return res.json()[key]
        except (ValueError, KeyError, TypeError) as exc:
            raise self._error(doing, path, errno.EPROTO, f"unexpected reply without {key!r} ({type(exc).__name__})",
                              "is this address a WebHDFS endpoint?") from exc

    def _write_new(self, path: str, data: bytes, doing: str, target: str | None = None) -> None:
        """``CREATE overwrite=false`` ``path``: the NameNode's redirect, then the bytes to the DataNode it
        names. Errors name ``target`` (the file ``path`` is a temporary stand-in for), when given."""
        subject, via = (target, path) if target else (path, None)
        res = self._call(doing, subject, lambda: self.client._create(path, overwrite=False, strict=False), via=via)
        location = res.headers.get("location")
        if not location:
            raise self._error(doing, subject, errno.EPROTO, f"HTTP {res.status_code} without a DataNode location",
                              "is this address a WebHDFS endpoint?", via)
        self._call(doing, subject, lambda: self.client._request(method="PUT", url=location, data=data), via=via)

    def _rename(self, src: str, dst: str, overwrite: bool, doing: str) -> None:
        option = "OVERWRITE" if overwrite else "NONE"
        self._call(doing, dst, lambda: self.client._rename(src, destination=dst, renameoptions=option, strict=False))

    def _remove(self, path: str) -> None:
        self._call("delete", path, lambda: self.client._delete(path, recursive=False, strict=False), absent=True)

    # ------------------------------------------------------------------ ControlStorage
    def read_bytes(self, path: str) -> bytes | None:
        import requests

        self._fault("storage.read", path, "read")
        res = self._call("read", path, lambda: self.client._open(path, strict=False), absent=True)
        if res is None:
            return None
        try:
            return bytes(res.content)
        except requests.exceptions.RequestException as exc:
            raise self._error("read", path, errno.EIO, f"the transfer broke off ({type(exc).__name__}: {exc})",
                              "check the DataNodes' health") from exc
        finally:
            res.close()

    def delete(self, path: str) -> bool:
        self._fault("storage.delete", path, "delete")
        try:
            res = self._call("delete", path, lambda: self.client._delete(path, recursive=False, strict=False))
        except StorageError as exc:
            if exc.errno == errno.ENOTEMPTY:
                return False  # a directory is not a file: see delete_tree
            raise
        return bool(self._field(res, "boolean", "delete", path))

    def delete_tree(self, path: str) -> None:
        self._fault("storage.delete", path, "delete")
        self._call("delete", path, lambda: self.client._delete(path, recursive=True, strict=False))

    def exists(self, path: str) -> bool:
        self._fault("storage.exists", path, "check")
        return self._call("check", path, lambda: self.client._get_file_status(path, strict=False), absent=True) \
            is not None

    def _statuses(self, path: str, file_ok: bool = False) -> list[dict[str, Any]]:
        res = self._call("list", path, lambda: self.client._list_status(path, strict=False), absent=True)
        if res is None:
            return []
        statuses = self._field(res, "FileStatuses", "list", path).get("FileStatus") or []
        if len(statuses) == 1 and statuses[0].get("pathSuffix") == "" and statuses[0].get("type") == "FILE":
            if file_ok:
                return []  # the interface's rule: a file has no entries
            raise self._error("list", path, errno.ENOTDIR, "it is a file, not a directory",
                              "check the configured location")
        return statuses

    def list_dir(self, path: str) -> list[str]:
        self._fault("storage.list", path, "list")
        return sorted(s["pathSuffix"] for s in self._statuses(path, file_ok=True))

    def list_tree(self, path: str) -> list[TreeEntry]:
        self._fault("storage.list", path, "list the tree")
        return walk_tree(path, self._entries)

    def _entries(self, path: str) -> list[tuple[str, bool, int]]:
        """``(name, is_dir, size)`` of each entry of the directory ``path`` (one ``LISTSTATUS``)."""
        entries = []
        for status in self._statuses(path):
            is_dir = status.get("type") == "DIRECTORY"
            entries.append((status["pathSuffix"], is_dir, 0 if is_dir else int(status.get("length") or 0)))
        return entries

    def makedirs(self, path: str) -> None:
        self._fault("storage.write", path, "create the directory")
        res = self._call("create the directory", path, lambda: self.client._mkdirs(path, strict=False))
        if not self._field(res, "boolean", "create the directory", path):
            raise self._error("create the directory", path, errno.EIO, "MKDIRS answered false",
                              "check the path and its parents")


def _remote_exception(res: Any) -> tuple[str | None, str]:
    """``(exception, message)`` of a WebHDFS error reply (``(None, body)`` when it is not JSON)."""
    try:
        remote = res.json()["RemoteException"]
        return str(remote.get("exception") or "") or None, str(remote.get("message") or "")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, res.text[:200] if res.text else f"HTTP {res.status_code}"




# --------------------------------------------------------------------------- from a location

_CACHE: dict[tuple[str | None, str], tuple[float, WebHdfsStorage]] = {}
_CACHE_LOCK = threading.Lock()


def settings_for(location: str, conn_id: str | None = None) -> WebHdfsSettings:
    """The WebHDFS settings for an ``hdfs://`` or ``webhdfs://`` location.

    ``conn_id`` given: that Airflow connection. ``None``: a ``webhdfs://host:port`` URI names its
    NameNode itself; any other location (``hdfs://`` is the RPC address, which WebHDFS cannot use)
    needs the connection ``webhdfs_default``.
    """
    parsed = urlparse(location)
    if conn_id is None and parsed.scheme == "webhdfs" and parsed.hostname:
        return WebHdfsSettings.from_uri(location)
    wanted = conn_id or DEFAULT_CONN_ID
    try:
        from airflow.sdk import BaseHook
    except ImportError as exc:
        raise StorageError(errno.ENOSYS, f"{location}: the Airflow side reads HDFS through WebHDFS and needs an "
                                         f"Airflow connection {wanted!r}, but Airflow is not importable here") from exc
    try:
        conn = BaseHook.get_connection(wanted)
    except Exception as exc:  # noqa: BLE001 - AirflowNotFoundException and backend errors alike
        example = ('{"conn_type": "webhdfs", "host": "namenode-host", "port": 9870, "login": "hdfs-user"}')
        why = (f"{location} is an HDFS RPC address; the Airflow side talks WebHDFS (the NameNode's HTTP port, "
               "9870 by default), so it needs" if parsed.scheme == "hdfs" else f"{location} needs")
        raise StorageError(errno.ENOENT, f"{why} the Airflow connection {wanted!r} (type webhdfs), which cannot be "
                                         f"loaded: {type(exc).__name__}: {exc}. Define it, e.g. "
                                         f"AIRFLOW_CONN_{wanted.upper()}='{example}', or set the spec's "
                                         "storage_conn_id") from exc
    try:
        return WebHdfsSettings.from_connection(conn, wanted)
    except (ValueError, TypeError) as exc:
        raise StorageError(errno.EINVAL, f"the Airflow connection {wanted!r} for {location}: {exc}") from exc


def webhdfs_storage(location: str, conn_id: str | None = None) -> ControlStorage:
    """The :class:`WebHdfsStorage` for ``location`` (see :func:`settings_for`), reused for
    ``CLIENT_CACHE_SECONDS`` per connection or NameNode URI (one HTTP session, kept alive)."""
    parsed = urlparse(location)
    key = (conn_id, f"{parsed.scheme}://{parsed.netloc}" if conn_id is None else "")
    now = time.monotonic()
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None and now - hit[0] < CLIENT_CACHE_SECONDS:
            return hit[1]
    storage = WebHdfsStorage(settings_for(location, conn_id))
    with _CACHE_LOCK:
        _CACHE[key] = (now, storage)
    return storage


def clear_cache() -> None:
    """Forget the reused clients (e.g. after a connection changed)."""
    with _CACHE_LOCK:
        _CACHE.clear()


__all__ = ["DEFAULT_CONN_ID", "CredentialScope", "PlainHttpCredentialsError", "WebHdfsSettings", "WebHdfsStorage",
           "build_client", "clear_cache", "settings_for", "webhdfs_storage"]
