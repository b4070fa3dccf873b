"""What HDFS's exceptions mean for a control-file operation: an errno and what to check.

Shared by the Airflow side's WebHDFS backend (the exception's simple name from a ``RemoteException``
reply) and the driver's Hadoop FileSystem backend (the Java exception's class hierarchy). Plain
Python, no imports beyond the standard library.
"""

from __future__ import annotations

import errno

GENERIC_HINT = "check the NameNode's health and logs"

#: Simple Java exception name -> (errno, what to check). ``{path}`` and ``{user}`` are filled in.
HINTS: dict[str, tuple[int, str]] = {
    "AccessControlException": (errno.EACCES, "check the HDFS permissions of {path} and its parents for user {user}"),
    "AuthorizationException": (errno.EACCES, "check the HDFS permissions of {path} for user {user}"),
    "SecurityException": (errno.EACCES, "check the HDFS permissions of {path} for user {user}"),
    "SafeModeException": (errno.EROFS, "the NameNode is in safe mode (read-only): wait until it leaves it"),
    "StandbyException": (errno.EHOSTUNREACH, "no configured NameNode is active: check HA failover and the "
                                             "configured NameNode list"),
    "RetriableException": (errno.EAGAIN, "the NameNode asked to retry later (starting up or overloaded)"),
    "FileAlreadyExistsException": (errno.EEXIST, "the path already exists"),
    "ParentNotDirectoryException": (errno.ENOTDIR, "a parent of this path is a file: check the configured location"),
    "PathIsNotEmptyDirectoryException": (errno.ENOTEMPTY, "it is a non-empty directory"),
    "FileNotFoundException": (errno.ENOENT, "it, or a parent directory, does not exist (or vanished meanwhile)"),
    "DSQuotaExceededException": (errno.EDQUOT, "an HDFS space quota is exceeded: free space or raise the quota"),
    "NSQuotaExceededException": (errno.EDQUOT, "an HDFS name quota is exceeded: remove files or raise the quota"),
    "ConnectException": (errno.ECONNREFUSED, "check that the NameNode is up and reachable from this host"),
    "NoRouteToHostException": (errno.EHOSTUNREACH, "check the network route to the NameNode"),
    "UnknownHostException": (errno.EHOSTUNREACH, "check the NameNode host name (or the HA nameservice config)"),
    "SocketTimeoutException": (errno.ETIMEDOUT, "the NameNode did not answer in time: check its health and load"),
    "ConnectTimeoutException": (errno.ETIMEDOUT, "the NameNode did not answer in time: check its health and load"),
}


def hint_for(names: list[str], path: str, user: str) -> tuple[int, str]:
    """``(errno, hint)`` for the first of ``names`` (simple exception names, most specific first) that
    is known; ``(EIO, generic hint)`` otherwise."""
    for name in names:
        if name in HINTS:
            code, hint = HINTS[name]
            return code, hint.format(path=path, user=user)
    return errno.EIO, GENERIC_HINT
