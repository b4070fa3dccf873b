"""Where a stream's files live: validating and normalising a location (plain Python, no I/O).

A location is an absolute path or a ``file://``, ``hdfs://`` or ``webhdfs://`` URI. Two spellings of one
place must compare equal, or a check that keeps a checkpoint out of a control directory (whose
snapshots are pruned) would let ``hdfs://nn:8020/ctl/x`` sit inside ``hdfs://nn/ctl``. So locations are
compared normalised (:func:`_check_location`) and :func:`locations_overlap` says whether two overlap.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

from airflow_streaming.exceptions import SpecError

__all__ = ["DEFAULT_PORTS", "SUPPORTED_SCHEMES", "is_local_location", "locations_overlap"]

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
SUPPORTED_SCHEMES = ("file", "hdfs", "webhdfs")
_SUPPORTED_SCHEMES = SUPPORTED_SCHEMES


def _check_str(value: Any, field: str) -> str:
    """Require a non-empty string without surrounding whitespace (the spec's rule for every string); return it."""
    if not isinstance(value, str):
        raise SpecError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        raise SpecError(field, "must be non-empty")
    if value != value.strip():
        raise SpecError(field, f"must not have leading or trailing whitespace, got {value!r}")
    return value


#: The port a location means when it names none: the NameNode's RPC port for ``hdfs://`` and its HTTP
#: (WebHDFS) port for ``webhdfs://`` (Hadoop's defaults), so ``hdfs://nn/x`` is ``hdfs://nn:8020/x``.
DEFAULT_PORTS = {"hdfs": 8020, "webhdfs": 9870}


def _check_location(value: Any, field: str) -> tuple[str, str, tuple[str, ...]]:
    """Validate a location; return it normalised: ``(scheme, host[:port], path segments)``.

    Normalised as the file system resolves it, so that two spellings of one place compare equal: the
    scheme and host in lower case, the scheme's default port filled in (``hdfs`` 8020, ``webhdfs``
    9870), a URI's path percent-decoded (``%2F`` is a ``/``, as Hadoop's ``Path`` decodes it), empty and
    ``.`` segments and trailing slashes dropped; ``..`` (also encoded) is refused."""
    _check_str(value, field)
    bad = (
        f"must be an absolute path or a file://, hdfs:// or webhdfs:// URI, got {value!r}"
    )
    match = _SCHEME_RE.match(value)
    if match:
        scheme = match.group(1).lower()
        if scheme not in _SUPPORTED_SCHEMES:
            raise SpecError(field, f"unsupported scheme {match.group(1)!r} ({bad})")
        if "?" in value or "#" in value:
            raise SpecError(field, f"must not contain a query or fragment, got {value!r}")
        rest = value[match.end():]
        host, slash, path = rest.partition("/")
        if not slash:
            raise SpecError(field, bad)
        path = unquote("/" + path)
        host = host.lower()
        if scheme == "file":
            if host not in ("", "localhost"):
                raise SpecError(
                    field,
                    f"file:// URI must have an empty host (file:///abs/path), got {value!r}",
                )
            host = ""
        elif host:
            name, colon, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
            if colon and not port.isdigit():
                raise SpecError(field, f"the port of {value!r} must be a number, got {port!r}")
            if "@" in host:
                raise SpecError(field, f"must not carry user info (user@host), got {value!r}")
            host = f"{name}:{int(port)}" if colon else f"{host}:{DEFAULT_PORTS[scheme]}"
    elif value.startswith("/"):
        scheme, host, path = "file", "", value
    else:
        raise SpecError(field, bad)
    segments = path.split("/")
    if ".." in segments:
        raise SpecError(field, f"must not contain '..' segments, got {value!r}")
    return scheme, host, tuple(s for s in segments if s not in ("", "."))


def _same_file_system(a: tuple[str, str, tuple[str, ...]], b: tuple[str, str, tuple[str, ...]]) -> bool:
    """Whether two normalised locations may name the same file system: the same scheme, host and port;
    or ``hdfs://`` and ``webhdfs://`` on one host (the RPC and the HTTP door of one NameNode: their ports
    differ by design, so only the host can be compared)."""
    if a[0] == b[0]:
        return a[1] == b[1]
    if {a[0], b[0]} == {"hdfs", "webhdfs"}:
        return a[1].rpartition(":")[0] == b[1].rpartition(":")[0]
    return False


def locations_overlap(a: str, b: str) -> bool:
    """True if two locations are equal or one is nested in the other, compared normalised (see
    :func:`_check_location`): ``hdfs://nn:8020/ctl/x`` is inside ``hdfs://nn/ctl``. Raises
    :class:`SpecError` for an invalid location."""
    la, lb = _check_location(a, "a"), _check_location(b, "b")
    pa, pb = la[2], lb[2]
    return _same_file_system(la, lb) and (pa[: len(pb)] == pb or pb[: len(pa)] == pa)


def is_local_location(value: str) -> bool:
    """Whether a (valid) location is on this host's file system: an absolute path or a ``file://`` URI."""
    return _check_location(value, "location")[0] == "file"
