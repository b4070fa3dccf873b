"""The triggers' polls go to executor threads in rounds (``triggers/poll_rounds.py``): one thread hop per
round, whatever the number of callers; each caller gets its own result or its own exception; a slow call
holds up only its round."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_streaming.triggers import poll_rounds


class CountingExecutor(ThreadPoolExecutor):
    """A real thread pool that counts what is submitted to it (one submission = one thread hop)."""

    def __init__(self) -> None:
        super().__init__(max_workers=4)
        self.submissions = 0

    def submit(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.submissions += 1
        return super().submit(*args, **kwargs)


def run(coro_fn, executor: ThreadPoolExecutor):  # type: ignore[no-untyped-def]
    async def main():  # type: ignore[no-untyped-def]
        asyncio.get_running_loop().set_default_executor(executor)
        return await coro_fn()

    try:
        return asyncio.run(main())
    finally:
        executor.shutdown(wait=True)


def test_a_round_of_many_callers_is_one_thread_hop_and_each_gets_its_own_result() -> None:
    executor = CountingExecutor()
    threads: set[int] = set()

    def work(i: int) -> int:
        threads.add(threading.get_ident())
        return i * i

    async def main():  # type: ignore[no-untyped-def]
        return await asyncio.gather(*(poll_rounds.call(work, i) for i in range(500)))

    assert run(main, executor) == [i * i for i in range(500)]
    assert executor.submissions == 1
    assert len(threads) == 1 and threading.get_ident() not in threads  # off the loop's thread


def test_an_exception_reaches_its_own_caller_only() -> None:
    def work(i: int) -> int:
        if i == 3:
            raise OSError("EIO on stream 3")
        return i

    async def main():  # type: ignore[no-untyped-def]
        return await asyncio.gather(*(poll_rounds.call(work, i) for i in range(6)), return_exceptions=True)

    results = run(main, CountingExecutor())
    assert results[:3] == [0, 1, 2] and results[4:] == [4, 5]
    assert isinstance(results[3], OSError) and "stream 3" in str(results[3])


def test_a_cancelled_caller_does_not_disturb_the_others() -> None:
    async def main():  # type: ignore[no-untyped-def]
        doomed = asyncio.ensure_future(poll_rounds.call(time.sleep, 0.2))
        kept = asyncio.ensure_future(poll_rounds.call(lambda: "kept"))
        await asyncio.sleep(poll_rounds.ROUND_S + 0.05)  # the round runs
        doomed.cancel()
        return await kept, await asyncio.gather(doomed, return_exceptions=True)

    kept, (doomed,) = run(main, CountingExecutor())
    assert kept == "kept" and isinstance(doomed, asyncio.CancelledError)


def test_a_slow_call_holds_up_only_its_own_round() -> None:
    release = threading.Event()

    async def main():  # type: ignore[no-untyped-def]
        stuck = asyncio.ensure_future(poll_rounds.call(release.wait, 10))  # a storage that hangs
        await asyncio.sleep(poll_rounds.ROUND_S * 3)  # its round is running, stuck
        started = time.monotonic()
        later = await asyncio.wait_for(poll_rounds.call(lambda: "next round"), timeout=5)
        took = time.monotonic() - started
        assert not stuck.done()
        release.set()
        return later, took, await stuck

    later, took, stuck = run(main, CountingExecutor())
    assert later == "next round" and took < 2.0 and stuck is True


def test_each_call_runs_in_its_callers_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("trigger", default="none")

    async def one(name: str) -> str:
        var.set(name)
        return await poll_rounds.call(var.get)

    async def main():  # type: ignore[no-untyped-def]
        return await asyncio.gather(*(asyncio.ensure_future(one(f"t{i}")) for i in range(20)))

    assert run(main, CountingExecutor()) == [f"t{i}" for i in range(20)]


def test_rounds_of_two_loops_stay_apart() -> None:
    def in_a_loop() -> list[int]:
        return run(lambda: asyncio.gather(*(poll_rounds.call(lambda i=i: i) for i in range(50))), CountingExecutor())

    results: list[list[int]] = []
    workers = [threading.Thread(target=lambda: results.append(in_a_loop())) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=10)
    assert results == [list(range(50))] * 2


@pytest.mark.parametrize("n", [1, 2])
def test_calls_further_apart_than_a_round_are_separate_rounds(n: int) -> None:
    executor = CountingExecutor()

    async def main():  # type: ignore[no-untyped-def]
        out = []
        for i in range(n + 1):
            out.append(await poll_rounds.call(lambda i=i: i))
        return out

    assert run(main, executor) == list(range(n + 1))
    assert executor.submissions == n + 1


def test_calls_of_one_group_run_one_after_another_and_the_others_keep_their_order() -> None:
    ran: list[str] = []

    async def scenario():  # type: ignore[no-untyped-def]
        calls = [("a", "s1"), ("b", None), ("c", "s2"), ("d", "s1"), ("e", None), ("f", "s2"), ("g", "s1")]
        return await asyncio.gather(*(poll_rounds.call(ran.append, name, group=group) for name, group in calls))

    executor = CountingExecutor()
    run(scenario, executor)
    assert executor.submissions == 1
    assert ran == ["a", "d", "g", "b", "c", "f", "e"]
