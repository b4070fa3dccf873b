"""A graceful stop is never sent just before a processing-time trigger fires (the rule, and the loop that uses
it on a stand-in for a StreamingQuery whose trigger fires at multiples of its interval on the wall clock, as
Spark's ProcessingTimeExecutor does)."""

from __future__ import annotations

import threading
import time

import pytest

from spark_jobs.runtime import graceful_stop
from spark_jobs.runtime.graceful_stop import wait_before_stop


@pytest.mark.parametrize("interval", [0.2, 1.0, 2.0, 5.0, 60.0])
def test_a_stop_is_never_sent_inside_the_guard_before_a_firing(interval):
    guard = min(graceful_stop.GUARD_S, interval / 4)
    base = 1_795_000_000.0  # a multiple of each interval: a firing
    for step in range(0, 4000):
        now = base + step * interval / 1000  # 4 intervals, in thousandths of one
        sent = now + wait_before_stop(now, interval)
        to_next = interval - (round(sent * 1000) % round(interval * 1000)) / 1000
        assert to_next >= guard - 0.002, (now, sent)  # the stop goes out at least the guard before a firing
        assert sent - now <= guard + 0.05 + 0.001  # and waits at most past the firing it was too close to


def test_no_interval_or_as_fast_as_possible_stops_at_once():
    assert wait_before_stop(1_795_000_000.999, None) == wait_before_stop(1_795_000_000.999, 0.0) == 0.0


class _Query:
    """A stand-in for pyspark's StreamingQuery: its trigger fires at multiples of ``interval`` on the wall clock
    and runs a batch of ``batch_s``; a ``stop()`` that arrives (``delay`` after the call) inside a batch cancels it,
    as Spark's stop does."""

    def __init__(self, interval: float, batch_s: float, delay: float):
        self.interval, self.batch_s, self.delay = interval, batch_s, delay
        self.isActive, self.name, self.cancelled_a_batch = True, "q", None

    @property
    def status(self):
        return {"isTriggerActive": time.time() % self.interval < self.batch_s}

    def stop(self):
        arrives = time.time() + self.delay
        self.cancelled_a_batch = arrives % self.interval < self.batch_s
        self.isActive = False


def test_the_loop_waits_past_a_firing_that_is_too_close():
    interval = 1.0
    query = _Query(interval, batch_s=0.05, delay=0.1)
    to_next = interval - time.time() % interval
    time.sleep(to_next - 0.08 if to_next > 0.08 else to_next + interval - 0.08)  # 80 ms before a firing
    began = time.time()
    graceful_stop.stop_at_batch_boundary(query, threading.Event(), interval)
    assert query.cancelled_a_batch is False  # without the interval, this stop would land in the firing's batch
    assert not query.isActive and time.time() - began < 5


class _Jvm:
    """Stand-ins for the JVM side :class:`graceful_stop.TriggerEnd` reads through py4j: the query's
    ``StreamExecution`` (its class, its state, its thread) and the state objects' classes."""

    class Cls:
        def __init__(self, name, module=None):
            self.name, self.module = name, module

        def getName(self):
            return self.name

        def getClassLoader(self):
            return self

        def loadClass(self, name):
            return _Jvm.Cls(name, _Jvm.Obj(name))

        def getField(self, field):
            assert field == "MODULE$"
            return self

        def get(self, _none):
            return self.module

    class Obj:
        def __init__(self, class_name):
            self.class_name = class_name

        def getClass(self):
            return _Jvm.Cls(self.class_name)


