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
