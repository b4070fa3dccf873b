"""The Streams overview for many streams: a cheap summary of every visible stream, then search, filters,
sort and one page of full rows (issue 23: a thousand streams in under 2 s).

A full overview row (:func:`airflow_streaming.ui.views.overview_row`) reads every file of a stream and
asks the reconcile core what the supervisor would do next: ~7 ms a stream, 7 s for a thousand. The page
needs that only for the rows it shows. To search, filter, count and sort all of them it needs far less:
the name, the version, the health verdict (``status.json``, ``driver.json``, the driver's process) and
the supervisor's ledger - :func:`summarize`, ~0.5 ms a stream. :func:`select` is pure: it applies an
:class:`OverviewQuery` to the summaries and says which names to read in full.

Filters are combined with AND; each filter's own values with OR (``health=FAILED,STALLED``). The facet
counts say how many of the user's streams have each value (before filtering), so the page can offer
only values that exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.control.contract import json_object_or_none
from airflow_streaming.ui.streams import StreamRef, page_hook
from airflow_streaming.ui.views import ALARMING_STEPS, RESTART_WINDOW_S, SEVERITY

#: Supervisor filter values: no ledger; supervised without a restart in the window; restarted in the
#: window; gave up.
SUPERVISOR_VALUES = ("none", "ok", "restarted", "gave_up")
#: Server-side sort keys (the columns every stream has a value for without reading it in full).
SORT_KEYS = ("severity", "name", "version", "supervisor")
DEFAULT_PER_PAGE = 50
MAX_PER_PAGE = 500
HEALTH_STATES = ("FAILED", "STALLED", "FALLING_BEHIND", "UNKNOWN", "HEALTHY", "IDLE", "STOPPED")
_SUPERVISOR_ORDER = {v: i for i, v in enumerate(SUPERVISOR_VALUES)}


class BadQuery(ValueError):
    """A search/filter/paging parameter the API cannot use; the message says which and what is allowed."""


@dataclass(frozen=True)
class OverviewQuery:
    """What the page asks for: ``q`` (case-insensitive substring of the name), ``health``, ``supervisor``
    and ``version`` (each a set of allowed values; empty: any), ``sort`` (one of :data:`SORT_KEYS`) and
    ``desc``, ``page`` (from 1) and ``per_page`` (1 to :data:`MAX_PER_PAGE`)."""

    q: str = ""
    health: frozenset[str] = frozenset()
    supervisor: frozenset[str] = frozenset()
    version: frozenset[str] = frozenset()
    sort: str = "severity"
    desc: bool = True
    page: int = 1
    per_page: int = DEFAULT_PER_PAGE

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> OverviewQuery:
        """Parse the request's query parameters; :class:`BadQuery` naming the parameter otherwise."""
        def values(name: str) -> frozenset[str]:
            return frozenset(v.strip() for v in (params.get(name) or "").split(",") if v.strip())

        def integer(name: str, default: int, low: int, high: int) -> int:
            raw = params.get(name)
            if raw in (None, ""):
                return default
            try:
                value = int(raw)
            except ValueError:
                raise BadQuery(f"{name}: expected an integer from {low} to {high}, got {raw[:40]!r}") from None
            if not low <= value <= high:
                raise BadQuery(f"{name}: expected an integer from {low} to {high}, got {value}")
            return value

        health = frozenset(h.upper() for h in values("health"))
        if health - set(HEALTH_STATES):
            raise BadQuery(f"health: unknown state(s) {', '.join(sorted(health - set(HEALTH_STATES)))}; "
                           f"use {', '.join(HEALTH_STATES)}")
        supervisor = values("supervisor")
        if supervisor - set(SUPERVISOR_VALUES):
            raise BadQuery(f"supervisor: unknown value(s) {', '.join(sorted(supervisor - set(SUPERVISOR_VALUES)))}; "
                           f"use {', '.join(SUPERVISOR_VALUES)}")
        sort = (params.get("sort") or "severity").strip()
        if sort not in SORT_KEYS:
            raise BadQuery(f"sort: unknown key {sort[:40]!r}; use {', '.join(SORT_KEYS)}")
        direction = (params.get("dir") or ("asc" if sort in ("name", "version") else "desc")).strip().lower()
        if direction not in ("asc", "desc"):
            raise BadQuery(f"dir: use asc or desc, got {direction[:10]!r}")
        q = (params.get("q") or "").strip()
        if len(q) > 200:
            raise BadQuery("q: at most 200 characters")
        return cls(q=q.lower(), health=health, supervisor=supervisor, version=values("version"), sort=sort,
                   desc=direction == "desc", page=integer("page", 1, 1, 1_000_000),
                   per_page=integer("per_page", DEFAULT_PER_PAGE, 1, MAX_PER_PAGE))


