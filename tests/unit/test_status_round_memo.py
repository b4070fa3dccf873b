"""One parse of a stream's ``status.json`` per poll round, shared by its health and completeness polls.

The triggers of one stream poll on the same grid (``poll_rounds.next_delay``), so their polls fall in the
same round; inside a round, ``SparkStreamHook.status_parsed`` keeps what it parsed, keyed by the bytes
it read (never by a file's mtime, size or inode): a rewrite is never served stale."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
from test_completeness_trigger import Stream, hour

from airflow_streaming import json_object
from airflow_streaming.completeness import parse_rule
from airflow_streaming.control.contract import ControlFileError
from airflow_streaming.hooks.completeness import look
from airflow_streaming.triggers import poll_rounds
from airflow_streaming.triggers.completeness import SparkStreamCompletenessTrigger
from airflow_streaming.triggers.health import SparkStreamHealthTrigger, poll_once


def in_a_round(fn, *args):  # type: ignore[no-untyped-def]
    """``fn(*args)`` as a call of a round does (its round memo set): the round's list of results."""
    return poll_rounds._run_round([(__import__("contextvars").copy_context(), fn, args)])


@pytest.fixture
def parses(monkeypatch):
    """The parses of a status.json (``json_object`` calls on it: the hook's decoder)."""
    calls: list[str] = []
    real = json_object.json_object

    def counting(path, data, advice=""):  # type: ignore[no-untyped-def]
        if path.endswith("status.json"):
            calls.append(path)
        return real(path, data, advice)

    monkeypatch.setattr(json_object, "json_object", counting)
    return calls


# ----------------------------------------------------------------------------- the grid


@pytest.mark.parametrize("now", [0.0, 1.234, 99.99, 12345.678])
def test_the_grids_of_one_stream_meet_and_a_delay_stays_within_its_bounds(now: float) -> None:
    for interval in (0.5, 1.0, 5.0, 10.0):
        delay = poll_rounds.next_delay("events", interval, now)
        assert poll_rounds._MIN_GAP * interval < delay <= (1 + poll_rounds._MIN_GAP) * interval + 1e-9
    # Every point of the 10 s grid of a stream is a point of its 5 s grid: the two watches poll together.
    at10 = now + poll_rounds.next_delay("events", 10.0, now)
    assert poll_rounds.next_delay("events", 5.0, at10 - 0.3 * 5.0) == pytest.approx(0.3 * 5.0)
    # The streams are spread over a few phases (the load spread over the interval, the wake-ups shared).
    phases = {round(poll_rounds.next_delay(f"stream-{k}", 5.0, now), 6) for k in range(200)}
    assert len(phases) == poll_rounds._PHASES


def test_the_memo_lives_for_one_round_only() -> None:
    seen: list[object] = []
    assert poll_rounds.round_memo() is None
    in_a_round(lambda: seen.append(poll_rounds.round_memo()))
    assert seen == [{}] and poll_rounds.round_memo() is None
    elsewhere: list[object] = []
    thread = threading.Thread(target=lambda: elsewhere.append(poll_rounds.round_memo()))  # no round there
    thread.start()
    thread.join()
    assert elsewhere == [None]


# ----------------------------------------------------------------------------- the memo


def test_one_parse_per_round_for_the_same_bytes(tmp_path, parses) -> None:
    s = Stream(tmp_path)
    s.batch(0, hour(1))

    def twice():  # type: ignore[no-untyped-def]
        return s.hook.status_parsed(), s.hook.status_parsed()

    [(ok, (first, second))] = in_a_round(twice)
    assert ok and first is second and len(parses) == 1
    # Outside a round nothing is kept: each call parses.
    assert s.hook.status_parsed() is not s.hook.status_parsed() and len(parses) == 3


def test_a_rewrite_with_the_same_size_mtime_and_inode_is_not_served_stale(tmp_path, parses) -> None:
    """Written in place (no new inode), to the same size, its mtime set back: nothing a stat sees moved."""
    s = Stream(tmp_path)
    s.batch(0, hour(1))
    path = s.hook.paths.status
    before = os.stat(path)
    data = open(path, "rb").read()
    changed = data.replace(b'"version": "v7"', b'"version": "v8"')
    assert changed != data and len(changed) == len(data)

    def read_rewrite_read():  # type: ignore[no-untyped-def]
        first = s.hook.status_parsed()
        with open(path, "r+b") as fh:
            fh.write(changed)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = os.stat(path)
        assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
        return first, s.hook.status_parsed()

    [(ok, (first, second))] = in_a_round(read_rewrite_read)
    assert ok and first[1].version == "v7" and second[1].version == "v8" and len(parses) == 2


