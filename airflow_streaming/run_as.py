"""Drivers started as another Unix user (a spec's ``run_as_user``): the driver outside the worker's secrets.

A local or client-mode driver runs on the Airflow worker. Started as the worker's own user it can read
everything that user can: the seal key, ``airflow.cfg``, the worker's private temp dirs. With
``run_as_user`` the driver (and the compatibility check's child, which runs the candidate's code) is
started as another user, as Airflow's own ``run_as_user`` impersonation does:

- **how**: an Airflow worker running as root switches with ``setpriv`` (util-linux: the user's uid, gid
  and groups, no new privileges); any other worker with ``sudo -n -E -H -u <user>`` (the sudoers rule
  Airflow's impersonation needs too). :func:`switch_command`.
- **what the driver may not read**: the preflight (:func:`preflight`) refuses to start when that user could
  read the seal key file or ``airflow.cfg`` (computed from their modes, owners and each parent directory),
  naming the file and the fix; and it refuses a Python, ``spark-submit`` or launcher that user cannot run,
  before anything is submitted.
- **what the driver may not write**: the stream's control directory is *shared* with the driver
  (:func:`share_control_dir`): its group becomes the driver's group (a root worker sets it; any other must
  have made it a group both users are in), with the set-group-id bit (new files get that group; the local
  storage then writes them 0640: each side reads the other's files) and the **sticky bit**: a user may
  create files there but may delete or replace only its own. The driver writes its own files
  (``status.json``, ``lease.json``, the standby's and the gate's answers); the Airflow side's files
  (``deployed.json``, ``driver.json``, the lifecycle record and history, the run marker, snapshots) stay
  the worker's: the driver can neither change, replace nor delete them. What it can still do - create a
  name the worker has not written yet - is what any writer of a control file could do before, and the
  seals and proofs of issue 35 treat such a file as data.
- **secrets**: the private properties file is written by the driver's user itself into its own private
  directory, from what the worker pipes to it (:mod:`airflow_streaming.secret_handoff`): nothing of the
  worker's private directories is opened for it.

Plain Python (``pwd``, ``grp``, ``os``): no Airflow import.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from airflow_streaming.exceptions import RunAsUserError

__all__ = ["DRIVER_FILES", "RunAsUserError", "UnixUser", "lookup", "may", "preflight", "share_control_dir",
           "switch_command", "switched_environment", "working_directory"]

#: The control files a driver writes itself (created by it, so owned by it under the sticky bit).
DRIVER_FILES = ("status.json", "lease.json", "standby.json", "standby-gate-report.json", "gate-report.json")

READ, WRITE, RUN = os.R_OK, os.W_OK, os.X_OK


@dataclass(frozen=True)
class UnixUser:
    """A Unix account as the system knows it."""

    name: str
    uid: int
    gid: int
    groups: frozenset[int]
    home: str


def lookup(name: str) -> UnixUser:
    """The account ``name``; :class:`RunAsUserError` if this host has none."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise RunAsUserError(name, "no such user on this host; create it (useradd) on every Airflow worker "
                                   "that may run the stream, or drop run_as_user") from None
    groups = {entry.pw_gid, *(g.gr_gid for g in grp.getgrall() if name in g.gr_mem)}
    if entry.pw_uid == 0:
        raise RunAsUserError(name, "is root: a driver as root can read everything the worker can")
    return UnixUser(name, entry.pw_uid, entry.pw_gid, frozenset(groups), entry.pw_dir)


def _allows(user: UnixUser, st: os.stat_result, want: int) -> bool:
    mode = st.st_mode
    if st.st_uid == user.uid:
        bits = (mode >> 6) & 7
    elif st.st_gid in user.groups:
        bits = (mode >> 3) & 7
    else:
        bits = mode & 7
    return bits & want == want


