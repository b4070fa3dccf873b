"""Named fault points, so that tests can inject a fault into the real code path (failpoints).

Inactive unless the environment variable ``AIRFLOW_STREAMING_FAULTS`` names a JSON file; then every
call of :func:`hit` checks that file (re-read when it changes) for faults of its point. A test writes
the file, the real driver or Airflow task hits the point, the fault happens there. The file holds a
list of faults::

    [{"point": "storage.exists", "match": "/RUNNING", "action": "error", "errno": "EIO"},
     {"point": "runner.after", "match": "STOPPED", "action": "kill"},
     {"point": "driver.batch", "match": "3", "action": "kill_group", "once": "/tmp/k3"}]

- ``point``: the name passed to :func:`hit` (listed in RELIABILITY.md).
- ``match``: a substring that the point's subject (a path, a step, a batch id) must contain.
- ``action``: ``error`` raises ``OSError(errno)`` (``errno`` a name such as ``EIO``, ``ENOSPC``);
  ``kill`` SIGKILLs this process; ``kill_group`` SIGKILLs this process's group (a whole driver);
  ``sleep`` sleeps ``seconds``.
- ``once``: a path; the fault fires only if this call creates it (exclusive create), so it fires
  once across processes and restarts.
- ``until``: an epoch time after which the fault no longer fires.

Nothing here runs when the variable is unset: one look into the dict behind ``os.environ`` per call (~20 ns;
``os.environ.get`` of an absent name costs ~0.7 us - it raises and catches a ``KeyError`` - and a triggerer
watching a thousand streams passes here ~1,000 times a second).
"""

from __future__ import annotations

import errno as errno_names
import json
import logging
import os
import signal
import time
from typing import Any

ENV = "AIRFLOW_STREAMING_FAULTS"
log = logging.getLogger(__name__)

_cache: dict[str, Any] = {"path": None, "mtime": None, "faults": []}


def _faults(path: str) -> list[dict[str, Any]]:
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return []
    if _cache["path"] != path or _cache["mtime"] != mtime:
        try:
            with open(path, encoding="utf-8") as fh:
                faults = json.load(fh)
        except (OSError, ValueError):
            faults = []
        _cache.update(path=path, mtime=mtime, faults=faults if isinstance(faults, list) else [])
    return _cache["faults"]


def _claim(marker: str) -> bool:
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    return True


#: ``ENV`` as a key of the dict behind ``os.environ`` (``None``: that dict is not there to look into).
_ENV_KEY = os.environ.encodekey(ENV) if hasattr(os.environ, "encodekey") else None  # type: ignore[attr-defined]


def _configured() -> str | None:
    """The value of ``ENV`` now. ``os.environ`` keeps its ``_data`` dict in step with every change made through
    it (``monkeypatch.setenv`` included): an absent name is told by one dict lookup, without ``os.environ.get``'s
    raised and caught ``KeyError``."""
    data = getattr(os.environ, "_data", None)
    if _ENV_KEY is not None and isinstance(data, dict) and _ENV_KEY not in data:
        return None
    return os.environ.get(ENV)


def hit(point: str, subject: str = "") -> None:
    """Apply the faults configured for ``point`` whose ``match`` is in ``subject`` (no-op when inactive)."""
    path = _configured()
    if not path:
        return
    for fault in _faults(path):
        if not isinstance(fault, dict) or fault.get("point") != point or str(fault.get("match", "")) not in subject:
            continue
        if fault.get("until") is not None and time.time() > float(fault["until"]):
            continue
        if fault.get("once") and not _claim(str(fault["once"])):
            continue
        action = fault.get("action", "error")
        log.warning("fault injected at %s (%s): %s", point, subject, fault)
        if action == "error":
            code = getattr(errno_names, str(fault.get("errno", "EIO")), errno_names.EIO)
            raise OSError(code, f"{os.strerror(code)} (injected at {point})", subject or None)
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "kill_group":
            os.killpg(os.getpgid(0), signal.SIGKILL)
        if action == "sleep":
            time.sleep(float(fault.get("seconds", 1.0)))
