"""Run a bundled job's own plan once in a prepared driver, before it is promoted.

The first batch of a query in a fresh JVM costs far more than the batches after it: code generation of
the plan, class loading, the first tasks of a stateful operator (BENCHMARKS.md, "Where a warm upgrade's
downtime goes": 2.1 s against 0.8 s). A standby that waits with its query only *planned* pays that
first-batch cost after the switch, while the stream is down. Here the standby pays it before:

1. it copies the files that replay the checkpoint's last committed batch (the choice is
   :func:`airflow_streaming.checkpoint.replay_copy.choose_replay_copy`) into a scratch checkpoint
   under the stream's control directory (``warm-up/<run id>``: storage the driver and its executors
   can reach, and the driver may write);
2. it starts the job's own writer on that copy with the sink replaced by Spark's ``noop`` sink and a
   one-batch trigger: batch N runs once, through the job's real sources, plan and state, and writes
   nothing anywhere;
3. it deletes the copy.

The checkpoint is only read; the sink is never written (``noop`` replaces the job's format, a
``foreachBatch`` function included). A warm-up that fails or is skipped costs only its own time: the
standby goes on, and its first batch is as slow as before. ``spark.airflow_streaming.warmUp.maxBytes``
(Spark conf, default 256 MiB) caps the copy; ``0`` turns the warm-up off.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from airflow_streaming.checkpoint.replay_copy import ReplayCopy, choose_replay_copy
from airflow_streaming.control.storage import ControlStorage

log = logging.getLogger("airflow_streaming.runtime")

MAX_BYTES_CONF = "spark.airflow_streaming.warmUp.maxBytes"
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
TIMEOUT_S = 300.0

__all__ = ["DEFAULT_MAX_BYTES", "MAX_BYTES_CONF", "SCRIPT_CONF", "copy_for_replay", "plan_script", "warm_up_plan"]

SCRIPT_CONF = "spark.airflow_streaming.warmUp.script"
"""``false``: a standby does not run a user script up to its first ``start()`` (see :func:`plan_script`)."""


def plan_script(spark: Any, ns: Any) -> Any:
    """Run the user script ``ns.script`` up to its first ``start()``/``toTable()``, which is held: the
    script's own streaming DataFrame and writer settings come back as a
    :class:`~spark_jobs.runtime.writer_capture.PlannedQuery` (``None``: off, or the script ended or failed
    before starting a query - the standby goes on without a replay). The script's code before its first
    start runs here, in the standby, while the running version still runs (docs/own-job.md); Spark conf
    ``spark.airflow_streaming.warmUp.script=false`` turns this off."""
    import runpy
    import sys

    from spark_jobs.runtime.writer_capture import PlannedQuery, planning

    if str(spark.conf.get(SCRIPT_CONF, "true")).lower() == "false":
        log.info("standby: the script is not planned ahead (%s=false)", SCRIPT_CONF)
        return None
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    saved_argv = sys.argv
    sys.argv = [ns.script, *ns.app_args]
    # A script that stops its session on the way out (`try: ... finally: spark.stop()`, `with session:`) must not
    # stop the standby's: the held start() unwinds through it. Nothing started, so there is nothing to stop.
    saved_stops = SparkSession.stop, SparkContext.stop
    SparkSession.stop = SparkContext.stop = _not_while_planning  # type: ignore[method-assign, assignment]
    try:
        with planning():
            runpy.run_path(ns.script, run_name="__main__")
    except PlannedQuery as planned:
        log.info("standby: planned the script's first query (%s)", planned)
        return planned
    except BaseException as exc:  # noqa: BLE001 - the real start will meet (and report) the same error
        log.info("standby: the script failed before its first query (no replay): %s: %s", type(exc).__name__,
                 str(exc).splitlines()[0][:300] if str(exc) else "")
        return None
    finally:
        sys.argv = saved_argv
        SparkSession.stop, SparkContext.stop = saved_stops  # type: ignore[method-assign]
    log.info("standby: the script ended without starting a query (no replay)")
    return None


def copy_for_replay(storage: ControlStorage, checkpoint: str, scratch_storage: ControlStorage, scratch: str,
                    max_bytes: int) -> ReplayCopy:
    """Copy the files that replay ``checkpoint``'s last committed batch into ``scratch`` (see
    :func:`~airflow_streaming.checkpoint.replay_copy.choose_replay_copy`); reads only the checkpoint."""
    chosen = choose_replay_copy(storage.list_tree(checkpoint), max_bytes)
    for rel in chosen.files:
        data = storage.read_bytes(f"{checkpoint}/{rel}")
        if data is None:  # a state file the running driver's maintenance deleted meanwhile: it was older
            continue
        parent = f"{scratch}/{rel}".rsplit("/", 1)[0]
        scratch_storage.makedirs(parent)
        scratch_storage.write_atomic(f"{scratch}/{rel}", data)
    return chosen


def _scratch_uri(control_dir: str, path: str) -> str:
    """The scratch checkpoint as Spark must be told it: local paths as ``file://`` (so that a cluster's
    default file system does not claim them), other schemes as they are."""
    from urllib.parse import urlparse

    parsed = urlparse(control_dir)
    if parsed.scheme in ("", "file"):
        return f"file://{path}"
    return f"{parsed.scheme}://{parsed.netloc}{path}"


def _not_while_planning(self: Any, *args: Any, **kwargs: Any) -> None:
    log.info("standby: the script's stop of its session was skipped while its query was planned")


def warm_up_plan(spark: Any, ns: Any, planned: Any = None) -> float | None:
    """Replay the last committed batch of the job's checkpoint with the job's plan into a ``noop`` sink.
    A bundled job's writer is built here; a user script's query is ``planned`` (a
    :class:`spark_jobs.runtime.writer_capture.PlannedQuery`: the script's own streaming DataFrame, output
    mode and checkpoint, held at its first ``start()``). Returns the seconds it took, ``None`` when
    skipped; never raises (a warm-up only)."""
    from airflow_streaming.bundled_job import JobContext, bundled_writer, query_name
    from spark_jobs.runtime.hadoop_storage import driver_storage

    if not ns.job and planned is None:
        return None  # a user script whose query could not be planned (see plan_script): nothing to replay
    if planned is not None and not planned.checkpoint:
        log.info("standby: plan warm-up skipped: the script's query names no checkpointLocation option")
        return None
    try:
        max_bytes = int(spark.conf.get(MAX_BYTES_CONF, str(DEFAULT_MAX_BYTES)))
    except (TypeError, ValueError):
        max_bytes = DEFAULT_MAX_BYTES
    if max_bytes <= 0:
        log.info("standby: plan warm-up off (%s=%s)", MAX_BYTES_CONF, max_bytes)
        return None
    started = time.monotonic()
    scratch_storage, control_root = driver_storage(ns.control_dir)
    scratch = f"{control_root}/warm-up/{ns.run_id}"
    query = None
    try:
        storage, checkpoint = driver_storage(planned.checkpoint if planned is not None else ns.checkpoint)
        scratch_storage.delete_tree(scratch)
        chosen = copy_for_replay(storage, checkpoint, scratch_storage, scratch, max_bytes)
        if chosen.skipped:
            log.info("standby: plan warm-up skipped: %s", chosen.skipped)
            return None
        copied = time.monotonic() - started
        scratch_uri = _scratch_uri(ns.control_dir, scratch)
        if planned is not None:  # the script's own plan and output mode; its sink is never touched
            writer = planned.df.writeStream.option("checkpointLocation", scratch_uri)
            writer = writer.outputMode(planned.output_mode) if planned.output_mode else writer
        else:
            ctx = JobContext(ns.stream, ns.version, scratch_uri, ns.trigger_seconds)
            writer = bundled_writer(spark, ns.job, list(ns.app_args), ctx)
        query = (writer.format("noop").trigger(once=True)
                 .queryName(f"{query_name(ns.stream)}_warm_up").start())
        try:
            ended = query.awaitTermination(TIMEOUT_S)  # raises the query's own exception if the replay failed
            failure: Any = query.exception() if ended else f"it did not end within {TIMEOUT_S:.0f}s"
        except Exception as exc:  # noqa: BLE001 - the replay's failure, reported below
            failure = exc
        seconds = time.monotonic() - started
        if failure is not None:
            log.info("standby: plan warm-up replay of batch %s failed after %.2fs (the standby goes on): %s",
                     chosen.batch, seconds, str(failure).splitlines()[0][:300])
            return None
        log.info("standby: plan warm-up replayed batch %s (%d files, %d bytes copied in %.2fs) in %.2fs",
                 chosen.batch, len(chosen.files), chosen.bytes, copied, seconds)
        return seconds
    except Exception as exc:  # noqa: BLE001 - only a warm-up: the standby goes on without it
        log.info("standby: plan warm-up failed (the standby goes on): %s: %s", type(exc).__name__,
                 str(exc).splitlines()[0][:300] if str(exc) else "")
        return None
    finally:
        if query is not None:
            from spark_jobs.runtime.writer_capture import forget

            forget(query.id)  # the copy's query id is the job's: its trigger is the job's, not this once
        if query is not None and query.isActive:
            try:
                query.stop()
            except Exception:  # noqa: BLE001
                log.warning("standby: the warm-up query did not stop", exc_info=True)
        try:
            scratch_storage.delete_tree(scratch)
        except Exception:  # noqa: BLE001 - left behind; the next warm-up of this run id deletes it
            log.warning("standby: could not delete the warm-up copy %s", scratch, exc_info=True)
