"""A line per test as it ends, appended to ``$AIRFLOW_STREAMING_TEST_PROGRESS`` (set by scripts/test.sh).

When CI stops a run at its time limit, pytest prints no summary and no durations; this file still says
which tests ended, how long each took, and which one was running (a ``start`` line without its ``end``).
"""

from __future__ import annotations

import os
import time

import pytest

_PATH = os.environ.get("AIRFLOW_STREAMING_TEST_PROGRESS")


def _write(line: str) -> None:
    if _PATH:
        with open(_PATH, "a", encoding="utf-8") as out:
            out.write(line + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    began = time.monotonic()
    _write(f"start {time.strftime('%H:%M:%S')} {item.nodeid}")
    outcome = yield
    _write(f"end {time.monotonic() - began:.1f} {item.nodeid}")
    return outcome
