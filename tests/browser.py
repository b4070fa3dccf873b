"""Debian's chromium through Playwright, for the tests (and benches) that drive the Streams page in a
real browser. Never ``playwright install``: the browser is the system's (scripts/setup_env.sh)."""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import psutil

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
        "--disable-extensions", "--no-first-run"]


@contextlib.contextmanager
def chromium(executable: str | None = None) -> Iterator[Any]:
    """A headless browser; the processes Playwright and the browser started are stopped by pid at the end
    (only those: what else the caller started is the caller's to stop)."""
    from playwright.sync_api import sync_playwright

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    pw = sync_playwright().start()
    started = [p for p in me.children(recursive=True) if p.pid not in before]
    try:
        browser = pw.chromium.launch(executable_path=executable or CHROMIUM, headless=True, args=ARGS)
        started = [p for p in me.children(recursive=True) if p.pid not in before]
        try:
            yield browser
        finally:
            browser.close()
    finally:
        pw.stop()
        for proc in started:
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    print(f"killing leftover browser process {proc.pid} {proc.name()}", file=sys.stderr)
                    proc.kill()
            except psutil.Error:
                pass
