"""Stopping streaming queries at a micro-batch boundary.

``StreamingQuery.stop()`` cancels the batch in flight (its offsets are logged, its commit is not,
and Spark replays it on restart). There is no built-in "stop after the current batch", so we wait
until the query reports no active trigger and stop it then.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("airflow_streaming.runtime")

POLL_SECONDS = 0.005


#: How close to its next firing a processing-time trigger may be when the stop is sent (at most a quarter of
#: its interval). Spark fires it at multiples of the interval on the wall clock
#: (``ProcessingTimeExecutor.nextBatchTime``: ``now / interval * interval + interval``); a stop sent just before
#: a firing can arrive after it: the trigger plans a batch (its offsets logged) that the stop then cancels, a
#: planned, uncommitted batch that Spark replays on restart - not a stop at a boundary (seen once in a suite run,
#: 2026-11-28: ``test_parallel_transition...``, ``last_planned=35, last_committed=34`` after a graceful stop).
#: Not covered: a query falling behind (a batch longer than the interval) starts its next batch as soon as one
#: ends, off the grid; and the default trigger (interval 0) polls for data every few ms. There a stop can still
#: cancel a batch just planned (Spark replays it on restart; the stop's ``clean`` reports it).
GUARD_S = 0.5


def wait_before_stop(now_s: float, interval_s: float | None) -> float:
    """Seconds to wait before a stop sent at ``now_s`` (epoch seconds) to a query whose processing-time trigger
    fires every ``interval_s`` (``None`` or 0: not known, or as fast as possible: 0.0, stop now): past the next
    firing when it is closer than the guard (``min(GUARD_S, interval_s / 4)``), else 0.0. Pure."""
    if not interval_s or interval_s <= 0:
        return 0.0
    interval_ms = max(1, round(interval_s * 1000))
    now_ms = int(now_s * 1000)
    until = (now_ms // interval_ms * interval_ms + interval_ms - now_ms) / 1000
    return until + 0.05 if until < min(GUARD_S, interval_s / 4) else 0.0


def stop_at_batch_boundary(query: Any, abort: threading.Event | None = None, interval_s: float | None = None) -> None:
    """Stop ``query`` once no trigger is active (and, given its processing-time trigger's ``interval_s``, none
    is about to fire: :func:`wait_before_stop`). Returns when the query has stopped.

    ``abort`` (set by a second SIGTERM) makes it stop at once, cancelling a batch in flight.
    """
    waited_from = time.monotonic()
    logged = False
    while query.isActive:
        status = query.status
        if abort is not None and abort.is_set():
            query.stop()
            break
        if not status.get("isTriggerActive", False):
            wait = wait_before_stop(time.time(), interval_s)
            if wait <= 0:
                query.stop()
                break
            time.sleep(wait)  # the trigger fires meanwhile; a batch it starts is waited for like any other
            continue
        if not logged and time.monotonic() - waited_from > 2:
            log.info("waiting for the batch in flight of query %s to finish before stopping", query.name)
            logged = True
        time.sleep(POLL_SECONDS)
    log.info("query %s stopped after %.2fs", query.name, time.monotonic() - waited_from)
