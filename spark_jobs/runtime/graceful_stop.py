"""Stopping streaming queries at a micro-batch boundary.

``StreamingQuery.stop()`` cancels the batch in flight (its offsets are logged, its commit is not,
and Spark replays it on restart). There is no built-in "stop after the current batch": an idle query
(no active trigger, no firing about to come) is stopped at once; any other is asked to end when its
current trigger ends (:class:`TriggerEnd`).
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
#: Waiting past the firing and for the batch it starts was not enough: a query whose batches end inside the guard
#: (a batch of 0.75-1 s on a 1 s trigger) was never seen idle outside it, and one falling behind (batches longer
#: than the interval start one after another) never idle at all - both ran on until the stop's kill (a suite run,
#: 2026-11-28: ``test_parallel_transition...``, batches of ~1.8 s on a loaded machine, killed after 60 s).
#: Such queries are now asked to end after their trigger (:class:`TriggerEnd`).
GUARD_S = 0.5

#: How long after a firing a stop held back by the guard is sent.
PAST_FIRING_S = 0.05


def wait_before_stop(now_s: float, interval_s: float | None) -> float:
    """Seconds to wait before a stop sent at ``now_s`` (epoch seconds) to a query whose processing-time trigger
    fires every ``interval_s`` (``None`` or 0: not known, or as fast as possible: 0.0, stop now): past the next
    firing when it is closer than the guard (``min(GUARD_S, interval_s / 4)``), else 0.0. Pure."""
    if not interval_s or interval_s <= 0:
        return 0.0
    interval_ms = max(1, round(interval_s * 1000))
    now_ms = int(now_s * 1000)
    until = (now_ms // interval_ms * interval_ms + interval_ms - now_ms) / 1000
    return until + PAST_FIRING_S if until < min(GUARD_S, interval_s / 4) else 0.0


def stop_at_batch_boundary(query: Any, abort: threading.Event | None = None, interval_s: float | None = None,
                           tracker: Any = None) -> None:
    """Stop ``query`` between two micro-batches. Returns when the query has stopped.

    Idle, with no firing of its processing-time trigger within the guard (:func:`wait_before_stop`): stopped at
    once (``query.stop()``). Otherwise - a batch in flight, or a firing about to come - the query is asked to end
    when its current trigger ends (:class:`TriggerEnd`): a batch in flight runs to its commit (``tracker``,
    the SparkContext's status tracker, tells when it is past the point where Spark would still cancel it), a
    firing about to come finds the query ended and plans nothing. A query that is never idle (its batches take
    longer than its interval) is stopped so too; before, it was never seen idle and ran on until the stop's kill.
    Without the end request (a Spark that does not offer it), the query is stopped at the first idle moment outside
    the guard, as before.

    ``abort`` (set by a second SIGTERM) makes it stop at once, cancelling a batch in flight.
    """
    waited_from = time.monotonic()
    logged = False
    end = None if abort is not None and abort.is_set() else TriggerEnd.of(query, tracker)
    looked_for_end = time.monotonic()
    requested = False
    while True:
        if abort is not None and abort.is_set():
            query.stop()
            break
        if end is None and time.monotonic() - looked_for_end > 1.0:  # e.g. a query still initializing
            end, looked_for_end = TriggerEnd.of(query, tracker), time.monotonic()
        if requested:
            if end.ended():
                break
            time.sleep(POLL_SECONDS)
            continue
        if not query.isActive:
            break
        status = query.status
        if not status.get("isTriggerActive", False):
            wait = wait_before_stop(time.time(), interval_s)
            if wait <= 0:
                query.stop()
                break
            if end is not None and wait - PAST_FIRING_S > END_MARGIN_S:
                requested = end.request()  # the coming firing finds the query ended and plans nothing
                continue
            time.sleep(wait)  # the trigger fires meanwhile; a batch it starts is waited for like any other
            continue
        if end is not None and (end.batch_running() or time.monotonic() - waited_from > END_PATIENCE_S):
            # Past Spark's last check: the batch commits, and no other one starts. Past the patience (no job of
            # the query seen: e.g. a script that sets its own job group), asked anyway: at worst a batch still
            # planning is cancelled and replayed on restart - never the kill at the stop's timeout.
            requested = end.request()
            continue
        if not logged and time.monotonic() - waited_from > 2:
            log.info("waiting for the batch in flight of query %s to finish before stopping", query.name)
            logged = True
        time.sleep(POLL_SECONDS if end is None else END_POLL_SECONDS)
    log.info("query %s stopped after %.2fs%s", query.name, time.monotonic() - waited_from,
             " (at the end of its trigger)" if requested else "")


#: How far a firing must still be for an end request to reach the query before it fires (the request is one
#: py4j call; closer, the loop waits past the firing and handles the batch it starts).
END_MARGIN_S = 0.03

#: How long a batch in flight is watched for a Spark job of its query before the end is requested without one.
END_PATIENCE_S = 10.0

#: How often a batch in flight is looked at for its Spark job (two py4j calls each time).
END_POLL_SECONDS = 0.02


class TriggerEnd:
    """Ending a micro-batch query when its current trigger ends - the "stop after the current batch" Spark does not
    offer through its API - through its ``StreamExecution``: its state is set to ``TERMINATED`` (what
    ``StreamExecution.stop()`` sets first, without the interrupt and the job cancel that follow it there). The
    trigger loop checks that state before it plans a batch and returns, and ``runBatch`` checks it once more after
    planning (past there, the batch runs to its commit; before, it interrupts itself: the batch is planned and
    not committed, replayed on restart - what a stop there did anyway). The query's thread then ends as after a
    stop: sources stopped, the query leaves ``spark.streams.active``, its termination event is posted.

    Read on Spark 3.5 (``org.apache.spark.sql.execution.streaming``) and 4.x (``...streaming.runtime``): the
    package is the one of the query's own state object, never named here."""

    def __init__(self, execution: Any, state: Any, active: Any, terminated: Any, tracker: Any, group: str):
        self._execution, self._state, self._active, self._terminated = execution, state, active, terminated
        self._tracker, self._group = tracker, group

    @classmethod
    def of(cls, query: Any, tracker: Any) -> "TriggerEnd | None":
        """The end request of ``query`` (a classic PySpark ``StreamingQuery`` of a micro-batch query that is
        active), ``None`` where there is none (another engine, a query not active, a Spark whose classes differ)."""
        try:
            execution = query._jsq.streamingQuery()
            if not execution.getClass().getName().endswith("MicroBatchExecution"):
                return None
            state = execution.state()
            active = state.get()
            name = active.getClass().getName()
            if not name.endswith(".ACTIVE$"):
                return None
            terminated = (active.getClass().getClassLoader().loadClass(name[: -len("ACTIVE$")] + "TERMINATED$")
                          .getField("MODULE$").get(None))
            return cls(execution, state, active, terminated, tracker, str(query.runId))
        except Exception:  # noqa: BLE001 - no end request: the stop waits for an idle moment, as before
            log.debug("no end-of-trigger request for query %s", getattr(query, "name", "?"), exc_info=True)
            return None

    def request(self) -> bool:
        """Ask the query to end when its current trigger ends; ``False`` if it was no longer active."""
        return bool(self._state.compareAndSet(self._active, self._terminated))

    def ended(self) -> bool:
        """Whether the query's thread has ended."""
        return not self._execution.queryExecutionThread().isAlive()

    def batch_running(self) -> bool:
        """Whether a Spark job of the query (its job group is its run id) runs: its batch is then past the
        planning, where an end request would still cancel it. ``False`` where that cannot be told."""
        if self._tracker is None:
            return False
        try:
            active = set(self._tracker.getActiveJobsIds())
            return bool(active) and bool(active & set(self._tracker.getJobIdsForGroup(self._group)))
        except Exception:  # noqa: BLE001 - not told: the loop waits for an idle moment
            return False