class _BusyQuery:
    """A query that is never idle (its batches outlast its trigger): ``isTriggerActive`` is always true; a Spark
    job of its batch runs in the second half of each batch of ``batch_s``. An end request makes it end when its
    current batch ends; ``stop()`` would cancel that batch."""

    PACKAGE = "org.apache.spark.sql.execution.streaming.runtime."

    def __init__(self, batch_s: float):
        self.batch_s, self.began = batch_s, time.monotonic()
        self.name, self.runId, self.stopped, self.requested_at, self.ended_at = "busy", "run-1", False, None, None
        self.active_state = _Jvm.Obj(self.PACKAGE + "ACTIVE$")
        self.state_now = self.active_state
        query = self

        class State:
            def get(self):
                return query.state_now

            def compareAndSet(self, expected, new):
                if query.state_now is not expected:
                    return False
                query.state_now, query.requested_at = new, time.monotonic()
                in_batch = (query.requested_at - query.began) % query.batch_s
                query.ended_at = query.requested_at + (query.batch_s - in_batch)  # the batch in flight ends
                return True

        class Thread:
            def isAlive(self):
                return query.ended_at is None or time.monotonic() < query.ended_at

        class Execution:
            def getClass(self):
                return _Jvm.Cls(query.PACKAGE + "MicroBatchExecution")

            def state(self):
                return State()

            def queryExecutionThread(self):
                return Thread()

        class Jsq:
            def streamingQuery(self):
                return Execution()

        self._jsq = Jsq()

    def job_running(self) -> bool:
        return (time.monotonic() - self.began) % self.batch_s > self.batch_s / 2

    @property
    def isActive(self):
        return self.state_now is self.active_state and not self.stopped

    @property
    def status(self):
        return {"isTriggerActive": True}

    def stop(self):
        self.stopped, self.stopped_at = True, time.monotonic()


class _Tracker:
    def __init__(self, query):
        self.query = query

    def getActiveJobsIds(self):
        return [7] if self.query.job_running() else []

    def getJobIdsForGroup(self, group):
        assert group == self.query.runId
        return [5, 6, 7]


def test_a_query_never_idle_is_asked_to_end_after_its_batch_never_stopped_inside_it():
    # Batches of 2 s, their job in the second second: a request made while the job runs cannot slip into the next
    # batch's planning unless this thread is held up for a second between the look and the request.
    query = _BusyQuery(batch_s=2.0)
    graceful_stop.stop_at_batch_boundary(query, threading.Event(), 0.25, _Tracker(query))
    assert not query.stopped  # never a stop() inside a batch
    assert query.requested_at is not None and query.state_now.class_name.endswith(".TERMINATED$")
    assert (query.requested_at - query.began) % query.batch_s >= query.batch_s / 2  # asked while its job ran
    assert time.monotonic() >= query.ended_at  # returned once the batch in flight had ended


def test_a_second_sigterm_while_waiting_for_the_end_stops_at_once():
    query = _BusyQuery(batch_s=30.0)  # its job runs from 15 s on: the end request never comes before the abort
    abort = threading.Event()
    threading.Timer(0.3, abort.set).start()
    began = time.monotonic()
    graceful_stop.stop_at_batch_boundary(query, abort, 1.0, _Tracker(query))
    assert query.stopped and time.monotonic() - began < 5


class _NoJobsTracker(_Tracker):
    """A status tracker that never sees a job of the query (a script that sets its own job group)."""

    def getJobIdsForGroup(self, group):
        return []


def test_without_a_job_seen_the_end_is_asked_after_the_patience_never_left_to_the_kill(monkeypatch):
    monkeypatch.setattr(graceful_stop, "END_PATIENCE_S", 0.5)
    query = _BusyQuery(batch_s=0.4)
    began = time.monotonic()
    graceful_stop.stop_at_batch_boundary(query, threading.Event(), 0.25, _NoJobsTracker(query))
    assert not query.stopped and query.requested_at is not None
    assert query.requested_at - began >= 0.5  # only after the patience


class _IdleQuery(_BusyQuery):
    """Idle between firings of its 1 s trigger (its batches are instant)."""

    @property
    def status(self):
        return {"isTriggerActive": False}


def test_an_end_request_is_never_sent_in_the_last_instants_before_a_firing():
    query = _IdleQuery(batch_s=1.0)
    to_next = 1.0 - time.time() % 1.0
    time.sleep(to_next - 0.01 if to_next > 0.01 else to_next + 0.99)  # 10 ms before a firing
    firing = time.monotonic() + 0.01
    graceful_stop.stop_at_batch_boundary(query, threading.Event(), 1.0, _Tracker(query))
    # Too close to reach the query before it fires: the loop waits past the firing, then stops the idle query.
    assert query.requested_at is None or query.requested_at > firing, (query.requested_at, firing)
    assert query.requested_at is not None or query.stopped_at > firing, (query.stopped_at, firing)
