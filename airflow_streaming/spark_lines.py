"""Which Spark a spec may name (``StreamSpec.spark_runtime``): an exact release of a supported line, or an
existing installation - checked and normalised here; resolving it on a host is
:mod:`airflow_streaming.spark_runtime`'s (Airflow side).

Pure: imported by the spec, so it is on the driver side too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_streaming.exceptions import SpecError

__all__ = ["MIN_SPARK_LINE", "check_runtime", "line_of"]

#: The oldest Spark line whose drivers this provider's runtime supports (docs/spark-runtimes.md).
MIN_SPARK_LINE = (3, 5)
_RELEASE_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


def line_of(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a release string (``4.1.1`` -> ``(4, 1)``); ``(0, 0)`` when unreadable."""
    match = re.match(r"^(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def check_runtime(value: Any) -> dict[str, str] | None:
    """Validate a spec's ``spark_runtime`` and return its normal form: ``None``, ``{"version": ...}`` or
    ``{"spark_home": ..., "python": ...}``. Raises :class:`SpecError` naming the field."""
    if value is None:
        return None
    if isinstance(value, str):
        value = {"version": value}
    if not isinstance(value, Mapping):
        raise SpecError("spark_runtime", "must be a PySpark release such as '3.5.7', or a mapping with 'version', or with "
                                f"'spark_home' and 'python', got {type(value).__name__}")
    keys = set(value)
    if keys == {"version"}:
        release = value["version"]
        if not isinstance(release, str) or not _RELEASE_RE.match(release.strip()):
            raise SpecError("spark_runtime.version", f"must be an exact Spark release such as '3.5.7' or '4.1.1', got "
                                                 f"{release!r} (a range would let two hosts run different Sparks)")
        release = release.strip()
        if line_of(release) < MIN_SPARK_LINE:
            raise SpecError("spark_runtime.version", f"Spark {release} is older than the oldest supported line "
                                                 f"{MIN_SPARK_LINE[0]}.{MIN_SPARK_LINE[1]} (docs/spark-runtimes.md)")
        return {"version": release}
    if keys == {"spark_home", "python"}:
        result = {}
        for key in ("spark_home", "python"):
            item = value[key]
            if not isinstance(item, str) or not item.startswith("/") or item != item.strip():
                raise SpecError(f"spark_runtime.{key}", f"must be an absolute path, got {item!r}")
            result[key] = item
        return result
    unknown = sorted(keys - {"version", "spark_home", "python"})
    raise SpecError("spark_runtime", (f"unknown key {unknown[0]!r}; " if unknown else "")
                    + "give either 'version' (a PySpark release) or both 'spark_home' and 'python'")