def test_an_atomic_replace_in_the_same_round_is_read_again(tmp_path) -> None:
    s = Stream(tmp_path)
    s.batch(0, hour(1))

    def read_replace_read():  # type: ignore[no-untyped-def]
        first = s.hook.status_parsed()
        s.batch(1, hour(2))  # the driver's reporter: temp file + rename
        return first, s.hook.status_parsed()

    [(ok, (first, second))] = in_a_round(read_replace_read)
    assert ok and first[1].queries[0].recent_progress[-1]["batchId"] == 0
    assert second[1].queries[0].recent_progress[-1]["batchId"] == 1


def test_garbage_raises_every_time_and_an_absent_status_is_none(tmp_path) -> None:
    s = Stream(tmp_path)
    assert in_a_round(s.hook.status_parsed) == [(True, None)]
    os.makedirs(os.path.dirname(s.hook.paths.status), exist_ok=True)
    with open(s.hook.paths.status, "wb") as fh:
        fh.write(b'{"schema": 1, "stream": "s1"}')

    def twice():  # type: ignore[no-untyped-def]
        errors = []
        for _ in range(2):
            try:
                s.hook.status_parsed()
            except ControlFileError as exc:
                errors.append(str(exc))
        return errors

    [(ok, errors)] = in_a_round(twice)
    assert ok and len(errors) == 2 and errors[0] == errors[1] and "state" in errors[0]


def test_the_health_verdict_and_the_periods_are_the_same_with_the_shared_parse(tmp_path, parses) -> None:
    s = Stream(tmp_path)
    rule = parse_rule({"period": "hourly"})
    for k in range(4):
        s.batch(k, hour(k + 1))
    now = time.time()
    alone_verdict = s.hook.health(now=now).to_dict()
    alone_look = look(s.hook, rule, None, None)
    parses.clear()

    def both():  # type: ignore[no-untyped-def]
        first = look(s.hook, rule, None, None)  # parses; the health poll of the round takes its parse
        return s.hook.health(now=now).to_dict(), first, poll_once(s.spec)

    [(ok, (verdict, shared_look, polled))] = in_a_round(both)
    assert ok and len(parses) == 1
    assert verdict == alone_verdict and polled["state"] == alone_verdict["state"]
    assert [e.extra() for e in shared_look.events] == [e.extra() for e in alone_look.events]
    assert len(alone_look.events) == 3 and shared_look.version == alone_look.version == "v7"


# ----------------------------------------------------------------------------- the triggers together


def test_a_streams_health_watch_and_completeness_watcher_parse_its_status_once_a_round(tmp_path, parses,
                                                                                       monkeypatch) -> None:
    from airflow_streaming.triggers import completeness as completeness_module
    from airflow_streaming.triggers import health as health_module

    s = Stream(tmp_path)
    s.batch(0, hour(1))
    reads: list[float] = []
    real = s.hook.storage.unguarded.read_bytes

    def counting(path):  # type: ignore[no-untyped-def]
        if path.endswith("status.json"):
            reads.append(time.monotonic())
        return real(path)

    s.hook.storage.unguarded.read_bytes = counting  # the hook the triggers share (spec_hooks.hook_for)
    from airflow_streaming.spec_hooks import _hooks, _mutex
    import json
    with _mutex:
        _hooks[json.dumps(s.spec, sort_keys=True, default=str)] = (time.monotonic(), s.hook)
    polls: dict[str, int] = {"health": 0, "completeness": 0}

    def counted(kind, fn):  # type: ignore[no-untyped-def]
        def call(*args):  # type: ignore[no-untyped-def]
            polls[kind] += 1
            return fn(*args)
        return call

    monkeypatch.setattr(health_module, "poll_verdict", counted("health", health_module.poll_verdict))
    monkeypatch.setattr(completeness_module, "_look", counted("completeness", completeness_module._look))
    health = SparkStreamHealthTrigger(s.spec, "watch", 0.3, watch_seconds=3600.0, fail_on=())
    completeness = SparkStreamCompletenessTrigger(spec=s.spec, rule={"period": "hourly"}, poll_interval=0.3)

    async def main() -> None:
        async def drain(trigger):  # type: ignore[no-untyped-def]
            async for _ in trigger.run():
                pass

        tasks = [asyncio.create_task(drain(health)), asyncio.create_task(drain(completeness))]
        await asyncio.sleep(2.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert polls["health"] >= 4 and polls["completeness"] >= 4, polls  # both watches polled, several times
    # Each round read the status once and parsed it once: the second poll of the stream in the round took
    # what the first one read. The completeness watcher's first look comes a round after the health watch's
    # first poll (it reads its cursor first): a read more.
    assert len(reads) <= polls["health"] + 2, (len(reads), polls)
    assert len(parses) <= len(reads), (len(parses), len(reads))
    # Without the shared grid, read and parse, each poll would be a read and a parse.
    assert len(parses) < 0.7 * (polls["health"] + polls["completeness"]), (len(parses), polls)
