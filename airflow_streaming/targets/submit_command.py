"""The spark-submit command line of a :class:`LaunchPlan` - with no secret on it.

Sensitive conf entries (see :mod:`airflow_streaming.redaction`) go into a 0600 properties file
(``--properties-file``, with ``--load-spark-defaults`` so that ``spark-defaults.conf`` still applies)
that the driver's runtime deletes as soon as it has started: ``ps`` never shows a secret.
"""

from __future__ import annotations

import os
import tempfile

from airflow_streaming.targets.base import LaunchPlan


def spark_submit_argv(plan: LaunchPlan, binary: str = "spark-submit", properties_file: str | None = None) -> list[str]:
    """``spark-submit --master M --deploy-mode D --name N --conf k=v ... LAUNCHER runtime args``."""
    argv = [binary, "--master", plan.master, "--deploy-mode", plan.deploy_mode, "--name", plan.name]
    for key, value in plan.conf.items():
        argv += ["--conf", f"{key}={value}"]
    if properties_file:
        argv += ["--properties-file", properties_file, "--load-spark-defaults"]
    if plan.py_files:
        argv += ["--py-files", ",".join(plan.py_files)]
    argv += plan.submit_args
    return [*argv, plan.launcher, *plan.runtime_args]


def masked_command(argv: list[str]) -> str:
    """The command as a string for records and logs (it carries no secret: see the module docstring)."""
    from airflow_streaming.redaction import MASK, is_sensitive_key

    shown = []
    for arg in argv:
        key, sep, _ = arg.partition("=")
        shown.append(f"{key}={MASK}" if sep and is_sensitive_key(key) else arg)
    return " ".join(shown)


def write_properties_file(conf: dict[str, str], run_id: str) -> str:
    """A 0600 Java properties file holding ``conf``; returns its path."""
    directory = os.path.join(tempfile.gettempdir(), "airflow-streaming-secrets")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=f"{run_id}-", suffix=".properties", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        os.fchmod(fh.fileno(), 0o600)
        for key, value in conf.items():
            fh.write(f"{_escape(key, True)}={_escape(value, False)}\n")
    return path


def read_properties_file(path: str) -> dict[str, str]:
    """The entries of a file :func:`write_properties_file` wrote (its subset of the Java format:
    one ``key=value`` per line, backslash escapes, no continuation lines)."""
    entries: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if not line or line.lstrip().startswith(("#", "!")):
                continue
            key, value = _split_property(line)
            entries[key] = value
    return entries


def _split_property(line: str) -> tuple[str, str]:
    """``key=value`` at the first unescaped ``=``, both unescaped."""
    i = 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] == "=":
            return _unescape(line[:i]), _unescape(line[i + 1:])
        i += 1
    return _unescape(line), ""


_UNESCAPES = {"n": "\n", "r": "\r", "t": "\t"}


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            out.append(_UNESCAPES.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _escape(text: str, key: bool) -> str:
    """Java properties escaping (backslash, newlines, and for keys also '=', ':' and spaces)."""
    out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if key:
        out = out.replace("=", "\\=").replace(":", "\\:").replace(" ", "\\ ")
    elif out.startswith(" "):
        out = "\\" + out
    return out