@dataclass
class StreamSummary:
    """What search, filters, counts and sorting need about one stream."""

    name: str
    version: str | None
    health: str
    severity: int
    supervisor: str
    """One of :data:`SUPERVISOR_VALUES`."""


def _json_file(hook: Any, name: str) -> dict[str, Any] | None:
    """The JSON object in the stream's control file ``name``; ``None`` when absent or garbage."""
    return json_object_or_none(hook.storage.read_bytes(f"{hook.paths.root}/{name}"))


def supervisor_value(ledger: Any, now: float) -> str:
    """The supervisor filter value of a restart ledger dict (``None``: no ledger)."""
    if not isinstance(ledger, Mapping):
        return "none"
    if ledger.get("gave_up"):
        return "gave_up"
    failures = [f for f in ledger.get("failures") or [] if isinstance(f, (int, float)) and not isinstance(f, bool)]
    return "restarted" if any(now - f <= RESTART_WINDOW_S for f in failures) else "ok"


def summarize(ref: StreamRef, now: float) -> StreamSummary:
    """One stream's summary from its files (never raises: what cannot be read is UNKNOWN / ``none``)."""
    hook = page_hook(ref.spec)
    try:
        verdict = hook.health(now=now)
        health = verdict.state.value
    except Exception:  # noqa: BLE001 - the full row (if shown) says why
        health = "UNKNOWN"
    try:
        status = _json_file(hook, "status.json")  # only its version and state (health() validated it)
    except Exception:  # noqa: BLE001
        status = None
    status = status if isinstance(status, Mapping) else {}
    reported = status.get("version") if isinstance(status.get("version"), str) else None
    version = reported if status.get("state") in ("RUNNING", "STARTING", "STOPPING") else None
    version = version or (ref.spec.version if ref.spec_known else None) or reported
    try:
        ledger = _json_file(hook, "supervisor.json")
    except Exception:  # noqa: BLE001
        ledger = None
    supervisor = supervisor_value(ledger, now)
    severity = SEVERITY.get(health, 1)
    try:
        record = _json_file(hook, "lifecycle.json")
    except Exception:  # noqa: BLE001
        record = None
    if supervisor == "gave_up" or (isinstance(record, Mapping) and record.get("step") in ALARMING_STEPS):
        severity = max(severity, 2)  # as the full row counts it: a person must look
    return StreamSummary(ref.name, version, health, severity, supervisor)


@dataclass
class Selection:
    """The result of :func:`select`."""

    names: list[str]
    """The page's stream names, in order."""
    matched: int
    total: int
    pages: int
    page: int
    facets: dict[str, dict[str, int]] = field(default_factory=dict)


def _sort_key(query: OverviewQuery) -> Any:
    if query.sort == "name":
        return lambda s: s.name
    if query.sort == "version":
        return lambda s: s.version or ""
    if query.sort == "supervisor":
        return lambda s: _SUPERVISOR_ORDER.get(s.supervisor, 0)
    return lambda s: s.severity * 10 + (1 if s.health == "FAILED" else 0)


def select(summaries: Iterable[StreamSummary], query: OverviewQuery) -> Selection:
    """Filter, count, sort and page ``summaries`` (pure). Ties sort by name, ascending."""
    summaries = list(summaries)
    facets: dict[str, dict[str, int]] = {"health": {}, "supervisor": {}, "version": {}}
    for s in summaries:
        for facet, value in (("health", s.health), ("supervisor", s.supervisor), ("version", s.version or "")):
            facets[facet][value] = facets[facet].get(value, 0) + 1
    matched = [s for s in summaries
               if (not query.q or query.q in s.name.lower())
               and (not query.health or s.health in query.health)
               and (not query.supervisor or s.supervisor in query.supervisor)
               and (not query.version or (s.version or "") in query.version)]
    key = _sort_key(query)
    matched.sort(key=lambda s: s.name)
    matched.sort(key=key, reverse=query.desc)  # stable, also reversed: ties stay in name order
    pages = max(1, -(-len(matched) // query.per_page))
    page = min(query.page, pages)
    start = (page - 1) * query.per_page
    return Selection([s.name for s in matched[start:start + query.per_page]], len(matched), len(summaries), pages, page,
                     facets)