def may(user: UnixUser, path: str, want: int) -> str | None:
    """Why ``user`` may not ``want`` (``READ``/``WRITE``/``RUN``, or'ed) ``path`` - ``None`` if it may.

    Computed from modes and owners (no ACLs): every directory on the way, for the path as written and as
    its symlinks resolve, must let the user search it, and the file itself must give ``want``."""
    seen: list[str] = []
    for candidate in dict.fromkeys([os.path.abspath(path), os.path.realpath(path)]):
        parts = candidate.split(os.sep)
        for i in range(1, len(parts)):
            directory = os.sep.join(parts[:i]) or os.sep
            try:
                st = os.stat(directory)
            except OSError as exc:
                return f"{directory}: {exc.strerror}"
            if not _allows(user, st, RUN):
                return f"{directory} (mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}) cannot be searched"
        seen.append(candidate)
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not _allows(user, st, want):
        return f"{path} (mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}, group {st.st_gid})"
    return None


def preflight(user: UnixUser, run: Iterable[str] = (), read: Iterable[str] = (), secret: Iterable[str] = ()) -> None:
    """Refuse (:class:`RunAsUserError`, naming the file and the fix) unless ``user`` can run every program in
    ``run`` and read every file in ``read``, and can read none of the ``secret`` files that exist."""
    for path in secret:
        if os.path.exists(path) and may(user, path, READ) is None:
            raise RunAsUserError(user.name, f"could read {path}, which holds the Airflow side's secrets: make it "
                                            "readable by the worker's user only (chmod 600) before a driver runs "
                                            "as this user")
    for path in run:
        why = may(user, path, RUN | READ if not os.path.isdir(path) else RUN)
        if why:
            raise RunAsUserError(user.name, f"cannot run {path}: {why}. Give the driver a Python and Spark it can "
                                            "run (env_vars PYSPARK_PYTHON, spark_runtime) or open them to it")
    for path in read:
        why = may(user, path, READ)
        if why:
            raise RunAsUserError(user.name, f"cannot read {path}: {why}")


def switch_command(user: UnixUser) -> list[str]:
    """The prefix that runs a command as ``user`` with the environment it is given: ``setpriv`` from root,
    ``sudo`` otherwise (``-n``: fail rather than ask for a password)."""
    if os.geteuid() == 0:
        return ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "--no-new-privs", "--"]
    return ["sudo", "-n", "-E", "-H", "-u", user.name, "--"]


def switched_environment(env: Mapping[str, str], user: UnixUser) -> dict[str, str]:
    """``env`` as ``user``'s: its own home, name and a temp dir it may write."""
    return {**env, "HOME": user.home, "USER": user.name, "LOGNAME": user.name}


def share_control_dir(path: str, user: UnixUser) -> None:
    """Let ``user``'s driver write its own files in the stream's control directory ``path`` and nothing of the
    Airflow side's (see the module docstring): group = the driver's (set from root; otherwise it must already be
    a group of both users), mode ``3775`` (set-group-id, sticky). Files the driver writes that an earlier run
    of another user left behind are handed to the driver (root) or removed (the driver writes them anew)."""
    st = os.stat(path)
    if os.geteuid() == 0:
        if st.st_gid != user.gid:
            os.chown(path, -1, user.gid)
    elif st.st_gid not in user.groups or st.st_gid not in os.getgroups():
        raise RunAsUserError(user.name, f"the control directory {path} must belong to a group that both the "
                                        f"worker's user and {user.name} are in (chgrp it); it belongs to gid "
                                        f"{st.st_gid}")
    os.chmod(path, 0o3775)
    for name in DRIVER_FILES:
        own = os.path.join(path, name)
        try:
            fst = os.lstat(own)
        except FileNotFoundError:
            continue
        if fst.st_uid == user.uid:
            continue
        if os.geteuid() == 0 and stat.S_ISREG(fst.st_mode):
            os.chown(own, user.uid, user.gid, follow_symlinks=False)
        else:
            os.unlink(own)


def working_directory(user: UnixUser) -> str:
    """Where a process of ``user`` starts: its home if it can enter it, else ``/`` (the worker's own directory
    may be closed to it; Spark's relative defaults, ``spark-warehouse``, would land there)."""
    return user.home if os.path.isdir(user.home) and may(user, user.home, RUN) is None else "/"
