"""Which Spark a stream version runs on: its ``spark_runtime``, checked and resolved on the submitting host.

A stream version may name its Spark runtime (``StreamSpec.spark_runtime``):

- nothing (the default): the PySpark installed beside this provider (its ``spark-submit`` and this Python);
- a PySpark release, ``"3.5.7"`` (or ``{"version": "3.5.7"}``): the installed PySpark when it is that
  release, else a runtime environment this host builds once and caches - a venv holding
  ``pyspark==<version>``, installed from the package index this host's pip is configured with - under
  ``$AIRFLOW_STREAMING_RUNTIMES`` (default ``~/.cache/airflow-streaming/runtimes/pyspark-<version>``);
- an existing installation, ``{"spark_home": "/opt/spark-3.5.7", "python": "/usr/bin/python3.11"}``:
  a Spark distribution (or a pip-installed pyspark directory) and the Python its drivers run.

Resolving gives a :class:`ResolvedRuntime`: the ``spark-submit`` to run, the ``SPARK_HOME`` to set, the
driver's Python and the release it is. A runtime that cannot be had is a :class:`RuntimeUnavailableError`
that says what to install - raised before anything is stopped or submitted.

A build is safe against a second builder (an exclusive lock per release) and against a crash half-way
(the venv is built under a temporary name and renamed when complete, with a marker file written last), so
a half-built runtime is never used.

Pure: no Airflow import (the UI, the hooks and the gate's runner call it).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from airflow_streaming.exceptions import StreamingError
from airflow_streaming.redaction import redact_text
from airflow_streaming.spark_lines import MIN_SPARK_LINE as MIN_LINE
from airflow_streaming.spark_lines import check_runtime, line_of

__all__ = [
    "MIN_LINE", "ResolvedRuntime", "RuntimeUnavailableError", "check_runtime", "describe", "installed_version",
    "line_of", "resolve_runtime", "runtimes_dir", "without_class_archive",
]

_MARKER = ".airflow-streaming-runtime.json"
_FIELD = "spark_runtime"


class RuntimeUnavailableError(StreamingError):
    """The Spark runtime a stream version names cannot be had on this host (the message says what to install)."""


@dataclasses.dataclass(frozen=True)
class ResolvedRuntime:
    """A Spark runtime on this host."""

    version: str
    """The Spark release (``3.5.7``)."""
    spark_home: str
    """``SPARK_HOME`` of its drivers (the distribution, or the pip-installed ``pyspark`` directory)."""
    spark_submit: str
    """Absolute path of its ``spark-submit``."""
    python: str
    """The Python its drivers (and the gate's child) run."""
    source: str
    """``installed`` (this provider's own PySpark), ``cache`` (built earlier), ``built`` (just now) or ``spark_home``."""

    @property
    def line(self) -> tuple[int, int]:
        return line_of(self.version)

    def environment(self) -> dict[str, str]:
        """What a driver's (or the gate child's) environment needs to run on this runtime."""
        return {"SPARK_HOME": self.spark_home, "PYSPARK_PYTHON": self.python, "PYSPARK_DRIVER_PYTHON": self.python}


def without_class_archive(options: str) -> str:
    """JVM options without a class-data-sharing archive (``-XX:SharedArchiveFile``, ``-Xshare``): an archive
    holds the installed PySpark's classes (``airflow_streaming.class_archive``), which another Spark's JVM
    cannot map - it would say so on stdout, which the gate's JSON answer shares."""
    return " ".join(o for o in options.split() if not o.startswith(("-XX:SharedArchiveFile", "-Xshare")))


def describe(runtime: Any) -> str:
    """One line for logs, the history and the UI: ``Spark 3.5.7``, ``Spark at /opt/spark`` or the installed one
    (``Spark 4.2.0 (installed)``). Never raises: it also describes what a stored file holds."""
    if not runtime:
        found = installed_version()
        return f"Spark {found} (installed)" if found else "the installed Spark"
    if isinstance(runtime, Mapping) and isinstance(runtime.get("version"), str):
        return f"Spark {runtime['version']}"
    if isinstance(runtime, Mapping) and isinstance(runtime.get("spark_home"), str):
        return f"Spark at {runtime['spark_home']}"
    return "an unreadable Spark runtime"


def installed_version() -> str | None:
    """The release of the PySpark installed beside this provider, or ``None``."""
    for dist in ("pyspark", "pyspark-client"):
        try:
            return package_version(dist)
        except PackageNotFoundError:
            continue
    return None


def runtimes_dir() -> Path:
    """Where built runtimes are cached: ``$AIRFLOW_STREAMING_RUNTIMES``, else ``$XDG_CACHE_HOME`` (or
    ``~/.cache``) ``/airflow-streaming/runtimes``."""
    configured = os.environ.get("AIRFLOW_STREAMING_RUNTIMES")
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "airflow-streaming" / "runtimes"


def resolve_runtime(runtime: Mapping[str, str] | None, *, build: bool = True, cache: Path | None = None,
                    timeout: float = 1800.0) -> ResolvedRuntime | None:
    """The runtime a stream version runs on; ``None`` for this provider's own PySpark (no runtime named, or
    the named release is the installed one). ``build=False`` never installs anything (it only looks)."""
    runtime = check_runtime(runtime)
    if runtime is None:
        return None
    if "spark_home" in runtime:
        return _existing(runtime["spark_home"], runtime["python"])
    release = runtime["version"]
    if installed_version() == release and _installed_spark_submit() is not None:
        return None
    folder = (cache or runtimes_dir()) / f"pyspark-{release}"
    found = _cached(folder, release)
    if found is not None:
        return found
    if not build:
        raise RuntimeUnavailableError(f"Spark {release} is not installed on this host ({folder} holds no complete "
                                      f"runtime); {_install_hint(folder, release)}")
    return _build(folder, release, timeout)


def _installed_spark_submit() -> str | None:
    found = shutil.which("spark-submit") or shutil.which("spark-submit", path=os.path.dirname(sys.executable))
    return found


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _spark_version_of(home: Path) -> str | None:
    """The release of a Spark installation: its ``RELEASE`` file, else the spark-core jar's name."""
    release = home / "RELEASE"
    if release.is_file():
        match = re.search(r"Spark (\d+\.\d+\.\d+)", release.read_text(errors="replace"))
        if match:
            return match.group(1)
    for jar in sorted((home / "jars").glob("spark-core_*.jar")):
        match = re.search(r"spark-core_[\d.]+-(\d+\.\d+\.\d+)", jar.name)
        if match:
            return match.group(1)
    return None


def _existing(spark_home: str, python: str) -> ResolvedRuntime:
    home = Path(spark_home)
    submit = home / "bin" / "spark-submit"
    if not submit.is_file() or not os.access(submit, os.X_OK):
        raise RuntimeUnavailableError(f"{_FIELD}.spark_home {spark_home} has no executable bin/spark-submit: name a "
                                      "Spark distribution (or a pip-installed pyspark directory)")
    if not os.path.isfile(python) or not os.access(python, os.X_OK):
        raise RuntimeUnavailableError(f"{_FIELD}.python {python} is not an executable file")
    found = _spark_version_of(home)
    if found is None:
        raise RuntimeUnavailableError(f"cannot tell which Spark {spark_home} is (no RELEASE file, no "
                                      "jars/spark-core_*.jar)")
    if line_of(found) < MIN_LINE:
        raise RuntimeUnavailableError(f"{spark_home} is Spark {found}, older than the oldest supported line "
                                      f"{MIN_LINE[0]}.{MIN_LINE[1]}")
    return ResolvedRuntime(found, str(home), str(submit), python, "spark_home")


def _not_ours(folder: Path, home: Path, python: Path, submit: Path) -> str | None:
    """Why the cached runtime in ``folder`` cannot be trusted to be the one this host built (``None``: it
    can): a part that is a symbolic link (but the venv's ``bin/python``, whose target is checked), owned by
    another user than this one or root, or writable by group or others - someone else could have changed
    the Spark (and the Python) that drivers run on."""
    uid = os.getuid()
    parts = [folder.parent, folder, folder / _MARKER, folder / "bin", home.parent, home, home / "bin", submit,
             home / "jars", python]
    for part in parts:
        try:
            info = part.stat() if part == python else part.lstat()
        except OSError:
            continue  # absent: the completeness check says so
        if part != python and stat.S_ISLNK(info.st_mode):
            return f"{part} is a symbolic link"
        if info.st_uid not in (uid, 0):
            return f"{part} is owned by uid {info.st_uid}, not by this user (uid {uid}) or root"
        if info.st_mode & 0o022 and not (part == folder.parent and info.st_mode & stat.S_ISVTX):
            return f"{part} is writable by {'group and others' if info.st_mode & 0o002 else 'its group'}"
    return None


def _cached(folder: Path, release: str, source: str = "cache") -> ResolvedRuntime | None:
    """The runtime in ``folder`` when it is complete (its marker names ``release``), else ``None``;
    :class:`RuntimeUnavailableError` when it is there but not this user's own (:func:`_not_ours`)."""
    try:
        marker = json.loads((folder / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    home = _site_packages(folder) / "pyspark"
    python = folder / "bin" / "python"
    submit = home / "bin" / "spark-submit"
    why = _not_ours(folder, home, python, submit)
    if why is not None:
        raise RuntimeUnavailableError(f"the cached Spark {release} runtime in {folder} is not used: {why}; remove "
                                      f"it (or fix its owner and mode) and it is built again, or name an existing "
                                      "installation with spark_runtime: {spark_home: ..., python: ...}")
    if (not isinstance(marker, dict) or marker.get("version") != release or not python.exists()
            or not submit.is_file() or _spark_version_of(home) != release):
        return None
    return ResolvedRuntime(release, str(home), str(submit), str(python), source)


def _install_hint(folder: Path, release: str) -> str:
    return (f"install it there (python3 -m venv {folder} && {folder}/bin/pip install pyspark=={release} && "
            f"echo '{{\"version\": \"{release}\"}}' > {folder}/{_MARKER}), or name an existing installation "
            f"with {_FIELD}: {{spark_home: ..., python: ...}}")


def _build(folder: Path, release: str, timeout: float) -> ResolvedRuntime:
    """Build the runtime of ``release`` in ``folder`` (see the module docstring), or wait for another builder."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".pyspark-{release}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second builder waits here, then finds the runtime complete
        found = _cached(folder, release)
        if found is not None:
            return found
        if folder.exists():  # incomplete (no marker): an earlier build was cut; never use it
            shutil.rmtree(folder, ignore_errors=True)
        for stale in folder.parent.glob(f".pyspark-{release}.building-*"):  # a builder killed mid-way (we hold
            shutil.rmtree(stale, ignore_errors=True)                      # the lock: nobody else builds it)
        staging = folder.parent / f".pyspark-{release}.building-{os.getpid()}"
        started = time.monotonic()
        base = getattr(sys, "_base_executable", None) or sys.executable
        steps = [[base, "-m", "venv", str(staging)],
                 [str(staging / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                  f"pyspark=={release}"]]
        for argv in steps:
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as exc:
                shutil.rmtree(staging, ignore_errors=True)
                raise RuntimeUnavailableError(f"could not build the Spark {release} runtime ({' '.join(argv[:4])}: "
                                              f"{exc}); {_install_hint(folder, release)}") from None
            if done.returncode != 0:
                shutil.rmtree(staging, ignore_errors=True)
                # pip may name the index it asked; a URL's password (a private index) never reaches a log
                why = redact_text(" ".join((done.stderr or done.stdout).strip().splitlines()[-3:]))
                raise RuntimeUnavailableError(f"could not build the Spark {release} runtime: {' '.join(argv[:3])} "
                                              f"... failed: {why}; {_install_hint(folder, release)}")
        (staging / _MARKER).write_text(json.dumps({"version": release, "seconds": round(time.monotonic() - started, 1),
                                                   "python": base}))
        os.replace(staging, folder)
        found = _cached(folder, release, "built")
        if found is None:
            raise RuntimeUnavailableError(f"the Spark {release} runtime built in {folder} is not usable (no "
                                          f"pyspark {release} with bin/spark-submit); {_install_hint(folder, release)}")
        return found
