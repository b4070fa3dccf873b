"""The driver's watchdog of the JVM that launched it (exit code ``6``)."""

from __future__ import annotations

import os
import sys
import threading
import time

from airflow_streaming.control.contract import EXIT_JVM_GONE


def exit_when_jvm_is_gone(poll_seconds: float = 0.2) -> threading.Thread | None:
    """Exit this Python process as soon as the driver JVM that launched it is gone.

    spark-submit runs a Python application as a child of the driver JVM (``PythonRunner``), and that
    JVM never kills its child: when a cluster manager kills the driver (the standalone worker sends
    SIGTERM, then SIGKILL, to the JVM only), the Python process lives on as an orphan with a dead
    py4j gateway - it can no longer stop at a batch boundary or write anything meaningful, yet it
    still holds a pid on the worker and may touch the control directory. It exits here instead,
    immediately and without running cleanup (its writes would go through the dead JVM, or describe
    a run the cluster manager already reported killed). Started only when a JVM launched this
    process (``PYSPARK_GATEWAY_PORT`` is set); returns the watching thread, or None.
    """
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    parent = os.getppid()

    def gone(reason: str) -> None:
        try:
            print(f"airflow-streaming: {reason}: exiting (code {EXIT_JVM_GONE})", file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - stderr was a pipe to the dead JVM
            pass
        os._exit(EXIT_JVM_GONE)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        gone(f"the driver JVM (pid {parent}) that launched this Python process is gone")

    thread = threading.Thread(target=watch, name="jvm-watchdog", daemon=True)
    thread.start()
    return thread
