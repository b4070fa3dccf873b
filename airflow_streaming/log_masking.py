"""Airflow's secrets masker learns our secrets (Airflow side only: this module imports Airflow).

:mod:`airflow_streaming.redaction` is plain Python (the Spark driver uses it); this is the one place
that hands secret values to Airflow's own masker, so that Airflow masks them in task logs as well.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_streaming.redaction import _maskable, remember_secrets

__all__ = ["register_secrets"]


def register_secrets(values: Iterable[Any]) -> None:
    """:func:`remember_secrets`, and tell Airflow's secrets masker about ``values`` so that Airflow masks
    them in task logs (a no-op for Airflow where the task SDK is not installed). Airflow side only."""
    values = [str(v) for v in values if v is not None and _maskable(str(v))]
    remember_secrets(values)
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # an Airflow without the task SDK
        return
    for value in values:
        mask_secret(value)
