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

Each call runs in its caller's context (``contextvars``, as ``asyncio.to_thread`` does: a trigger's log
lines stay its own). An exception of one call reaches its own caller only. A caller that is cancelled while its round runs
(a trigger the triggerer stops) just does not get its result.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: How long a round gathers calls before it runs them.
ROUND_S = 0.1

_Item = tuple[contextvars.Context, Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]"]
_gathering: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Item]] = weakref.WeakKeyDictionary()


async def call(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in an executor thread, in the next round of this loop's calls; its result or its
    exception."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    items = _gathering.get(loop)
    if items is None:
        items = _gathering[loop] = []
        loop.call_later(ROUND_S, _start_round, loop)
    items.append((contextvars.copy_context(), fn, args, future))
    return await future


def _start_round(loop: asyncio.AbstractEventLoop) -> None:
    items = [item for item in _gathering.pop(loop, []) if not item[3].done()]
    if not items:
        return
    try:
        done = loop.run_in_executor(None, _run_round, [(ctx, fn, args) for ctx, fn, args, _ in items])
    except RuntimeError as exc:  # the loop's executor is shut down: the loop is closing
        for *_, future in items:
            future.set_exception(exc)
        return
    done.add_done_callback(lambda finished: _deliver(items, finished))


def _run_round(calls: list[tuple[contextvars.Context, Callable[..., Any], tuple[Any, ...]]]) -> list[tuple[bool, Any]]:
    results: list[tuple[bool, Any]] = []
    for ctx, fn, args in calls:
        try:
            results.append((True, ctx.run(fn, *args)))
        except Exception as exc:  # noqa: BLE001 - handed to its own caller
            results.append((False, exc))
    return results


def _deliver(items: list[_Item], finished: asyncio.Future[list[tuple[bool, Any]]]) -> None:
    if finished.cancelled() or finished.exception() is not None:
        for *_, future in items:
            if future.done():
                continue
            if finished.cancelled():
                future.cancel()
            else:
                future.set_exception(finished.exception())  # type: ignore[arg-type]
        return
    for (*_, future), (ok, value) in zip(items, finished.result()):
        if future.done():  # its caller was cancelled meanwhile
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
