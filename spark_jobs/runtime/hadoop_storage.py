"""The driver's control storage on ``hdfs://`` (and any Hadoop-compatible store): the JVM's Hadoop
FileSystem, reached through py4j.

The driver needs neither Airflow nor the ``hdfs`` Python package: whatever file system Spark itself
is configured for (``hdfs://`` RPC with HA nameservices and Kerberos, ``webhdfs://``, ``viewfs://``,
object stores) works for the control files too, with the same ``spark.hadoop.*`` settings.

The lease is taken before the SparkSession exists. In spark-submit's client mode (and in a cluster
driver started by ``PythonRunner``) the JVM is already up and ``PYSPARK_GATEWAY_PORT`` points at it:
``SparkContext._ensure_initialized()`` connects py4j to it without creating a SparkContext, and the
SparkContext created later reuses that gateway. :func:`hadoop_configuration` builds a Hadoop
``Configuration`` and applies the ``spark.hadoop.*`` entries of the driver's SparkConf (spark-submit
hands them to the JVM as ``spark.*`` system properties).

Operations (one private, uncached ``FileSystem.newInstance`` per storage, so that its settings never
leak into the instance Spark's checkpointing uses; the temp-then-rename steps are
:mod:`airflow_streaming.control.rename_commit`'s):

- atomic replace: create a hidden temp ``.<name>.<uuid>.tmp`` beside the target, then
  ``rename(tmp, target, Options.Rename.OVERWRITE)``. On ``hdfs://`` (DistributedFileSystem) and
  ``webhdfs://`` (WebHdfsFileSystem) that is the NameNode's atomic ``rename2(OVERWRITE)``. NOT
  ``FileContext.rename(OVERWRITE)``: for ``webhdfs://`` its ``DelegateToFileSystem`` keeps
  AbstractFileSystem's default, which deletes the target and then renames (a window with no file;
  seen in the stand-in's request log: GETFILELINKSTATUS, DELETE, RENAME NONE).
  File systems without a public three-argument rename fall back to delete + rename (logged once).
- exclusive create: temp, then ``rename(tmp, target, Options.Rename.NONE)``
  (``FileAlreadyExistsException`` if the target exists): exclusive and content-complete.
- read: ``open`` + read fully; exists: ``getFileStatus``; list: ``listStatus``; delete, mkdirs.

Error rule as everywhere: ``java.io.FileNotFoundException`` (and its subclasses) is "absent";
every other Java exception, and a py4j gateway that is gone, raises :class:`StorageError` naming the
path, the file system and what to check.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from airflow_streaming.control.hdfs_errors import hint_for
from airflow_streaming.control.rename_commit import RenameCommitStorage
from airflow_streaming.control.storage import ControlStorage, StorageError, TreeEntry
from airflow_streaming.control.tree_walk import walk_tree

log = logging.getLogger("airflow_streaming.runtime")

#: Hadoop settings of the control storage's own FileSystem instance, unless ``spark.hadoop.*`` sets them:
#: a WebHDFS request that hangs must become an error (the reporter then retries), not block for 60 s.
DEFAULT_HADOOP_SETTINGS = {
    "dfs.webhdfs.socket.connect-timeout": "10s",
    "dfs.webhdfs.socket.read-timeout": "30s",
}
_ABSENT = object()


class _NoRenameWithOptions(Exception):
    """This FileSystem has no public ``rename(Path, Path, Options.Rename...)``."""


def driver_jvm() -> tuple[Any, Any]:
    """``(jvm, gateway)`` of this driver: the spark-submit JVM (``PYSPARK_GATEWAY_PORT``), or a new
    one when the process was not started by spark-submit. Creates no SparkContext."""
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    return SparkContext._jvm, SparkContext._gateway


def hadoop_configuration(jvm: Any, overrides: dict[str, str] | None = None) -> Any:
    """A Hadoop ``Configuration`` with :data:`DEFAULT_HADOOP_SETTINGS`, then the driver SparkConf's
    ``spark.hadoop.*`` entries (prefix removed), then ``overrides``."""
    conf = jvm.org.apache.hadoop.conf.Configuration()
    for key, value in DEFAULT_HADOOP_SETTINGS.items():
        conf.set(key, value)
    for entry in jvm.org.apache.spark.SparkConf(True).getAll():
        key = str(entry._1())
        if key.startswith("spark.hadoop."):
            conf.set(key[len("spark.hadoop."):], str(entry._2()))
    for key, value in (overrides or {}).items():
        conf.set(key, value)
    return conf


class HadoopFsStorage(RenameCommitStorage):
    """Control files through the JVM's Hadoop FileSystem (see the module docstring; replace and exclusive
    create are :class:`~airflow_streaming.control.rename_commit.RenameCommitStorage`'s temp file + rename).

    :param fs_uri: the file system, ``scheme://authority`` (``hdfs://nameservice1``, ``webhdfs://nn:9870``).
    :param jvm: the py4j JVM view (default: :func:`driver_jvm`).
    :param gateway: the py4j gateway (for Java arrays; default: the driver's).
    :param conf: a Hadoop ``Configuration`` (default: :func:`hadoop_configuration`).
    """

    _log = log

    def __init__(self, fs_uri: str, jvm: Any = None, gateway: Any = None, conf: Any = None):
        if jvm is None or gateway is None:
            jvm, gateway = driver_jvm()
        self.fs_uri = fs_uri.rstrip("/")
        self.jvm, self.gateway = jvm, gateway
        self.conf = conf if conf is not None else hadoop_configuration(jvm)
        uri = jvm.java.net.URI.create(self.fs_uri + "/")
        self.fs = self._java("connect to", self.fs_uri, lambda: jvm.org.apache.hadoop.fs.FileSystem.newInstance(
            uri, self.conf))
        self.user = str(jvm.org.apache.hadoop.security.UserGroupInformation.getCurrentUser().getShortUserName())
        rename = jvm.org.apache.hadoop.fs.Options.Rename
        self._overwrite, self._none = self._options(rename.OVERWRITE), self._options(rename.NONE)
        self._three_arg_rename = True

    def _options(self, option: Any) -> Any:
        array = self.gateway.new_array(self.jvm.org.apache.hadoop.fs.Options.Rename, 1)
        array[0] = option
        return array

    def describe(self) -> str:
        return f"the Hadoop file system {self.fs_uri} ({self.fs.getClass().getSimpleName()})"

    def close(self) -> None:
        """Close this storage's private FileSystem instance (never raises)."""
        try:
            self.fs.close()
        except Exception:  # noqa: BLE001 - shutdown path
            log.debug("closing %s failed", self.fs_uri, exc_info=True)

    # ------------------------------------------------------------------ Java calls and errors
    def _path(self, path: str) -> Any:
        return self.jvm.org.apache.hadoop.fs.Path(self.fs_uri + path)

    def _names(self, jexc: Any) -> list[str]:
        """Simple class names of a Java exception, most specific first (a RemoteException unwrapped)."""
        names = []
        cls = jexc.getClass()
        while cls is not None and len(names) < 12:
            names.append(str(cls.getSimpleName()))
            cls = cls.getSuperclass()
        return names

    def _java(self, doing: str, path: str, call: Callable[[], Any], absent: bool = False, via: str | None = None) -> Any:
        """Run ``call``; its result, ``_ABSENT`` for a FileNotFoundException when ``absent``, or
        :class:`StorageError`."""
        from py4j.protocol import Py4JError, Py4JJavaError

        where = f"{path} (through the temporary file {via})" if via else path
        try:
            return call()
        except Py4JJavaError as exc:
            jexc = exc.java_exception
            if "RemoteException" in self._names(jexc):
                jexc = jexc.unwrapRemoteException()
            names = self._names(jexc)
            message = str(jexc.getMessage() or "").splitlines()[0] if jexc.getMessage() else ""
            if absent and "FileNotFoundException" in names:
                if "is not a file" in message:
                    raise StorageError(errno.EISDIR, f"cannot {doing} {where} on {self.fs_uri}: {message}; it is a "
                                                     "directory, not a file") from None
                return _ABSENT
            code, hint = hint_for(names, path, self.user)
            raise StorageError(code, f"cannot {doing} {where} on {self.fs_uri}: {names[0]}: {message}; {hint}") from None
        except Py4JError as exc:
            raise StorageError(errno.EIO, f"cannot {doing} {where} on {self.fs_uri}: the driver's JVM is not "
                                          f"reachable through py4j ({type(exc).__name__}: {exc}); is the driver "
                                          "shutting down?") from None

    def _write_new(self, path: str, data: bytes, doing: str, target: str | None = None) -> None:
        """Create ``path`` (not overwriting) and write ``data``; errors name ``target`` when given."""
        subject, via = (target, path) if target else (path, None)

        def write() -> None:
            out = self.fs.create(self._path(path), False)
            try:
                out.write(bytearray(data))
            finally:
                out.close()

        self._java(doing, subject, write, via=via)

    def _rename(self, src: str, dst: str, overwrite: bool, doing: str) -> None:
        """``rename(src, dst, OVERWRITE or NONE)``; delete + plain rename where that method is not public."""
        if self._three_arg_rename:
            try:
                self._java(doing, dst, lambda: self._rename_with_options(src, dst, overwrite))
                return
            except _NoRenameWithOptions:
                log.warning("%s has no public rename with options: replacing a file there is delete + rename "
                            "(not atomic)", self.describe())
                self._three_arg_rename = False
        if overwrite:
            self._java(doing, dst, lambda: self.fs.delete(self._path(dst), False))
        if not self._java(doing, dst, lambda: self.fs.rename(self._path(src), self._path(dst))):
            exists = self.exists(dst)
            raise StorageError(errno.EEXIST if exists else errno.EIO,
                               f"cannot {doing} {dst} on {self.fs_uri}: rename from {src} answered false"
                               f"{' (the target exists)' if exists else ''}")

    def _rename_with_options(self, src: str, dst: str, overwrite: bool) -> None:
        from py4j.protocol import Py4JError, Py4JJavaError

        try:
            self.fs.rename(self._path(src), self._path(dst), self._overwrite if overwrite else self._none)
        except Py4JJavaError:
            raise
        except Py4JError as exc:
            if "does not exist" in str(exc):  # protected in FileSystem, public only where a store overrides it
                raise _NoRenameWithOptions(str(exc)) from exc
            raise

    def _remove(self, path: str) -> None:
        self._java("delete", path, lambda: self.fs.delete(self._path(path), False), absent=True)

    # ------------------------------------------------------------------ ControlStorage
    def read_bytes(self, path: str) -> bytes | None:
        self._fault("storage.read", path, "read")

        def read() -> bytes:
            stream = self.fs.open(self._path(path))
            try:
                return bytes(self.jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
            finally:
                stream.close()

        data = self._java("read", path, read, absent=True)
        return None if data is _ABSENT else data

    def delete(self, path: str) -> bool:
        self._fault("storage.delete", path, "delete")
        try:
            return bool(self._java("delete", path, lambda: self.fs.delete(self._path(path), False)))
        except StorageError as exc:
            if exc.errno == errno.ENOTEMPTY or "is non empty" in str(exc):
                return False  # a directory is not a file: see delete_tree
            raise

    def delete_tree(self, path: str) -> None:
        self._fault("storage.delete", path, "delete")
        self._java("delete", path, lambda: self.fs.delete(self._path(path), True))

    def exists(self, path: str) -> bool:
        self._fault("storage.exists", path, "check")
        return self._java("check", path, lambda: self.fs.getFileStatus(self._path(path)), absent=True) is not _ABSENT

    def _statuses(self, path: str) -> list[tuple[str, bool, int]]:
        def listing() -> list[tuple[str, bool, int]]:
            out = []
            for status in self.fs.listStatus(self._path(path)):
                name = str(status.getPath().getName())
                is_dir = bool(status.isDirectory())
                if not is_dir and urlparse(str(status.getPath().toUri())).path.rstrip("/") == path.rstrip("/"):
                    raise StorageError(errno.ENOTDIR, f"cannot list {path} on {self.fs_uri}: it is a file, not a "
                                                      "directory; check the configured location")
                out.append((name, is_dir, 0 if is_dir else int(status.getLen())))
            return out

        result = self._java("list", path, listing, absent=True)
        return [] if result is _ABSENT else result

    def list_dir(self, path: str) -> list[str]:
        self._fault("storage.list", path, "list")
        return sorted(name for name, _, _ in self._statuses(path))

    def list_tree(self, path: str) -> list[TreeEntry]:
        self._fault("storage.list", path, "list the tree")
        return walk_tree(path, self._statuses)

    def makedirs(self, path: str) -> None:
        self._fault("storage.write", path, "create the directory")
        if not self._java("create the directory", path, lambda: self.fs.mkdirs(self._path(path))):
            raise StorageError(errno.EIO, f"cannot create the directory {path} on {self.fs_uri}: mkdirs answered "
                                          "false; check the path and its parents")


def driver_storage(location: str) -> tuple[ControlStorage, str]:
    """The driver's storage for a control location and the path inside it: local paths and ``file://``
    use :class:`~airflow_streaming.control.local.LocalStorage` (no JVM needed); every other scheme
    (``hdfs://``, ``webhdfs://``, any Hadoop-compatible store) the JVM's Hadoop FileSystem."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        from airflow_streaming.control.locations import storage_for

        return storage_for(location)
    if not parsed.path.startswith("/"):
        raise StorageError(errno.EINVAL, f"{location!r}: a control location needs an absolute path")
    return HadoopFsStorage(f"{parsed.scheme}://{parsed.netloc}"), os.path.normpath(parsed.path)


__all__ = ["DEFAULT_HADOOP_SETTINGS", "HadoopFsStorage", "driver_jvm", "driver_storage", "hadoop_configuration"]
