"""What a health verdict reads of a status document: a typed view of ``status.json`` (``msgspec`` structs).

A status document is ~25 KB, most of it Spark's progress reports (sources' descriptions, every duration,
the sink...), of which the verdict reads a dozen numbers per report. A triggerer watching a thousand
streams decodes ~200 documents a second, so what it decodes is only this view: the document's top-level
fields, each query's status, trigger and reports - and of a report only the fields the verdict reads
(:class:`Report`). The rest of the document is skipped, not built.

Two ways in, one view: :func:`view_of` from a parsed document (a dict: tests, callers that parsed it
already), and a typed decode of the file's bytes straight into these classes on the Airflow side
(:func:`airflow_streaming.json_object.status_view`, ``msgspec``), which skips what the view does not name.
Leaves are ``Any``: the verdict converts them as it always did (a count written as ``"12"`` still counts),
so the two ways agree on every document (``tests/unit/test_status_view.py``); an object where a list or
another object is expected is refused by both. :func:`airflow_streaming.control.contract.check_view` then
validates what :meth:`~airflow_streaming.control.contract.StatusDocument.from_dict` validates of these fields,
with its messages. Plain Python: no Airflow, no Spark; ``msgspec`` (a requirement of Airflow's core and task SDK,
and of this package) gives the classes - Airflow side only, the driver never imports this module.

The classes are :class:`msgspec.Struct` types, not dataclasses: a triggerer makes and frees ~200 views a second,
and a view of 20 reports holds ~100 of these nodes (and ~60 lists and dicts). A struct is one object where a
dataclass instance is two (it and its ``__dict__``), and - ``gc=False``: a view is a tree decoded from JSON, it
holds no cycle - it is never tracked by the garbage collector (BENCHMARKS.md, "The status view as structs").
"""

from __future__ import annotations

from typing import Any

import msgspec

from airflow_streaming.health import job_trigger

__all__ = ["Duration", "EventTime", "QueryView", "Report", "Source", "StateOperator", "StatusView", "view_of"]

# Field names are Spark's (camelCase) and the status document's: the decoder matches them by name, and skips
# the names a class does not have.


class _Struct(msgspec.Struct, gc=False):
    """A view's node (``gc=False``: a tree, never part of a reference cycle)."""

    def fields(self) -> dict[str, Any]:
        """The fields by name (what a ``__dict__`` would be; :func:`~airflow_streaming.control.contract.check_view`
        checks them)."""
        return msgspec.structs.asdict(self)


class Duration(_Struct):
    triggerExecution: Any = None  # noqa: N815 - Spark's name


class StateOperator(_Struct):
    numRowsTotal: Any = None  # noqa: N815
    numRowsDroppedByWatermark: Any = None  # noqa: N815


class EventTime(_Struct):
    watermark: Any = None


class Source(_Struct):
    metrics: dict[str, Any] | None = None


class Report(_Struct):
    """A ``StreamingQueryProgress``: the fields the verdict reads."""

    timestamp: Any = None
    batchId: Any = None  # noqa: N815
    numInputRows: Any = None  # noqa: N815
    inputRowsPerSecond: Any = None  # noqa: N815
    processedRowsPerSecond: Any = None  # noqa: N815
    durationMs: Duration | None = None  # noqa: N815
    stateOperators: list[StateOperator] | None = None  # noqa: N815
    eventTime: EventTime | None = None  # noqa: N815
    sources: list[Source] | None = None
    observedMetrics: dict[str, dict[str, Any]] | None = None  # noqa: N815


class QueryView(_Struct):
    id: Any = None
    run_id: Any = None
    name: Any = None
    active: Any = None
    status: dict[str, Any] | None = None
    recent_progress: list[Report] | None = None
    last_batch_id: Any = None
    trigger: Any = None


