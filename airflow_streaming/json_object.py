"""A control file's JSON object, decoded fast on the Airflow side (triggerer, workers).

A thousand watched streams make the triggerer decode ~200 status documents (~25 KB each) a second; the
standard library's ``json`` spends ~290 us on one, ``msgspec`` (installed with Airflow: its task SDK
uses it) ~120 us (BENCHMARKS.md, "A thousand streams"). :func:`json_object` decodes with ``msgspec`` and,
when it refuses the bytes or is missing, hands them to
:func:`~airflow_streaming.control.contract.parse_json_object`: that one decides what the bytes are, so a
file the standard library reads (``NaN``, an integer beyond 64 bits) is read the same, and garbage gets
the same :class:`~airflow_streaming.control.contract.ControlFileError` naming the file.

:func:`status_view` decodes a ``status.json`` straight into the view a health poll reads
(:class:`~airflow_streaming.health.view.StatusView`), skipping the ~90 % of the document it does not read
(measured on a 23 KB status of 20 reports: ~14 us against ~46 us for the whole document, which then still had
to be validated).

Not for the driver side (``spark_jobs/`` imports only the standard library, pyspark and the pure modules).
"""

from __future__ import annotations

from typing import Any

from airflow_streaming.control.contract import ControlFileError, check_view, parse_json_object
from airflow_streaming.health.view import StatusView, view_of

__all__ = ["json_object", "status_view"]

try:
    import msgspec

    _decode: Any = msgspec.json.Decoder().decode
    _decode_view: Any = msgspec.json.Decoder(StatusView).decode
    _Refused: Any = msgspec.DecodeError  # its ValidationError too
except ImportError:  # pragma: no cover - Airflow installs it; the standard library then decodes
    _decode, _decode_view, _Refused = None, None, Exception


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


def status_view(path: str, data: bytes) -> StatusView:
    """The :class:`~airflow_streaming.health.view.StatusView` of a ``status.json``'s bytes, checked
    (:func:`~airflow_streaming.control.contract.check_view`). Bytes the typed decode refuses (garbage, ``NaN``, a list
    where the view reads an object) take the standard library's path - :func:`json_object`, then
    :func:`~airflow_streaming.health.view.view_of` - which decides: a view, or a :class:`ControlFileError`
    naming the file."""
    view = None
    if _decode_view is not None:
        try:
            view = _decode_view(data)
        except (_Refused, ValueError, TypeError, OverflowError):
            view = None
    if view is None:
        doc = json_object(path, data)
        try:
            view = view_of(doc)
        except TypeError as exc:
            raise ControlFileError(f"{path}: {exc}") from None
    return check_view(path, view)
