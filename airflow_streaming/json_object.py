"""A control file's JSON object, decoded fast on the Airflow side (triggerer, workers).

A thousand watched streams make the triggerer decode ~200 status documents (~25 KB each) a second; the
standard library's ``json`` spends ~290 us on one, ``msgspec`` (installed with Airflow: its task SDK
uses it) ~120 us (BENCHMARKS.md, "A thousand streams"). :func:`json_object` decodes with ``msgspec`` and,
when it refuses the bytes or is missing, hands them to
:func:`~airflow_streaming.control.contract.parse_json_object`: that one decides what the bytes are, so a
file the standard library reads (``NaN``, an integer beyond 64 bits) is read the same, and garbage gets
the same :class:`~airflow_streaming.control.contract.ControlFileError` naming the file.

Not for the driver side (``spark_jobs/`` imports only the standard library, pyspark and the pure modules).
"""

from __future__ import annotations

from typing import Any

from airflow_streaming.control.contract import parse_json_object

__all__ = ["json_object"]

try:
    import msgspec

    _decode: Any = msgspec.json.Decoder().decode
    _Refused: Any = msgspec.DecodeError
except ImportError:  # pragma: no cover - Airflow installs it; the standard library then decodes
    _decode, _Refused = None, Exception


def json_object(path: str, data: bytes, advice: str = "") -> dict[str, Any]:
    """The JSON object in ``data`` (a control file's bytes), as
    :func:`~airflow_streaming.control.contract.parse_json_object` returns it (``advice``: as there)."""
    if _decode is not None:
        try:
            value = _decode(data)
        except (_Refused, ValueError, TypeError, OverflowError):
            value = None
        if isinstance(value, dict):
            return value
    return parse_json_object(path, data, advice)
