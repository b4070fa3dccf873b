"""One thread hop per round for the blocking polls of all the triggers of a triggerer.

A poll of a stream (:func:`~airflow_streaming.triggers.health.poll_once`, a lifecycle wait's check) reads
control files: blocking I/O, so it cannot run on the triggerer's event loop. Sent one by one with
``asyncio.to_thread``, each poll paid for a hop to an executor thread and back (a future, a thread
wake-up, a write to the loop's self-pipe, the GIL passed twice): measured on 2 cores, 0.48 to 0.82 ms of
CPU per poll around a poll of 0.30 ms, so a thousand streams at a 5 s poll took 14 to 18 % of a core
(``bench/scale_watch_bench.py``, BENCHMARKS.md "A thousand streams").

:func:`call` instead gathers the polls that fall due within :data:`ROUND_S` of each other into one round
and runs the round's calls one after another in one executor thread, then hands every result back in one
callback on the loop: a few hops per second whatever the number of streams. What that costs:

- a poll starts up to :data:`ROUND_S` later than asked (0.1 s against polls of seconds);
- the calls of one round share a thread, so a slow one (a remote storage that hangs until its timeout)
  delays the others *of its round*; the next rounds go to other threads of the loop's default executor,
  as before, so one stuck storage never stops the watch of the others.

Two helpers make the calls of different triggers of one stream meet in one round and share their work:

- :func:`next_delay` / :func:`sleep_aligned`: a trigger sleeps until the next point of a grid of its
  ``interval`` anchored at a phase of its stream's name (not ``interval`` after its last poll): the
  health watch (5 s) and the completeness watcher (5 or 10 s) of one stream then poll at the same instants,
  so their polls fall in the same round (and ``call(..., group=<stream>)`` runs them one after the other
  in it); the streams are spread over a few phases (the load spread over the interval);
- :func:`~airflow_streaming.round_memo.round_memo`: a dict that lives for one round (``None`` outside a
  round), in which a read can keep what it parsed for the next call of the same round
  (:meth:`~airflow_streaming.hooks.streaming_job.SparkStreamHook.status_parsed`: one parse of a stream's
  ``status.json`` for its health and completeness polls).

Each call runs in its caller's context (``contextvars``, as ``asyncio.to_thread`` does: a trigger's log
lines stay its own). An exception of one call reaches its own caller only. A caller that is cancelled while its round runs
(a trigger the triggerer stops) just does not get its result.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import weakref
import zlib
from collections.abc import Callable
from typing import Any, TypeVar

from airflow_streaming.round_memo import round_memo, set_round_memo

__all__ = ["ROUND_S", "call", "next_delay", "round_memo", "sleep_aligned"]

T = TypeVar("T")

#: How long a round gathers calls before it runs them.
ROUND_S = 0.1

_Item = tuple[contextvars.Context, Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]", "str | None"]
_gathering: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Item]] = weakref.WeakKeyDictionary()


async def call(fn: Callable[..., T], *args: Any, group: str | None = None) -> T:
    """``fn(*args)`` in an executor thread, in the next round of this loop's calls; its result or its
    exception. The calls of a round that give the same ``group`` (a stream's name) run one after another
    (in the order they came), so that what one of them keeps in the :func:`round_memo` serves the next."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    items = _gathering.get(loop)
    if items is None:
        items = _gathering[loop] = []
        loop.call_later(ROUND_S, _start_round, loop)
    items.append((contextvars.copy_context(), fn, args, future, group))
    return await future


def _start_round(loop: asyncio.AbstractEventLoop) -> None:
    items = [item for item in _gathering.pop(loop, []) if not item[3].done()]
    if not items:
        return
    first: dict[str, int] = {}
    for k, item in enumerate(items):  # a group runs where its first call came; calls without a group stay put
        if item[4] is not None:
            first.setdefault(item[4], k)
    order = sorted(range(len(items)), key=lambda k: k if items[k][4] is None else first[items[k][4]])  # stable
    items = [items[k] for k in order]
    try:
        done = loop.run_in_executor(None, _run_round, [(ctx, fn, args) for ctx, fn, args, _, _ in items])
    except RuntimeError as exc:  # the loop's executor is shut down: the loop is closing
        for item in items:
            item[3].set_exception(exc)
        return
    done.add_done_callback(lambda finished: _deliver(items, finished))


#: The phases of the poll grids: a stream's is one of ``_PHASES`` steps of ``_PHASE_STEP_S`` seconds (by a
#: digest of its name). Grids of one stream meet when one interval divides the other (a 10 s grid's points
#: are points of the 5 s grid). Few distinct phases on purpose: the triggers that share one wake up
#: together, in one pass of the event loop and one round (a phase of its own per stream made the loop wake
#: up for every poll and the rounds small: ~0.1 ms more CPU a poll, measured).
_PHASES = 10
_PHASE_STEP_S = 0.5
#: A grid point closer than this fraction of the interval is skipped (no two polls in a row).
_MIN_GAP = 0.2


def next_delay(key: str, interval: float, now: float | None = None) -> float:
    """Seconds from ``now`` (``time.monotonic()``) to the next point of the poll grid of ``key`` (a stream's
    name): the points ``phase(key) + k * interval``. The next point closer than ``_MIN_GAP * interval`` is
    skipped, so a delay is in ``(_MIN_GAP * interval, (1 + _MIN_GAP) * interval]``. Pure."""
    if interval <= 0:
        return 0.0
    now = time.monotonic() if now is None else now
    phase = zlib.crc32(key.encode()) % _PHASES * _PHASE_STEP_S
    delay = interval - (now - phase) % interval
    return delay + interval if delay <= _MIN_GAP * interval else delay


async def sleep_aligned(key: str, interval: float) -> None:
    """Sleep until the next point of the poll grid of ``key`` (:func:`next_delay`)."""
    await asyncio.sleep(next_delay(key, interval))


def _run_round(calls: list[tuple[contextvars.Context, Callable[..., Any], tuple[Any, ...]]]) -> list[tuple[bool, Any]]:
    results: list[tuple[bool, Any]] = []
    set_round_memo({})
    try:
        for ctx, fn, args in calls:
            try:
                results.append((True, ctx.run(fn, *args)))
            except Exception as exc:  # noqa: BLE001 - handed to its own caller
                results.append((False, exc))
    finally:
        set_round_memo(None)
    return results


def _deliver(items: list[_Item], finished: asyncio.Future[list[tuple[bool, Any]]]) -> None:
    if finished.cancelled() or finished.exception() is not None:
        for item in items:
            future = item[3]
            if future.done():
                continue
            if finished.cancelled():
                future.cancel()
            else:
                future.set_exception(finished.exception())  # type: ignore[arg-type]
        return
    for (_, _, _, future, _), (ok, value) in zip(items, finished.result()):
        if future.done():  # its caller was cancelled meanwhile
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
