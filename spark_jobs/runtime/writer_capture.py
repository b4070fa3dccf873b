"""What a job asks of its streaming writers, learnt from the job itself - also from an unmodified user script.

Spark does not expose a started query's trigger through PySpark, nor a writer's settings before it starts.
The driver runtime wraps ``DataStreamWriter`` before the job runs:

- ``trigger`` / ``outputMode`` / ``option`` / ``options`` / ``queryName`` remember, on the writer, what the
  job asked for (every call still goes through to Spark with its own arguments);
- ``start`` / ``toTable`` file the writer's trigger under the started query's id (:func:`trigger_of`): the
  status reporter writes it into the status document (``queries[].trigger``) and the health rules judge the
  run by it (:mod:`airflow_streaming.health.job_trigger`);
- inside :func:`planning` (a standby preparing a user script), the job's first ``start``/``toTable`` does not
  start anything: it raises :class:`PlannedQuery`, carrying the job's streaming DataFrame and the writer's
  settings, so that the standby can replay the job's own plan once before it is promoted
  (``spark_jobs/runtime/plan_warm_up.py``);
- ``foreachBatch`` wraps the job's function so that, once the driver holds its lease, each batch first
  checks the lease (:func:`check_batches`, :mod:`spark_jobs.runtime.lease_check`): a batch of a driver
  that lost it raises before the job's function writes anything, and the query fails.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

from airflow_streaming.health import job_trigger

__all__ = ["PlannedQuery", "check_batches", "forget", "install", "planning", "trigger_of"]

_ATTR = "_airflow_streaming_asked"
_MARK = "_airflow_streaming_wrapped"
_lock = threading.Lock()
_by_query: dict[str, dict[str, Any]] = {}
_planning = threading.Event()
_batch_check: Any = None
"""Called with the batch id before each ``foreachBatch`` function runs (``None``: no check yet)."""


class PlannedQuery(BaseException):  # noqa: N818 - not an error: the job's query, caught before it starts
    """The job's first query, stopped before its start (see :func:`planning`). A ``BaseException``, so that a
    script's ``except Exception`` does not swallow it."""

    def __init__(self, writer: Any, call: str, options: dict[str, Any]):
        asked = dict(getattr(writer, _ATTR, {}))
        asked.update({k: v for k, v in options.items() if v is not None})
        self.df = writer._df  # the job's streaming DataFrame: its sources and its whole plan
        self.call = call
        self.output_mode: str | None = asked.get("outputMode")
        self.checkpoint: str | None = asked.get("checkpointLocation")
        self.query_name: str | None = asked.get("queryName")
        self.trigger: dict[str, Any] = asked.get("trigger") or dict(job_trigger.DEFAULT)
        super().__init__(f"{call}() of query {self.query_name or '(unnamed)'} held for planning")


def trigger_of(query_id: str) -> dict[str, Any] | None:
    """The trigger the job started query ``query_id`` with (``None``: started before :func:`install`)."""
    with _lock:
        found = _by_query.get(str(query_id))
    return dict(found) if found is not None else None


def forget(query_id: str) -> None:
    """Drop what was filed for ``query_id``: a warm-up's replay runs on a copy of the job's checkpoint, so
    its query has the job's query id - the job's own start files the real trigger again."""
    with _lock:
        _by_query.pop(str(query_id), None)


def check_batches(check: Any) -> None:
    """From now on, call ``check(batch_id)`` before every ``foreachBatch`` function of the job runs; it
    raises to refuse the batch (``None``: no check). The driver sets it once it holds its lease."""
    global _batch_check
    _batch_check = check


@contextlib.contextmanager
def planning() -> Iterator[None]:
    """Within the block, the job's first ``start``/``toTable`` raises :class:`PlannedQuery` instead of starting."""
    install()
    _planning.set()
    try:
        yield
    finally:
        _planning.clear()


def install() -> None:
    """Wrap PySpark's ``DataStreamWriter`` (idempotent)."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    if getattr(DataStreamWriter.trigger, _MARK, False):
        return
    _remembering(DataStreamWriter, "trigger", lambda args, kwargs: {"trigger": job_trigger.describe(**kwargs)})
    _remembering(DataStreamWriter, "outputMode", lambda args, kwargs: {"outputMode": _first(args, kwargs, "outputMode")})
    _remembering(DataStreamWriter, "queryName", lambda args, kwargs: {"queryName": _first(args, kwargs, "queryName")})
    _remembering(DataStreamWriter, "option", lambda args, kwargs: (
        {"checkpointLocation": _first(args[1:], kwargs, "value")}
        if str(args[0] if args else kwargs.get("key")).lower() == "checkpointlocation" else {}))
    _remembering(DataStreamWriter, "options", lambda args, kwargs: _checkpoint_option(kwargs))
    original_foreach = getattr(DataStreamWriter, "foreachBatch", None)
    if original_foreach is not None:
        setattr(DataStreamWriter, "foreachBatch", _checking_batches(original_foreach))
    for name in ("start", "toTable"):
        original = getattr(DataStreamWriter, name, None)
        if original is not None:
            setattr(DataStreamWriter, name, _starting(name, original))


def _checkpoint_option(options: dict[str, Any]) -> dict[str, Any]:
    """Spark's option keys are case-insensitive."""
    found = [v for k, v in options.items() if k.lower() == "checkpointlocation"]
    return {"checkpointLocation": found[-1]} if found else {}


def _first(args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
    return args[0] if args else kwargs.get(name)


def _remembering(cls: Any, name: str, asked: Any) -> None:
    original = getattr(cls, name)

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)  # Spark validates first: a refused call records nothing
        try:
            remembered = dict(getattr(self, _ATTR, {}))
            remembered.update(asked(args, kwargs))
            setattr(self, _ATTR, remembered)
        except Exception:  # noqa: BLE001 - never fail the job's call for a health hint
            pass
        return result

    setattr(call, _MARK, True)
    setattr(cls, name, call)


def _checking_batches(original: Any) -> Any:
    @functools.wraps(original)
    def foreach_batch(self: Any, func: Any) -> Any:
        if not callable(func):
            return original(self, func)  # Spark's own error for a non-function

        @functools.wraps(func)
        def checked(batch_df: Any, batch_id: int) -> Any:
            check = _batch_check
            if check is not None:
                check(batch_id)  # raises: the batch writes nothing, the query fails with the reason
            return func(batch_df, batch_id)

        return original(self, checked)

    setattr(foreach_batch, _MARK, True)
    return foreach_batch


def _starting(call_name: str, original: Any) -> Any:
    @functools.wraps(original)
    def start(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _planning.is_set():
            _planning.clear()  # only the first query is held
            options = dict(kwargs)
            raise PlannedQuery(self, call_name, {"outputMode": options.get("outputMode"),
                                                 "queryName": options.get("queryName"),
                                                 **_checkpoint_option(options)})
        query = original(self, *args, **kwargs)
        try:
            trigger = dict(getattr(self, _ATTR, {}).get("trigger") or job_trigger.DEFAULT)
            with _lock:
                _by_query[str(query.id)] = trigger
        except Exception:  # noqa: BLE001
            pass
        return query

    setattr(start, _MARK, True)
    return start
