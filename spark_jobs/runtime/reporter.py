"""The driver's status reporter: a StreamingQueryListener plus a periodic snapshot.

Every progress event and every heartbeat replaces the stream's ``status.json`` atomically with the
state of each query (``query.status``, a bounded ``recentProgress``, the last exception), the
driver's identity and counters for the run, and renews the driver's lease.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from airflow_streaming import faults
from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlPaths, Lease, QueryStatus, StatusDocument
from airflow_streaming.control.storage import ControlStorage, StorageError
from airflow_streaming.redaction import redact_text, remember_secrets, secret_values
from spark_jobs.runtime.writer_capture import trigger_of

log = logging.getLogger("airflow_streaming.runtime")

_MAX_MESSAGE = 4000
QUARANTINE_METRIC = "quarantined_rows"


def redact_error(error: dict[str, Any] | None) -> dict[str, Any] | None:
    """``error`` (a ``last_exception`` dict) with its message redacted: the status document feeds
    notifications, task logs and the lifecycle history, so no secret may reach it."""
    if not error or not error.get("message"):
        return error
    return {**error, "message": redact_text(str(error["message"]))[:_MAX_MESSAGE]}


def describe_exception(exc: BaseException | None, error_class: str | None = None) -> dict[str, Any] | None:
    """``{"message", "error_class"}`` for the status document, keeping Spark's error condition; the
    message is redacted (:func:`airflow_streaming.redaction.redact_text`: patterns and the session's
    secret conf values)."""
    if exc is None:
        return None
    from airflow_streaming.supervision.classification import root_error_class, spark_error_class

    if error_class is None:
        error_class = spark_error_class(exc)

    message = str(exc).strip() or type(exc).__name__
    return {"message": redact_text(message)[:_MAX_MESSAGE],
            "error_class": root_error_class(error_class, message) or type(exc).__name__}


def remember_session_secrets(spark: SparkSession) -> None:
    """Remember the values of the session's sensitive conf (see :mod:`airflow_streaming.redaction`), so
    that every later redaction in this driver masks them wherever they appear."""
    try:
        remember_secrets(secret_values(dict(spark.sparkContext.getConf().getAll())))
    except Exception:  # noqa: BLE001 - the patterns still apply
        log.warning("could not read the session's conf to mask its secrets", exc_info=True)


def progress_dict(progress: Any) -> dict[str, Any]:
    """One progress entry as a plain dict, whichever form this pyspark hands it in.

    A listener event's ``progress`` is a ``StreamingQueryProgress`` (its ``.json`` is Spark's own JSON) on
    every line; ``query.recentProgress`` / ``lastProgress`` give ``StreamingQueryProgress`` objects in
    pyspark 4.x but plain dicts (already parsed JSON) in pyspark 3.5. The 4.x class also subclasses
    ``dict`` (without being one to read: its ``get`` raises), so the test is its ``json`` text."""
    text = getattr(progress, "json", None)
    if isinstance(text, str):
        return json.loads(text)
    return dict(progress)


class _Listener(StreamingQueryListener):
    def __init__(self, reporter: StatusReporter):
        self._reporter = reporter

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's API
        self._reporter.on_started(str(event.id))

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        self._reporter.on_progress(progress_dict(event.progress))

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        self._reporter.on_idle(str(event.id))

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        if event.exception:
            message = event.exception.strip()
            from airflow_streaming.supervision.classification import root_error_class

            error_class = root_error_class(event.errorClassOnException, message) or "UNKNOWN"
            self._reporter.on_query_failed(str(event.id), {"message": redact_text(message)[:_MAX_MESSAGE],
                                                           "error_class": error_class})


class StatusReporter:
    """Keeps the status document of one driver current."""

    def __init__(
        self,
        storage: ControlStorage,
        paths: ControlPaths,
        doc: StatusDocument,
        lease: Lease,
        heartbeat_seconds: float,
        recent_limit: int = contract.RECENT_PROGRESS_LIMIT,
        remote: bool = False,
    ):
        self.storage = storage
        self.paths = paths
        self.doc = doc
        self.lease = lease
        self.heartbeat_seconds = heartbeat_seconds
        self.recent_limit = recent_limit
        self._lock = threading.RLock()
        self._queries: dict[str, Any] = {}  # query id -> StreamingQuery
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._spark: SparkSession | None = None
        self.on_lease_lost: Any = lambda: None
        """Called (from the reporter thread) when another driver took the lease over, or when the lease
        could not be renewed for half its ttl (another host may judge it stale soon)."""
        self.on_new_query: Any = lambda query, checkpoint: None
        """Called once per query when it is first seen, with its resolved checkpoint root."""
        self.remote = remote
        """Remote storage (HDFS...): progress is written with the next heartbeat, not on every event."""
        self.lease_renew_seconds = contract.lease_renew_seconds(heartbeat_seconds, lease.ttl, remote)
        self._lease_ok_at = time.monotonic()
        self._lease_gone = False  # lost, or not renewable for half its ttl: another driver may own the stream
        self._write_skipped = False
        self.progress_sinks: list[Any] = []
        self._last_progress: dict[str, tuple[str, str]] = {}  # query id -> (run id, timestamp) applied last
        """Callables given every progress dict after the status write (e.g. a Kafka exporter); errors are logged."""

    # ------------------------------------------------------------------ lifecycle
    def attach(self, spark: SparkSession) -> None:
        """Register the listener on the session and start the snapshot thread."""
        self._spark = spark
        remember_session_secrets(spark)
        self.doc.app_id = spark.sparkContext.applicationId
        self.doc.spark_ui = spark.sparkContext.uiWebUrl
        self.doc.master = spark.sparkContext.master
        spark.streams.addListener(_Listener(self))
        self.start()

    def start(self) -> None:
        """Renew the lease once, then start the snapshot loop and the lease watchdog. The lease was taken before
        the session started, which may take a minute on a busy machine: the watchdog must judge the half ttl
        from this renewal, not from the lease's acquisition (it would stop a healthy driver that started slowly);
        a renewal that fails here is judged like any other (lost: stop; unrenewed for half the ttl: stop)."""
        with self._lock:
            self._renew_lease(time.monotonic())
        self._thread = threading.Thread(target=self._run, name="status-reporter", daemon=True)
        self._thread.start()
        threading.Thread(target=self._watch_lease, name="lease-watchdog", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def carry_over(self) -> None:
        """Before this run's first write: keep the counting fields of the progress that the status document it
        replaces holds (that document's ``earlier_progress``, then its queries' ``recent_progress``) in this
        run's ``earlier_progress``, when it is a document of the same stream. A period whose batches ran under
        two drivers (a kill, an upgrade, a failover) then still has its row counts, whoever watches it, even a
        watch started after this driver. The old document may belong to another user (``run_as_user``): it is
        only read. Its ``counters`` (the running row counts per query) are continued the same way. Unreadable or
        garbage: nothing is carried (counts of such a period are unknown, never wrong),
        and the run starts all the same."""
        try:
            raw = contract.json_object_or_none(self.storage.read_bytes(self.paths.status))
        except (StorageError, OSError) as exc:
            log.warning("could not read the previous status document %s: the row counts of the periods "
                        "before this run are not carried over: %s", self.paths.status, exc)
            return
        if raw is None or raw.get("stream") != self.doc.stream:
            return
        earlier = raw.get("earlier_progress")
        reports = [p for q in (raw.get("queries") if isinstance(raw.get("queries"), list) else [])
                   if isinstance(q, dict) and isinstance(q.get("recent_progress"), list) for p in q["recent_progress"]]
        given = [*(earlier if isinstance(earlier, list) else []), *reports]
        with self._lock:
            self.doc.earlier_progress = contract.carry_progress(given, self.doc.earlier_progress)
            carried = len(self.doc.earlier_progress)
            # The running sums go on from the previous run's (each query's epoch continues at its next batch).
            previous = raw.get("counters")
            self.doc.counters = {**contract.carry_counters(previous), **self.doc.counters}
        if previous not in (None, {}) and (not isinstance(previous, dict) or len(self.doc.counters) < len(previous)):
            log.warning("the counters of %s are not all valid: the garbage ones are not carried over (the row counts "
                        "of the periods they covered are unknown)", self.paths.status)
        log.info("carried the counts of %d progress report(s) and the counters of %d quer%s of run %s over from %s",
                 carried, len(self.doc.counters), "y" if len(self.doc.counters) == 1 else "ies", raw.get("run_id"),
                 self.paths.status)

    def queries(self) -> list[Any]:
        """Every query seen so far (active or not)."""
        with self._lock:
            return list(self._queries.values())

    # ------------------------------------------------------------------ updates
    def set_state(self, state: str, **fields: Any) -> None:
        with self._lock:
            self.doc.state = state
            for key, value in fields.items():
                setattr(self.doc, key, value)
            self.write()

    def _lease_still_ours(self) -> bool:
        """Whether the lease names this driver or nobody; ``False`` when it cannot be read (fail closed)."""
        try:
            current = contract.read_lease(self.storage, self.paths)
        except (OSError, contract.ControlFileError):
            return False
        return current is None or current.run_id == self.lease.run_id

    def write(self) -> None:
        with self._lock:
            if self._lease_gone and not self._lease_still_ours():
                # A driver that lost its lease (say, cut off from the control storage past half the ttl) must
                # not put its status over a new driver's: a write begun during the cut can land once the link
                # heals. It writes only after reading the lease, and only while that names it or nobody.
                if not self._write_skipped:
                    log.warning("not writing %s: this driver lost its lease, and the lease names another driver "
                                "or cannot be read", self.paths.status)
                self._write_skipped = True
                return
            self.doc.heartbeat_at = time.time()
            # Whoever set them: Spark's own texts (a query's status message holds its exception) may quote
            # a secret, and this document feeds task logs, notifications and the lifecycle history.
            self.doc.last_exception = redact_error(self.doc.last_exception)
            for query in self.doc.queries:
                if query.status.get("message"):
                    query.status = {**query.status, "message": redact_text(str(query.status["message"]))}
            try:
                contract.write_status(self.storage, self.paths, self.doc)
            except OSError as exc:  # a full or failing disk never stops the stream
                self.note_storage_error(f"status: {exc}")
                count = (self.doc.storage_errors or {}).get("count", 1)
                if count == 1 or count % 20 == 0:
                    log.error("could not write %s (error %s; the stream keeps running): %s", self.paths.status,
                              count, exc)

    def _query_entry(self, query_id: str) -> QueryStatus | None:
        return next((q for q in self.doc.queries if q.id == query_id), None)

    def on_progress(self, progress: dict[str, Any]) -> None:
        with self._lock:
            if progress.get("timestamp"):  # Spark's ISO-8601 UTC timestamps order as strings
                key = (str(progress.get("runId")), str(progress["timestamp"]))
                last = self._last_progress.get(progress["id"])
                if last is not None and last[0] == key[0] and key[1] <= last[1]:
                    return  # already applied (by settle(), or delivered before settle() read it)
                self._last_progress[progress["id"]] = key
            # After the batch's commit; once per batch, not again for a progress settle() re-reads.
            faults.hit("driver.progress", f"batch={progress.get('batchId')}:committed;")
            entry = self._query_entry(progress["id"])
            if entry is None:
                entry = QueryStatus(id=progress["id"], run_id=progress["runId"], name=progress.get("name"), active=True)
                self.doc.queries.append(entry)
            kept = entry.recent_progress + [progress]
            if len(kept) > self.recent_limit:  # their counts stay in earlier_progress (the completeness watch's)
                self.doc.earlier_progress = contract.carry_progress(self.doc.earlier_progress,
                                                                    kept[: -self.recent_limit])
            entry.recent_progress = kept[-self.recent_limit :]
            self.doc.counters = contract.count_report(self.doc.counters, progress)
            entry.last_batch_id = progress["batchId"]
            totals = self.doc.totals
            totals["batches"] += 1
            totals["input_rows"] += int(progress.get("numInputRows") or 0)
            for metrics in (progress.get("observedMetrics") or {}).values():
                totals["quarantined_rows"] += int(metrics.get(QUARANTINE_METRIC) or 0)
            was_ready, self.doc.ready = self.doc.ready, True
            if not (self.remote and was_ready):  # remote: the next heartbeat carries it (docs/hdfs.md)
                self.write()
        for sink in list(self.progress_sinks):
            try:
                sink(progress)
            except Exception:  # noqa: BLE001 - a sink must never take the listener down
                log.exception("progress sink %r failed", sink)

    def settle(self) -> None:
        """Apply the progress the queries made that the listener has not delivered yet.

        Spark's listener bus is asynchronous: the event of the last batch before a stop can arrive after
        ``query.stop()`` returned, and the exit record would then name an older batch than the
        checkpoint's last commit. A query's own ``recentProgress`` is updated by its stream thread, so
        it is complete once the query stopped; whatever the listener delivers later is skipped."""
        for query in self.queries():
            try:
                progresses = [progress_dict(p) for p in query.recentProgress]
            except Exception:  # noqa: BLE001 - a stopped session may refuse calls: keep what the listener gave
                log.warning("could not read the recent progress of query %s at exit", query.id, exc_info=True)
                continue
            for progress in progresses:
                self.on_progress(progress)
        with self._lock:  # a query that ended before a snapshot saw its trigger (an availableNow job)
            for entry in self.doc.queries:
                if entry.trigger is None:
                    entry.trigger = trigger_of(entry.id)

    def on_started(self, query_id: str) -> None:
        """A query started: record it (and its checkpoint) before its first batch runs."""
        try:
            if self._spark is not None and self._snapshot():
                self.write()
        except Exception:  # noqa: BLE001 - a listener must never take the driver down
            log.exception("recording the started query %s failed", query_id)

    def note_storage_error(self, message: str) -> None:
        """Count a control-storage error in the status document (the stream keeps running)."""
        with self._lock:
            errors = self.doc.storage_errors or {"count": 0}
            self.doc.storage_errors = {"count": int(errors.get("count", 0)) + 1, "last": redact_text(message)[:500],
                                       "at": time.time()}

    def on_idle(self, query_id: str) -> None:
        with self._lock:
            if not self.doc.ready:
                self.doc.ready = True
                self.write()

    def on_query_failed(self, query_id: str, error: dict[str, Any]) -> None:
        with self._lock:
            self.doc.last_exception = error
            self.write()

    # ------------------------------------------------------------------ snapshot loop
    def _snapshot(self) -> bool:
        """Refresh every query's status; return whether something a reader waits for changed."""
        changed = False
        spark = self._spark
        active = list(spark.streams.active) if spark is not None else []
        with self._lock:
            new = []
            for query in active:
                if str(query.id) not in self._queries:
                    self._queries[str(query.id)] = query
                    new.append(query)
                    changed = True
            for query_id, query in self._queries.items():
                entry = self._query_entry(query_id)
                if entry is None:
                    entry = QueryStatus(id=query_id, run_id=str(query.runId), name=query.name, active=True)
                    self.doc.queries.append(entry)
                if entry.trigger is None:  # recorded when the job's start() returned (after onQueryStarted)
                    entry.trigger = trigger_of(query_id)
                if query_id not in self.doc.query_checkpoints:
                    checkpoint = self.checkpoint_of(query)
                    if checkpoint:
                        self.doc.query_checkpoints[query_id] = checkpoint
                try:
                    entry.active = query.isActive
                    entry.status = dict(query.status)
                except Exception:  # noqa: BLE001 - a stopping session may refuse calls
                    continue
        for query in new:
            try:
                self.on_new_query(query, self.doc.query_checkpoints.get(str(query.id)))
            except Exception:  # noqa: BLE001
                log.exception("new-query check failed")
        return changed

    @property
    def lease_renewed_ok_at(self) -> float:
        """``time.monotonic()`` of the last successful lease renewal (or of the start)."""
        return self._lease_ok_at

    def _renew_lease(self, now: float) -> None:
        """Renew the lease (compare-and-swap). Lost: stop at once. Not renewable for half its ttl (the
        storage fails): stop too, before another host may judge the lease stale and start a second driver.
        Once given up, never renewed again: a cut that heals while the driver is still on its way out (its
        exit path retries the storage) would otherwise make its stale lease fresh again, just as a new
        driver comes to take it over - and refuse that one."""
        if self._lease_gone:
            return
        try:
            self.lease = contract.renew_lease(self.storage, self.paths, self.lease)
            self._lease_ok_at = now
            return
        except contract.LeaseLostError as exc:
            # Another driver owns the stream now: never keep two drivers on one checkpoint.
            log.error("lease lost, stopping at once: %s", exc)
            self.doc.last_exception = {"message": str(exc), "error_class": "LEASE_LOST"}
            self._lease_gone = True
            self.on_lease_lost()
            return
        except StorageError as exc:
            self.note_storage_error(f"lease: {exc}")
            unrenewed = time.monotonic() - self._lease_ok_at  # the call itself may have hung for its timeouts
            log.error("cannot renew the lease for %.0fs (retrying): %s", unrenewed, exc)
            if unrenewed > self.lease.ttl / 2:
                self._give_up_lease(unrenewed, f"Last error: {exc}")

    def _give_up_lease(self, unrenewed: float, why: str) -> None:
        """Not renewed for half the ttl: stop, before another host may judge the lease stale (once)."""
        if self._lease_gone:
            return
        self._lease_gone = True
        message = (f"the lease {self.paths.lease} could not be renewed for {unrenewed:.0f}s (half its ttl "
                   f"{self.lease.ttl:.0f}s): stopping so that no second driver can start beside this one. {why}")
        log.error("%s", message)
        self.doc.last_exception = {"message": message, "error_class": "LEASE_EXPIRED"}
        self.on_lease_lost()

    def _watch_lease(self) -> None:
        """The half-ttl rule on its own clock. The renewal runs in the snapshot loop, where one call to a storage
        that does not answer (a dropped route: a 10 s connect, a 30 s read timeout), and the status write after
        it, can hold the loop longer than the ttl itself; the rule must not wait for them (partition trial (a)
        with a 30 s ttl: the renewal hung 38 s). Needs no lock (the loop may hold it, hung)."""
        while not self._stop.wait(0.5):
            unrenewed = time.monotonic() - self._lease_ok_at
            if not self._lease_gone and unrenewed > self.lease.ttl / 2:
                self._give_up_lease(unrenewed, (
                    "No renewal has completed (the watchdog's word): the storage has not answered, or the reporter's "
                    "loop is stuck - other hosts cannot tell which."))

    def _run(self) -> None:
        next_heartbeat = 0.0
        next_renewal = 0.0
        while not self._stop.is_set():
            try:
                changed = self._snapshot()
                now = time.monotonic()
                if changed or now >= next_heartbeat:
                    with self._lock:
                        if now >= next_renewal:
                            self._renew_lease(now)
                            # After a failure, retry at the next heartbeat rather than a full period later.
                            next_renewal = now + (self.lease_renew_seconds if self._lease_ok_at == now
                                                  else self.heartbeat_seconds)
                        self.write()
                    next_heartbeat = now + self.heartbeat_seconds
            except Exception:  # noqa: BLE001 - the reporter must never take the driver down
                log.exception("status snapshot failed")
            self._stop.wait(0.2)

    def checkpoint_of(self, query: Any) -> str | None:
        """The resolved checkpoint root of a query (internal API; ``None`` where unavailable)."""
        try:
            return str(query._jsq.streamingQuery().resolvedCheckpointRoot())
        except Exception:  # noqa: BLE001
            return None


