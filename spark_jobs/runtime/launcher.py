"""The driver-side runtime: ``spark_jobs/launch.py`` runs :func:`main` inside spark-submit.

It takes the stream's lease, builds the SparkSession, starts the bundled job's query (or runs an
unmodified user script and attaches to the queries it starts), keeps the status document current,
watches the run marker and SIGTERM, stops between micro-batches, and exits with:

- ``0`` graceful stop (or the script finished by itself),
- ``3`` a query failed,
- ``4`` startup failed (bad job, bad arguments, session or query start failure),
- ``5`` another live driver holds the stream's lease,
- ``6`` the JVM that launched this Python process is gone (see :func:`exit_when_jvm_is_gone`).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import runpy
import signal
import socket
import sys
import threading
import time
from typing import Any
from urllib.parse import urlparse

from airflow_streaming.application_source import checked_if_local, script_file
from airflow_streaming.control import contract
from airflow_streaming.control.contract import (
    EXIT_GRACEFUL,
    EXIT_LEASE_HELD,
    EXIT_QUERY_FAILED,
    EXIT_STARTUP_FAILED,
    ControlPaths,
    StatusDocument,
)
from airflow_streaming.control.storage import StorageError
from airflow_streaming.bundled_job import JobContext, bundled_writer, query_name
from spark_jobs.runtime.driver_session import DriverSession, forget_secret_properties, secret_conf_from_environment
from spark_jobs.runtime.gate_driver import run_gate_only
from spark_jobs.runtime.hadoop_storage import driver_storage
from spark_jobs.runtime.jvm_watchdog import exit_when_jvm_is_gone
from spark_jobs.runtime.lease_check import LeaseCheck
from spark_jobs.runtime.standby import Standby
from spark_jobs.runtime import writer_capture

__all__ = ["Driver", "JobContext", "bundled_writer", "exit_when_jvm_is_gone", "main", "query_name"]

log = logging.getLogger("airflow_streaming.runtime")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="spark_jobs/launch.py", description=__doc__)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--control-dir", required=True, help="the stream's control directory")
    parser.add_argument("--checkpoint", required=True)
    app = parser.add_mutually_exclusive_group(required=True)
    app.add_argument("--job", help="bundled job module in spark_jobs.jobs")
    app.add_argument("--script", help="an unmodified user PySpark script: an absolute path, local:/path, or a URI "
                                      "fetched through spark.files (application_source.script_file)")
    parser.add_argument("--trigger-seconds", type=float, default=5.0)
    parser.add_argument("--heartbeat-seconds", type=float, default=5.0)
    parser.add_argument("--lease-ttl", type=float, default=120.0)
    parser.add_argument("--marker-poll-seconds", type=float, default=None,
                        help="how often the run marker is checked (default 0.05 on local files, "
                             f"{contract.REMOTE_MARKER_POLL_SECONDS:g} on remote storage)")
    parser.add_argument("--standby", action="store_true",
                        help="prepare (session, planned query, warm-up) and wait until the run marker names this run")
    parser.add_argument("--standby-timeout", type=float, default=3600.0,
                        help="a standby never promoted within this many seconds exits without touching anything")
    parser.add_argument("--failover", action="store_true",
                        help="with --standby: the stream's hot standby - it does not expire, takes over a run that "
                             "crashed (airflow_streaming.control.takeover) and exits when the stream is stopped or "
                             "moves to another version")
    parser.add_argument("--master-rest-url", default=None,
                        help="with --failover: the standalone master's REST submission server, from the stream's own "
                             "spec and connection (never from a control file): its word proves a driver dead")
    parser.add_argument("--master-ui-url", default=None,
                        help="with --failover: the standalone master's web UI (its /json/), as --master-rest-url")
    parser.add_argument("--yarn-rm-url", default=None,
                        help="with --failover: the YARN ResourceManagers' web addresses (comma-separated, HA in "
                             "order), from the stream's own spec or yarn-site.xml (never from a control file): "
                             "their word that the run's application ended proves its driver dead")
    parser.add_argument("--kube-api-server", default=None,
                        help="with --failover: the Kubernetes API server, from the stream's own spec (never from a "
                             "control file), asked with this pod's own service account: its word that the run's "
                             "driver pod ended proves the driver dead")
    parser.add_argument("--gate-only", action="store_true",
                        help="run the compatibility gate of this application against --checkpoint, write the answer "
                             "to gate-report.json in the control directory and exit (touches nothing else)")
    parser.add_argument("--gate-no-dry-run", action="store_true", help="with --gate-only: no Spark dry run")
    parser.add_argument("--progress-kafka-bootstrap", default=os.environ.get("AIRFLOW_STREAMING_PROGRESS_KAFKA_BOOTSTRAP"),
                        help="export every progress event to Kafka at these bootstrap servers (optional)")
    parser.add_argument("--progress-kafka-topic", default=os.environ.get("AIRFLOW_STREAMING_PROGRESS_KAFKA_TOPIC"))
    parser.add_argument("app_args", nargs=argparse.REMAINDER, help="after '--': the application's own arguments")
    ns = parser.parse_args(argv)
    if ns.app_args and ns.app_args[0] == "--":
        ns.app_args = ns.app_args[1:]
    return ns


class Driver:
    """One run of a managed stream inside its driver process.

    Started with ``--gate-only`` it only runs the compatibility gate (:mod:`spark_jobs.runtime.gate_driver`);
    with ``--standby`` it first prepares and waits to be promoted (:mod:`spark_jobs.runtime.standby`)."""

    def __init__(self, ns: argparse.Namespace):
        self.ns = ns
        self.storage, control_dir = driver_storage(ns.control_dir)  # local files, or the JVM's Hadoop FileSystem
        self.paths = ControlPaths(control_dir)
        self.stop_requested = threading.Event()
        self.abort = threading.Event()
        self.reporter: Any = None
        self.spark: Any = None
        self.exporter: Any = None
        self.stopped_by_us = False
        self.prepared_writer: Any = None
        self.session = DriverSession(ns)
        """Builds this driver's SparkSession (its secret conf is read from the environment by :meth:`run`)."""
        self.graceful_done = False
        """Every query was stopped at a micro-batch boundary (not aborted, not killed)."""
        self.unresumable: str | None = None
        """Why a user script's query could never be resumed from its checkpoint (the run is refused)."""
        local = type(self.storage).__name__ == "LocalStorage"
        self.remote_storage = not local
        self.marker_poll = ns.marker_poll_seconds if ns.marker_poll_seconds is not None else (
            0.05 if local else contract.REMOTE_MARKER_POLL_SECONDS)
        self._next_marker_check = 0.0
        self._marker_errors = 0
        self.standby = (Standby(ns, self.storage, self.paths, self.remote_storage, self.stop_requested)
                        if ns.standby else None)
        """The standby side of this run (``--standby``): what it prepared, the lease a hot standby took over."""

    # ------------------------------------------------------------------ signals and marker
    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self.stop_requested.is_set():
            self.abort.set()  # a second SIGTERM: stop now, even mid-batch
        self.stop_requested.set()

    def _on_lease_lost(self) -> None:
        self.stop_requested.set()
        self.abort.set()

    def _stop_wanted(self) -> bool:
        """Whether a graceful stop was requested: SIGTERM, or the run marker *confirmed* absent.

        A marker that cannot be read (EIO, ESTALE, EACCES, a NameNode that does not answer) is not a
        stop request: the check is retried with bounded backoff, logged, and counted in the status
        document (``storage_errors``), and the stream keeps running."""
        if self.stop_requested.is_set():
            return True
        now = time.monotonic()
        if now < self._next_marker_check:
            return False
        try:
            present = contract.marker_present(self.storage, self.paths)
        except StorageError as exc:
            self._marker_errors += 1
            delay = min(5.0, self.marker_poll * 2 ** min(self._marker_errors, 8))
            self._next_marker_check = now + delay
            if self._marker_errors == 1 or self._marker_errors % 20 == 0:
                log.error("cannot check the run marker (error %d, not a stop request; next check in %.1fs): %s",
                          self._marker_errors, delay, exc)
            if self.reporter is not None:
                self.reporter.note_storage_error(f"run marker: {exc}")
            return False
        if self._marker_errors:
            log.info("run marker readable again after %d error(s)", self._marker_errors)
            self._marker_errors = 0
        self._next_marker_check = now + self.marker_poll
        if not present:
            log.info("run marker %s removed: stopping gracefully", self.paths.marker)
            self.stop_requested.set()
        return self.stop_requested.is_set()

    def _check_resumable(self, query: Any, checkpoint: str | None) -> None:
        """Refuse a user script's query whose checkpoint a restart could never find again: with neither
        ``checkpointLocation`` nor ``queryName``, Spark checkpoints to ``<checkpoint>/<random uuid>``
        (or a temporary directory), so a restart would silently start from nothing."""
        if not self.ns.script or not checkpoint or query.name:
            return
        path = urlparse(checkpoint).path or checkpoint
        parent, leaf = os.path.split(path.rstrip("/"))
        ours = (urlparse(self.ns.checkpoint).path or self.ns.checkpoint).rstrip("/")
        if not ((parent == ours and _UUID.fullmatch(leaf)) or os.path.basename(parent).startswith("temporary-")
                or leaf.startswith("temporary-")):
            return
        self.unresumable = (
            f"the script's streaming query has neither a checkpointLocation nor a queryName, so Spark checkpoints "
            f"it to {checkpoint}, a new directory on every start: a restart or upgrade could not resume it "
            f"(state and exactly-once would be lost). Fix the script: add "
            f".option('checkpointLocation', '{self.ns.checkpoint}') or .queryName('<name>') to its writeStream "
            f"(a named query checkpoints to {self.ns.checkpoint}/<name>). The query was stopped.")
        log.error("%s", self.unresumable)
        self.abort.set()
        self.stop_requested.set()

    # ------------------------------------------------------------------ run
    def run(self) -> int:
        ns = self.ns
        forget_secret_properties()
        self.session.secret_conf = secret_conf_from_environment()
        if ns.gate_only:
            return run_gate_only(ns, self.storage, self.paths, self.session.create)
        writer_capture.install()  # before the job (or the standby) builds a writer: its trigger is recorded
        taken_lease = None
        if self.standby is not None:
            signal.signal(signal.SIGTERM, self._on_sigterm)
            code = self.standby.wait(self.session.create)
            self.spark, self.prepared_writer = self.standby.spark, self.standby.prepared_writer
            if code is not None:
                if self.spark is not None:
                    self.spark.stop()
                return code
            taken_lease = self.standby.taken_lease
        try:
            lease = taken_lease or contract.acquire_lease(self.storage, self.paths, ns.run_id, ns.lease_ttl)
        except contract.LeaseHeldError as exc:
            print(f"airflow-streaming: refusing to start stream {ns.stream!r}: {exc}", file=sys.stderr, flush=True)
            return EXIT_LEASE_HELD
        except StorageError as exc:
            print(f"airflow-streaming: cannot start stream {ns.stream!r}: its lease cannot be taken: {exc}",
                  file=sys.stderr, flush=True)
            return EXIT_STARTUP_FAILED
        now = time.time()
        doc = StatusDocument(
            stream=ns.stream, version=ns.version, run_id=ns.run_id, state=contract.STARTING, pid=os.getpid(),
            host=socket.gethostname(), started_at=now, heartbeat_at=now, checkpoint_location=ns.checkpoint,
        )
        from spark_jobs.runtime.reporter import StatusReporter

        self.reporter = StatusReporter(self.storage, self.paths, doc, lease,
                                       contract.heartbeat_seconds(ns.heartbeat_seconds, self.remote_storage),
                                       remote=self.remote_storage)
        self.reporter.on_lease_lost = self._on_lease_lost
        self.reporter.on_new_query = self._check_resumable
        # Before each foreachBatch batch writes: does this driver still hold the lease (not only at renewals)?
        writer_capture.check_batches(LeaseCheck(self.storage, self.paths, lambda: self.reporter.lease,
                                                lambda: self.reporter.lease_renewed_ok_at).check)
        if ns.progress_kafka_bootstrap:
            try:
                from spark_jobs.runtime.kafka_exporter import KafkaProgressExporter

                self.exporter = KafkaProgressExporter(ns.progress_kafka_bootstrap, ns.progress_kafka_topic,
                                                      stream=ns.stream, version=ns.version, run_id=ns.run_id)
                self.reporter.progress_sinks.append(self.exporter.send)
            except Exception:  # noqa: BLE001 - an optional exporter never stops the stream from running
                log.exception("Kafka progress exporter disabled: it could not be created")
        self.reporter.carry_over()  # before the first write replaces the previous run's status document
        self.reporter.write()
        signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            code = self._run_job()
        finally:
            self._finish_cleanup(lease)
        return code

    def _run_job(self) -> int:
        from spark_jobs.runtime.reporter import describe_exception

        ns = self.ns
        try:
            if ns.script:
                ns.script = checked_if_local(ns.script)
            self.spark = self.spark or self.session.create()
            if ns.script:  # the file to run (a fetched URI: the copy its SparkContext fetched through spark.files)
                ns.script = script_file(ns.script)
            self.reporter.attach(self.spark)
            log.info("stream %s %s: app %s, Spark UI %s", ns.stream, ns.version, self.reporter.doc.app_id,
                     self.reporter.doc.spark_ui)
            if ns.job:
                self._start_bundled()
        except BaseException as exc:  # noqa: BLE001 - every startup failure becomes exit code 4
            log.exception("startup failed")
            return self._exit(EXIT_STARTUP_FAILED, contract.FAILED, describe_exception(exc))
        self.reporter.set_state(contract.RUNNING)
        if ns.script:
            return self._run_script()
        return self._supervise_bundled()

    def _start_bundled(self) -> None:
        ns = self.ns
        ctx = JobContext(ns.stream, ns.version, ns.checkpoint, ns.trigger_seconds)
        writer = self.prepared_writer or bundled_writer(self.spark, ns.job, list(ns.app_args), ctx)
        query = writer.start()
        log.info("query %s started (id %s, run %s)", query.name, query.id, query.runId)

    def _supervise_bundled(self) -> int:
        while True:
            queries = [q for q in self.spark.streams.active]
            if not queries:
                break
            if self._stop_wanted():
                self._graceful_stop()
                break
            time.sleep(0.05)
        failure = self._query_failure()
        if failure is not None and not self.stopped_by_us:
            return self._exit(EXIT_QUERY_FAILED, contract.FAILED, failure)
        if self.stopped_by_us and not self.graceful_done:
            return self._exit(EXIT_QUERY_FAILED, contract.FAILED, failure,
                              reason="aborted: stopped without waiting for the batch in flight")
        return self._exit(EXIT_GRACEFUL, contract.STOPPED, None, reason="graceful stop")

    def _query_failure(self) -> dict[str, Any] | None:
        from spark_jobs.runtime.reporter import describe_exception

        for query in self.reporter.queries():
            try:
                exc = query.exception()
            except Exception:  # noqa: BLE001
                exc = None
            if exc is not None:
                return describe_exception(exc)
        return self.reporter.doc.last_exception

    @staticmethod
    def _trigger_interval(query: Any) -> float | None:
        """The interval of the processing-time trigger the job started ``query`` with (``None``: another
        trigger, or not known)."""
        from spark_jobs.runtime.writer_capture import trigger_of

        try:
            trigger = trigger_of(str(query.id))
        except Exception:  # noqa: BLE001 - a query gone meanwhile: stopped as before
            return None
        if not trigger or trigger.get("kind") != "processing_time":
            return None
        interval = trigger.get("interval_s")
        return float(interval) if isinstance(interval, (int, float)) and not isinstance(interval, bool) else None

    def _graceful_stop(self) -> None:
        from spark_jobs.runtime.graceful_stop import stop_at_batch_boundary

        self.stopped_by_us = True
        if self.abort.is_set():
            # Stop before writing anything: an abort may be the lease's (lost, or not renewable for half its
            # ttl), and the status write below goes to the control storage - the very storage that may not
            # answer, behind the reporter's lock, for several connect timeouts, while the query commits on.
            for query in list(self.spark.streams.active):
                stop_at_batch_boundary(query, self.abort)
        self.reporter.set_state(contract.STOPPING)
        try:
            tracker = self.spark.sparkContext.statusTracker()  # tells when a batch is past its planning
        except Exception:  # noqa: BLE001 - without it, a batch in flight is waited for until it ends
            tracker = None
        for query in list(self.spark.streams.active):
            stop_at_batch_boundary(query, self.abort, self._trigger_interval(query), tracker)
        self.graceful_done = not self.abort.is_set()

    def _run_script(self) -> int:
        """Run an unmodified user script in the main thread; a watcher thread handles stop requests."""
        from spark_jobs.runtime.reporter import describe_exception

        done = threading.Event()

        def watch() -> None:
            # A stop asked before the script has started its queries waits for them (a stop asked while the
            # script starts was lost: its query then ran on until a kill), then stops them between batches; a
            # query the script starts after that is stopped too.
            while not done.is_set():
                if self._stop_wanted() and self.spark.streams.active:
                    self._graceful_stop()
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, name="stop-watcher", daemon=True)
        watcher.start()
        sys.argv = [self.ns.script, *self.ns.app_args]
        try:
            runpy.run_path(self.ns.script, run_name="__main__")
        except SystemExit as exc:
            if self.unresumable:
                done.set()
                return self._unresumable_exit()
            if exc.code not in (None, 0):
                done.set()
                return self._exit(EXIT_QUERY_FAILED if self.reporter.queries() else EXIT_STARTUP_FAILED,
                                  contract.FAILED, {"message": f"script exited with {exc.code}", "error_class": "SystemExit"})
        except BaseException as exc:  # noqa: BLE001
            done.set()
            if self.unresumable:
                return self._unresumable_exit()
            if self.stopped_by_us and self.graceful_done and not self._query_failure():
                return self._exit(EXIT_GRACEFUL, contract.STOPPED, None, reason="graceful stop")
            if self.stopped_by_us:
                return self._exit(EXIT_QUERY_FAILED, contract.FAILED, describe_exception(exc),
                                  reason="terminated before the stop reached a micro-batch boundary")
            log.exception("user script failed")
            code = EXIT_QUERY_FAILED if self.reporter.queries() else EXIT_STARTUP_FAILED
            return self._exit(code, contract.FAILED, self._query_failure() or describe_exception(exc))
        done.set()
        watcher.join(timeout=60)
        if self.unresumable:
            return self._unresumable_exit()
        failure = self._query_failure()
        if failure is not None and not self.stopped_by_us:
            return self._exit(EXIT_QUERY_FAILED, contract.FAILED, failure)
        if self.stopped_by_us:
            return self._exit(EXIT_GRACEFUL, contract.STOPPED, None, reason="graceful stop")
        return self._exit(EXIT_GRACEFUL, contract.STOPPED, None, reason="script finished", finished=True)

    def _unresumable_exit(self) -> int:
        return self._exit(EXIT_STARTUP_FAILED, contract.FAILED,
                          {"message": self.unresumable, "error_class": "CHECKPOINT_NOT_RESUMABLE"},
                          reason="refused: the query's checkpoint could not be resumed")

    # ------------------------------------------------------------------ exit
    def _exit(self, code: int, state: str, error: dict[str, Any] | None, reason: str | None = None,
              finished: bool = False) -> int:
        """Write the final status. ``finished``: the job ended by itself (its script returned: an
        ``availableNow``/``once`` trigger, or a script that stops its own queries), not by a stop request."""
        self.reporter.settle()  # the last batch's progress event may still be on Spark's listener bus
        doc = self.reporter.doc
        checkpoints = []
        for query in self.reporter.queries():
            root = self.reporter.checkpoint_of(query)
            if root:
                checkpoints.append(root)
        exit_info = {
            "code": code,
            "reason": reason or contract.EXIT_REASONS.get(code, "unknown"),
            "last_committed_batch": doc.last_batch_id(),
            "checkpoints": checkpoints,
            "at": time.time(),
            **({"finished": True} if finished else {}),
        }
        if error is not None:
            doc.last_exception = error
            print(f"airflow-streaming: stream {self.ns.stream!r} {exit_info['reason']}: "
                  f"[{error.get('error_class')}] {error.get('message', '').splitlines()[0] if error.get('message') else ''}",
                  file=sys.stderr, flush=True)
        self.reporter.set_state(state, exit=exit_info)
        return code

    def _finish_cleanup(self, lease: contract.Lease) -> None:
        if self.reporter is not None:
            self.reporter.close()
            self.reporter.write()
        if self.exporter is not None:
            try:
                self.exporter.close(timeout=10)
            except Exception:  # noqa: BLE001
                log.warning("closing the Kafka progress exporter failed", exc_info=True)
        held = self.reporter.lease if self.reporter is not None else lease  # the last renewal's bytes
        released = False
        if self.spark is not None and self.reporter is not None and not self._queries_active():
            # Every query has stopped and the final status is written: this driver can commit nothing more.
            # Give the lease back now, before the session's and the JVM's shutdown (~0.5 s), so that a warm
            # upgrade's prepared driver starts at once (``SparkStreamHook.quiesced``).
            released = self._release(held)
        if self.spark is not None:
            try:
                self.spark.stop()
            except Exception:  # noqa: BLE001
                log.warning("SparkSession.stop() failed", exc_info=True)
        if not released:
            self._release(held)

    def _queries_active(self) -> bool:
        try:
            return bool(self.spark.streams.active)
        except Exception:  # noqa: BLE001 - cannot tell: the lease waits for the session's stop
            return True

    def _release(self, held: contract.Lease) -> bool:
        try:
            contract.release_lease(self.storage, self.paths, held)
            return True
        except OSError as exc:  # it expires: stale once this process is gone
            log.error("could not release the lease %s: %s", self.paths.lease, exc)
            return False


def main(argv: list[str]) -> int:
    from airflow_streaming.redaction import RedactingFormatter

    exit_when_jvm_is_gone()

    handler = logging.StreamHandler(sys.stderr)
    # The driver log: no Airflow masker here, so every record (and traceback) goes through ours.
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    ns = parse_args(argv)
    try:
        driver = Driver(ns)
    except StorageError as exc:  # e.g. a Hadoop file system that cannot be set up for the control dir
        print(f"airflow-streaming: cannot start stream {ns.stream!r}: its control location {ns.control_dir} "
              f"cannot be used: {exc}", file=sys.stderr, flush=True)
        return EXIT_STARTUP_FAILED
    return driver.run()
