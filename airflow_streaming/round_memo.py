"""The memo of the poll round running in this thread (:mod:`airflow_streaming.triggers.poll_rounds`).

A round of the triggerer runs the polls of many triggers one after another in one executor thread; a read
in one of them can keep what it parsed here for the next call of the same round (the health watch and the
completeness watcher of one stream: :meth:`~airflow_streaming.hooks.streaming_job.SparkStreamHook.status_parsed`).
Its own module, importing nothing of the project, so that the hooks can use it without importing the triggers.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["round_memo", "set_round_memo"]

_round = threading.local()


def round_memo() -> dict[Any, Any] | None:
    """The memo of the round running in this thread: a dict shared by the round's calls and dropped when
    the round ends; ``None`` outside a round (a direct call keeps nothing). What a call keeps there must be
    checked against what it reads (e.g. keyed by the bytes it parsed): the memo only saves work."""
    return getattr(_round, "memo", None)


def set_round_memo(memo: dict[Any, Any] | None) -> None:
    """Start (a new dict) or end (``None``) this thread's round memo
    (:mod:`~airflow_streaming.triggers.poll_rounds` does, around a round)."""
    _round.memo = memo
