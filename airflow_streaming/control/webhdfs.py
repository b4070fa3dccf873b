""":class:`ControlStorage` over WebHDFS (HdfsCLI) for the Airflow side of ``hdfs://`` and ``webhdfs://``.

The Airflow side never needs a JVM: it reads and writes control files and reads checkpoints through
the NameNode's WebHDFS REST endpoint with HdfsCLI (``hdfs.InsecureClient``, or ``KerberosClient``
when ``hdfs[kerberos]`` is installed and asked for). The driver does not use this module: it goes
through the JVM's Hadoop FileSystem (``spark_jobs/runtime/hadoop_storage.py``). The settings, the
credentials' scope and the client are :mod:`airflow_streaming.control.webhdfs_connection`; replace and
exclusive create are :mod:`airflow_streaming.control.rename_commit`'s temp file + one rename.

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

The error rule (see :mod:`airflow_streaming.control.storage`): only ``FileNotFoundException`` (404)
is "absent". Connection refused, timeouts (every request has one), 401/403, 5xx, a standby or
safe-mode NameNode, a reply that is not WebHDFS: :class:`StorageError` naming the path, the
NameNode(s) and what to check. Messages never carry a URL's query string (delegation tokens,
``user.name``) nor the connection's password.
"""

from __future__ import annotations

import errno
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from airflow_streaming.control.hdfs_errors import hint_for
from airflow_streaming.control.rename_commit import RenameCommitStorage
from airflow_streaming.control.storage import ControlStorage, StorageError, TreeEntry
from airflow_streaming.control.tree_walk import walk_tree
from airflow_streaming.control.webhdfs_connection import (
    DEFAULT_CONN_ID,
    CredentialScope,
    PlainHttpCredentialsError,
    WebHdfsSettings,
    build_client,
    settings_for,
)

log = logging.getLogger(__name__)

#: Built clients are reused (one HTTP session, keep-alive) for this long, then the connection is read again.
CLIENT_CACHE_SECONDS = 300.0


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


#: The settings' names are :mod:`~airflow_streaming.control.webhdfs_connection`'s, importable here too.
__all__ = ["DEFAULT_CONN_ID", "CredentialScope", "PlainHttpCredentialsError", "WebHdfsSettings", "WebHdfsStorage",
           "build_client", "clear_cache", "settings_for", "webhdfs_storage"]
