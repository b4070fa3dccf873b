"""A streaming query's trigger as its job set it, and the trigger interval the health rules judge by.

The driver runtime records each query's trigger from the job itself (``spark_jobs/runtime/writer_capture.py``,
also for an unmodified user script) into the status document (``queries[].trigger``). The health rules use
it, not the spec's ``trigger_interval`` (which only the bundled jobs apply): a script with a one-minute trigger
is judged against one minute. Plain Python: the driver imports this module.

A trigger is described as ``{"kind": KIND, "interval_s": seconds or None}``:

- ``processing_time``: micro-batches every ``interval_s`` (0: as fast as possible - Spark's default);
- ``available_now`` / ``once``: the query processes what is there and ends by itself;
- ``continuous``: continuous processing with a checkpoint every ``interval_s``.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["AVAILABLE_NOW", "CONTINUOUS", "DEFAULT", "ONCE", "PROCESSING_TIME", "describe", "ends_by_itself",
           "job_trigger_interval", "parse_interval", "valid"]

PROCESSING_TIME = "processing_time"
AVAILABLE_NOW = "available_now"
ONCE = "once"
CONTINUOUS = "continuous"
KINDS = (PROCESSING_TIME, AVAILABLE_NOW, ONCE, CONTINUOUS)
#: What a query runs with when its job never called ``.trigger(...)``.
DEFAULT: dict[str, Any] = {"kind": PROCESSING_TIME, "interval_s": 0.0}

_UNITS = {
    **dict.fromkeys(("ms", "msec", "msecs", "millisecond", "milliseconds"), 0.001),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
}
_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]+)")


def parse_interval(text: str) -> float | None:
    """Seconds of a Spark interval string (``"30 seconds"``, ``"1 minute 30 seconds"``, ``"interval 5 s"``,
    ``"500 milliseconds"``); ``None`` if it is not one this module understands (the caller then falls back)."""
    rest = text.strip().lower()
    rest = rest[len("interval"):].strip() if rest.startswith("interval") else rest
    if not rest:
        return None
    total, pos = 0.0, 0
    for match in _PART.finditer(rest):
        if rest[pos:match.start()].strip() or match.group(2) not in _UNITS:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return total if pos and not rest[pos:].strip() else None


def describe(processingTime: Any = None, once: Any = None, continuous: Any = None,  # noqa: N803 - Spark's names
             availableNow: Any = None) -> dict[str, Any]:
    """The description of ``DataStreamWriter.trigger(...)`` called with these arguments (the one set wins,
    as in Spark, which refuses more than one)."""
    if availableNow:
        return {"kind": AVAILABLE_NOW, "interval_s": None}
    if once:
        return {"kind": ONCE, "interval_s": None}
    if continuous is not None:
        return {"kind": CONTINUOUS, "interval_s": _seconds(continuous)}
    if processingTime is not None:
        return {"kind": PROCESSING_TIME, "interval_s": _seconds(processingTime)}
    return dict(DEFAULT)


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):  # not Spark's API, but harmless to read
        return float(value)
    return parse_interval(value) if isinstance(value, str) else None


def valid(raw: Any) -> bool:
    """Whether ``raw`` is a trigger description (a status document read back from storage)."""
    if not isinstance(raw, dict) or raw.get("kind") not in KINDS:
        return False
    interval = raw.get("interval_s")
    return interval is None or (isinstance(interval, (int, float)) and not isinstance(interval, bool)
                                and interval >= 0)


def _triggers(doc: dict[str, Any] | None) -> list[dict[str, Any]]:
    queries = (doc or {}).get("queries") or []
    return [q["trigger"] for q in queries if isinstance(q, dict) and valid(q.get("trigger"))]


def job_trigger_interval(doc: dict[str, Any] | None, default: float) -> tuple[float, str]:
    """The trigger interval to judge a run by, and where it came from (``"job"`` or ``"spec"``).

    The longest interval the run's queries were started with (a run of several queries is judged by
    its slowest trigger: a batch that waits for it is not a stall); ``default`` (the spec's) when no query
    reported a trigger with an interval (a driver of an older release, or only ``available_now``/``once``
    queries, which have none)."""
    return interval_of(_triggers(doc), default)


def interval_of(triggers: list[dict[str, Any]], default: float) -> tuple[float, str]:
    """:func:`job_trigger_interval` of the run's valid trigger descriptions (:func:`valid`)."""
    intervals = [float(t["interval_s"]) for t in triggers if t.get("interval_s") is not None]
    if not intervals:
        return default, "spec"
    return max(intervals), "job"


def ends_by_itself(doc: dict[str, Any] | None) -> bool:
    """Whether every query of the run was started with a trigger that ends by itself (available_now, once)."""
    triggers = _triggers(doc)
    return bool(triggers) and all(t["kind"] in (AVAILABLE_NOW, ONCE) for t in triggers)