class StatusView(_Struct):
    """The status document's fields a health verdict, a liveness check and a completeness look read."""

    schema: Any = None
    stream: Any = None
    version: Any = None
    run_id: Any = None
    state: Any = None
    pid: Any = None
    host: Any = None
    started_at: Any = None
    heartbeat_at: Any = None
    app_id: Any = None
    spark_ui: Any = None
    master: Any = None
    checkpoint_location: Any = None
    ready: Any = None
    queries: list[QueryView] | None = None
    totals: dict[str, Any] | None = None
    last_exception: dict[str, Any] | None = None
    exit: dict[str, Any] | None = None
    storage_errors: dict[str, Any] | None = None
    query_checkpoints: dict[str, Any] | None = None

    def checkpoints(self) -> list[str]:
        """As :meth:`StatusDocument.checkpoints <airflow_streaming.control.contract.StatusDocument.checkpoints>`."""
        return sorted({str(v) for v in (self.query_checkpoints or {}).values()})

    def triggers(self) -> list[dict[str, Any]]:
        """The valid trigger descriptions of the run's queries (:func:`~airflow_streaming.health.job_trigger.valid`)."""
        return [q.trigger for q in self.queries or () if job_trigger.valid(q.trigger)]


def _object(raw: Any, what: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise TypeError(f"{what}: expected an object, got {type(raw).__name__}")
    return raw


def _list(raw: Any, what: str) -> list[Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise TypeError(f"{what}: expected a list, got {type(raw).__name__}")
    return raw


def _dict_or_none(raw: Any, what: str) -> dict[str, Any] | None:
    return None if raw is None else _object(raw, what)


def _report(raw: Any) -> Report:
    p = _object(raw, "a progress report")
    duration, event_time = p.get("durationMs"), p.get("eventTime")
    observed = _dict_or_none(p.get("observedMetrics"), "observedMetrics")
    return Report(
        timestamp=p.get("timestamp"), batchId=p.get("batchId"), numInputRows=p.get("numInputRows"),
        inputRowsPerSecond=p.get("inputRowsPerSecond"), processedRowsPerSecond=p.get("processedRowsPerSecond"),
        durationMs=None if duration is None else Duration(_object(duration, "durationMs").get("triggerExecution")),
        stateOperators=None if p.get("stateOperators") is None else [
            StateOperator(_object(op, "a state operator").get("numRowsTotal"), op.get("numRowsDroppedByWatermark"))
            for op in _list(p.get("stateOperators"), "stateOperators") or ()],
        eventTime=None if event_time is None else EventTime(_object(event_time, "eventTime").get("watermark")),
        sources=None if p.get("sources") is None else [
            Source(_dict_or_none(_object(s, "a source").get("metrics"), "a source's metrics"))
            for s in _list(p.get("sources"), "sources") or ()],
        observedMetrics=None if observed is None else {
            k: _object(v, "an observed metric") for k, v in observed.items()},
    )


def _query(raw: Any) -> QueryView:
    q = _object(raw, "a query")
    progress = _list(q.get("recent_progress"), "recent_progress")
    return QueryView(id=q.get("id"), run_id=q.get("run_id"), name=q.get("name"), active=q.get("active"),
                     status=_dict_or_none(q.get("status"), "a query's status"),
                     recent_progress=None if progress is None else [_report(p) for p in progress],
                     last_batch_id=q.get("last_batch_id"), trigger=q.get("trigger"))


def view_of(doc: dict[str, Any]) -> StatusView:
    """The view of a parsed status document. ``TypeError`` when an object or a list the view reads is not one
    (as the typed decode refuses it)."""
    doc = _object(doc, "a status document")
    queries = _list(doc.get("queries"), "queries")
    return StatusView(
        schema=doc.get("schema"), stream=doc.get("stream"), version=doc.get("version"), run_id=doc.get("run_id"),
        state=doc.get("state"), pid=doc.get("pid"), host=doc.get("host"), started_at=doc.get("started_at"),
        heartbeat_at=doc.get("heartbeat_at"), app_id=doc.get("app_id"), spark_ui=doc.get("spark_ui"),
        master=doc.get("master"), checkpoint_location=doc.get("checkpoint_location"), ready=doc.get("ready"),
        queries=None if queries is None else [_query(q) for q in queries],
        totals=_dict_or_none(doc.get("totals"), "totals"),
        last_exception=_dict_or_none(doc.get("last_exception"), "last_exception"),
        exit=_dict_or_none(doc.get("exit"), "exit"),
        storage_errors=_dict_or_none(doc.get("storage_errors"), "storage_errors"),
        query_checkpoints=_dict_or_none(doc.get("query_checkpoints"), "query_checkpoints"),
    )
