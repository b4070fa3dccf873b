"""The 0600 Java properties file that carries secret Spark conf to spark-submit (never its command line).

Plain Python: the Airflow side writes it (``targets``), the driver's runtime reads it once it has
started (to mask the values in its own output) and deletes it.
"""

from __future__ import annotations

import os
import tempfile

from airflow_streaming.private_dir import private_dir

#: The secrets directory's name under the temp dir (per user: ``<tmp>/airflow-streaming-secrets-<uid>``).
SECRETS_DIR_NAME = "airflow-streaming-secrets"


def write_properties_file(conf: dict[str, str], run_id: str) -> str:
    """A 0600 Java properties file holding ``conf`` in this user's private secrets directory (created 0700
    and verified: :func:`airflow_streaming.private_dir.private_dir`); returns its path."""
    directory = private_dir(SECRETS_DIR_NAME)
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


def forget_properties_file(path: str | None, run_id: str) -> bool:
    """Delete the properties file of ``run_id`` that :func:`write_properties_file` wrote - and nothing else.

    The path comes from the driver record (``handle.properties_file``), a file on shared storage that
    a driver can write: a path outside the secrets directory, of another run, a symlink or anything but
    a regular file is left alone (a control file never decides what is deleted). ``True`` if deleted.
    """
    if not path:
        return False
    directory, name = os.path.split(os.path.abspath(path))
    ours = (os.path.dirname(directory) == os.path.abspath(tempfile.gettempdir())
            and os.path.basename(directory).startswith(SECRETS_DIR_NAME)
            and name.startswith(f"{run_id}-") and name.endswith(".properties") and "/" not in run_id)
    if not ours or os.path.islink(path) or not os.path.isfile(path):
        return False
    try:
        os.unlink(path)
    except OSError:
        return False
    return True
