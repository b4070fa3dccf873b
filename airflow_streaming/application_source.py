"""Where a user script comes from: a path on a host, or a URI Spark fetches (``application``).

A stream's ``application`` that is not a bundled job is one of:

- an absolute path (``/abs/job.py``) or a ``file:`` URI (``file:/abs/job.py``, ``file:///abs/job.py``): a file
  on the submitting host (a cluster target ships it);
- a ``local:`` URI (``local:/abs/job.py``): a file already on the host where the driver runs (nothing ships it);
- a URI Spark fetches (``hdfs://``, ``s3a://``, ``gs://``, ``https://``...): it travels as a ``files`` entry
  (spark-submit's ``--files`` / the Spark conf ``spark.files``), so the driver's SparkContext fetches it when
  it starts (``SparkContext.addFile`` fetches into the driver's ``SparkFiles`` directory too, in every mode)
  and the driver runs that copy (:func:`script_file`).

Plain Python (standard library only; pyspark imported inside :func:`script_file`): imported by the Spark
driver and by the Airflow side.
"""

from __future__ import annotations

import os
import posixpath
import re

__all__ = ["checked_if_local", "driver_argument", "is_fetched", "local_path", "script_file"]

_SCHEME_RE = re.compile(r"^([a-z][a-z0-9+.-]*):")
#: Schemes that name a file on a host rather than one Spark fetches.
_ON_A_HOST = ("local", "file")


def _scheme(app: str) -> str | None:
    match = _SCHEME_RE.match(app)
    return match.group(1) if match else None


def is_fetched(app: str) -> bool:
    """Whether ``app`` is a URI Spark fetches (a scheme other than ``local:`` / ``file:``)."""
    scheme = _scheme(app)
    return scheme is not None and scheme not in _ON_A_HOST


def local_path(app: str) -> str:
    """The path of an application on a host: ``file:`` / ``local:`` stripped (``file:///x`` and ``file:/x``
    both give ``/x``); a plain path unchanged. A fetched URI has none: :class:`ValueError`."""
    if is_fetched(app):
        raise ValueError(f"{app!r} is a URI Spark fetches, not a path on a host")
    scheme = _scheme(app)
    if scheme is None:
        return app
    rest = app[len(scheme) + 1:]
    if rest.startswith("//"):  # file:///x (an empty authority) or file://localhost/x
        rest = rest[2:]
        rest = rest[rest.index("/"):] if "/" in rest else "/"
    return rest


def driver_argument(app: str) -> str:
    """What the driver is told with ``--script``: a fetched URI as it is (the driver runs its fetched copy),
    ``local:/p`` as it is (a file on the driver's host: a target must not ship it; the driver strips the
    scheme), a submitting host's file (``/p``, ``file:/p``) as its path ``/p`` (a cluster target ships it)."""
    if is_fetched(app) or _scheme(app) == "local":
        return app
    return local_path(app)


def script_file(app: str) -> str:
    """The file the driver runs for ``--script app``. A fetched URI: its copy in the driver's ``SparkFiles``
    directory (call once the SparkContext exists); :class:`FileNotFoundError` naming the URI if it was not
    fetched. A path (``local:`` / ``file:`` stripped): the path, :class:`FileNotFoundError` if no such file."""
    if not is_fetched(app):
        path = local_path(app)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"application script {path} does not exist")
        return path
    from pyspark import SparkFiles

    name = posixpath.basename(app)
    try:
        path = SparkFiles.get(name)
    except Exception as exc:  # noqa: BLE001 - no SparkContext (no SparkFiles root): the URI was not fetched
        raise FileNotFoundError(f"application script {app} was not fetched (no SparkContext to fetch it through "
                                f"spark.files: {exc})") from exc
    if not os.path.isfile(path):
        raise FileNotFoundError(f"application script {app} was not fetched: {path} does not exist in the driver's "
                                "SparkFiles directory; it should have been fetched through spark.files "
                                "(spark-submit's --files) when the driver's SparkContext started")
    return path


def checked_if_local(app: str) -> str:
    """Before the driver's SparkContext exists: a file on this host as :func:`script_file` gives it (checked
    now, before a session is started for nothing), a fetched URI unchanged (:func:`script_file` once the
    SparkContext has fetched it)."""
    return app if is_fetched(app) else script_file(app)
