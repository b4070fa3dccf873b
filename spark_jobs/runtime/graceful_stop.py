"""Stopping streaming queries at a micro-batch boundary.

``StreamingQuery.stop()`` cancels the batch in flight (its offsets are logged, its commit is not,
and Spark replays it on restart). There is no built-in "stop after the current batch", so we wait
until the query reports no active trigger and stop it then.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("airflow_streaming.runtime")

POLL_SECONDS = 0.005


def stop_at_batch_boundary(query: Any, abort: threading.Event | None = None) -> None:
    """Stop ``query`` once no trigger is active. Returns when the query has stopped.

    ``abort`` (set by a second SIGTERM) makes it stop at once, cancelling a batch in flight.
    """
    waited_from = time.monotonic()
    logged = False
    while query.isActive:
        status = query.status
        if not status.get("isTriggerActive", False) or (abort is not None and abort.is_set()):
            query.stop()
            break
        if not logged and time.monotonic() - waited_from > 2:
            log.info("waiting for the batch in flight of query %s to finish before stopping", query.name)
            logged = True
        time.sleep(POLL_SECONDS)
    log.info("query %s stopped after %.2fs", query.name, time.monotonic() - waited_from)
