"""The Spark Connect bench stops cleanly when a run fails (stop 46's CI: its smoke hung for 300 s).

Two faults, both met in CI: a child of the Connect server ended between the listing of the server's
processes and the reading of their memory, and the failed run then never exited, because the Connect
client's exit hook called the stopped server with retries for minutes. Real processes, no Spark JVM:
the "server" is a port nothing listens on.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def connect_bench():
    """The bench as a module; what its import sets in the environment and on sys.path is put back."""
    environ, path = dict(os.environ), list(sys.path)
    sys.path.insert(0, os.path.join(REPO, "bench"))
    try:
        import connect_bench

        yield connect_bench
    finally:
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path


def test_a_process_that_ended_after_it_was_listed_counts_for_nothing(connect_bench):
    alive = subprocess.Popen(["sleep", "30"])
    gone = subprocess.Popen(["sleep", "30"])
    try:
        listed = [psutil.Process(alive.pid), psutil.Process(gone.pid)]
        gone.kill()
        gone.wait()
        with pytest.raises(psutil.NoSuchProcess):
            listed[1].memory_info()
        assert connect_bench.resident_mib(listed) == round(listed[0].memory_info().rss / 2**20, 1) > 0
    finally:
        alive.kill()
        alive.wait()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CLIENT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {bench!r})
    import connect_bench
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote("sc://127.0.0.1:{port}").getOrCreate()
    print("session", flush=True)
    if sys.argv[1] == "close":
        connect_bench.close_client(session)
""")


def _run_client(how: str, limit: float) -> tuple[int | None, float, str]:
    """Run a Connect client of a server that is gone; its exit code (None if it outlived ``limit``)."""
    script = CLIENT.format(bench=os.path.join(REPO, "bench"), port=_closed_port())
    proc = subprocess.Popen([sys.executable, "-c", script, how], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"}, start_new_session=True)
    started = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=limit)
        return proc.returncode, time.monotonic() - started, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, time.monotonic() - started, out.decode(errors="replace")


def test_a_client_whose_server_is_gone_exits_once_closed_and_hangs_if_not():
    # The hazard itself: left open, the client's exit hook retries against the dead server for minutes.
    code, _, out = _run_client("leave", limit=20)
    assert "session" in out, out
    assert code is None, f"an open client of a dead server exited ({code}); the bench's close is not needed:\n{out}"
    # The bench's close: the same process exits at once.
    code, took, out = _run_client("close", limit=60)
    assert code == 0, f"a closed client of a dead server did not exit cleanly ({code}, {took:.0f}s):\n{out}"
