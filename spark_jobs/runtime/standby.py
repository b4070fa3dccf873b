"""A driver started with ``--standby``: prepared ahead of time, then waiting to be promoted.

An upgrade's warm standby does the slow part of a start (JVM, session, planned query, a warm-up job,
one replay of the job's plan) while the previous version still runs, and waits until the run marker
names its run. With ``--failover`` it is the stream's hot standby instead: it never expires, takes
over a run that crashed (:mod:`airflow_streaming.control.takeover`) and exits when the stream is
stopped or moves to another version. Either way it touches neither the checkpoint nor the status
document while it waits; what it prepared (:attr:`Standby.spark`, :attr:`Standby.prepared_writer`,
:attr:`Standby.taken_lease`) is what :class:`spark_jobs.runtime.launcher.Driver` runs with once
promoted. Its own state goes to the control directory's standby document (:meth:`Standby.report`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from airflow_streaming import faults
from airflow_streaming.application_source import checked_if_local, script_file
from airflow_streaming.control import contract
from airflow_streaming.control.contract import EXIT_GRACEFUL, EXIT_STARTUP_FAILED, ControlPaths
from airflow_streaming.control.process import process_start_time
from airflow_streaming.control.storage import ControlStorage, StorageError
from airflow_streaming.control.takeover import TOOK_OVER
from airflow_streaming.bundled_job import JobContext, bundled_writer

log = logging.getLogger("airflow_streaming.runtime")


class Standby:
    """The standby side of one driver run (``--standby``, and ``--failover`` for the hot standby).

    :param ns: the launcher's arguments.
    :param storage: the control storage, and ``paths`` the stream's control files in it.
    :param remote_storage: the control files are not local (the waiting loop looks once a second).
    :param stop_requested: set by the driver's SIGTERM handler: the standby exits without running.
    """

    OWN_RECORD_RETRY_S = 1.0
    """A hot standby that finds no record of itself looks for it again after this long (not at every look)."""

    def __init__(self, ns: argparse.Namespace, storage: ControlStorage, paths: ControlPaths, remote_storage: bool,
                 stop_requested: threading.Event):
        self.ns = ns
        self.storage = storage
        self.paths = paths
        self.remote_storage = remote_storage
        self.stop_requested = stop_requested
        self.spark: Any = None
        """The session prepared for the run (set as soon as it exists, also when preparation then fails)."""
        self.prepared_writer: Any = None
        """A bundled job's planned query, started on promotion."""
        self.taken_lease: contract.Lease | None = None
        """The lease a hot standby took over from a crashed run (it starts without acquiring one)."""
        self.took_over_from: str | None = None
        self.plan_warm_up_s: float | None = None
        """Seconds the standby spent replaying its job's plan once before promotion (None: not done)."""
        self._takeover_retry_at = 0.0
        self._lease_watch: Any = None
        """What this standby has itself seen of the lease (``takeover.LeaseWatch``): its own clock, not lease.json's."""
        self._word: Any = None
        """The standalone master's word (``paced_word.PacedWord``), when the launch named the master."""

    def report(self, state: str, error: dict[str, Any] | None = None) -> None:
        """Write the standby document (``PREPARING``, ``READY``, ``FAILED``, ``PROMOTED``, ``EXPIRED``...)."""
        doc = {"run_id": self.ns.run_id, "pid": os.getpid(), "state": state, "error": error, "at": time.time(),
               "version": self.ns.version, "plan_warm_up_s": self.plan_warm_up_s}
        if self.ns.failover:
            doc.update(failover=True, took_over_from=self.took_over_from)
        self.storage.write_atomic(self.paths.standby, json.dumps(doc).encode())

    def master_word(self) -> Any:
        """The cluster manager's word about a crashed run (``paced_word.PacedWord``: at most once a second,
        backing off while it does not answer), asked at the cluster manager this driver was LAUNCHED with (the
        standalone master's ``--master-rest-url`` / ``--master-ui-url``, YARN's ``--yarn-rm-url`` or Kubernetes'
        ``--kube-api-server``, from the stream's spec and connection; never from a control file, which could name
        a fake one); ``None`` without one (only the lease then decides)."""
        rest, ui = getattr(self.ns, "master_rest_url", None), getattr(self.ns, "master_ui_url", None)
        rms = [u.strip() for u in (getattr(self.ns, "yarn_rm_url", None) or "").split(",") if u.strip()]
        api = getattr(self.ns, "kube_api_server", None)
        if not (rest or ui or rms or api):
            return None
        from airflow_streaming.control.paced_word import PacedWord
        from airflow_streaming.control.standalone_word import StandaloneWord

        if api:
            from airflow_streaming.control.kube_word import KubeWord

            log.info("hot standby: a crashed run on another host is taken over on the word of the Kubernetes API "
                     "server at %s", api)
            return PacedWord(KubeWord(api))
        if rms:
            from airflow_streaming.control.yarn_word import YarnWord

            log.info("hot standby: a crashed run on another host is taken over on the word of the YARN "
                     "ResourceManager at %s", ", ".join(rms))
            return PacedWord(YarnWord(rms))
        log.info("hot standby: a crashed run on another host is taken over on the word of the master at %s",
                 ", ".join(u for u in (rest, ui) if u))
        return PacedWord(StandaloneWord(rest, ui))

    def failover_check(self) -> str | None:
        """A hot standby's look at the stream (:mod:`airflow_streaming.control.takeover`): ``"exit"``,
        ``"took_over"`` (then :attr:`taken_lease` is held), or ``None`` (keep waiting)."""
        from airflow_streaming.control import takeover
        from airflow_streaming.control.lifecycle_lock import LifecycleLock, LifecycleLockHeld

        ns = self.ns
        if self._lease_watch is None:
            self._lease_watch = takeover.LeaseWatch()
            self._word = self.master_word()
        # The master is asked about a holder on another host once its lease has missed two renewals.
        quiet_s = 2 * contract.lease_renew_seconds(ns.heartbeat_seconds, ns.lease_ttl, self.remote_storage)

        def judge() -> takeover.Judgement:
            return takeover.judge_takeover(self.storage, self.paths, ns.run_id, ns.version, watch=self._lease_watch,
                                           stream=ns.stream, control_dir=ns.control_dir, word=self._word,
                                           word_quiet_s=quiet_s)

        try:
            judged = judge()
        except StorageError as exc:
            log.warning("hot standby: cannot read the control files (looking again): %s", exc)
            return None
        if judged.act != "take_over":
            return "exit" if judged.act == "exit" else None
        if time.monotonic() < self._takeover_retry_at:
            return None  # its own record was missing a moment ago: the lock is not taken again at every look
        try:  # no lifecycle action or supervisor pass may interleave with the takeover
            lock = LifecycleLock.acquire(self.storage, self.paths.root, "failover",
                                         owner=f"hot standby run {ns.run_id}", ttl=30.0, keep_alive=False)
        except LifecycleLockHeld as exc:
            log.info("hot standby: %s; the takeover waits for it", exc)
            return None
        except StorageError as exc:
            log.warning("hot standby: cannot take the lifecycle lock (looking again): %s", exc)
            return None
        try:
            judged = judge()  # again, under the lock
            if judged.act != "take_over":
                return "exit" if judged.act == "exit" else None
            own = self.storage.read_bytes(self.paths.standby_driver)
            if own is None or contract.DriverRecord.from_json(self.paths.standby_driver, own).run_id != ns.run_id:
                # e.g. a standby whose submitter died before recording it, until a pass adopts it
                log.error("hot standby: %s does not name this run: not taking over (looking again in %.0fs)",
                          self.paths.standby_driver, self.OWN_RECORD_RETRY_S)
                self._takeover_retry_at = time.monotonic() + self.OWN_RECORD_RETRY_S
                return None
            faults.hit("standby.takeover", ns.run_id)  # e.g. the standby killed holding the lock
            pid = os.getpid()
            lease = takeover.take_over(self.storage, self.paths, judged, ns.run_id, ns.version, own, ns.lease_ttl,
                                       pid, process_start_time(pid), socket.gethostname())
        except (StorageError, contract.ControlFileError) as exc:
            log.warning("hot standby: the takeover did not happen (looking again): %s", exc)
            return None
        finally:
            lock.release()
        if lease is None:
            log.info("hot standby: the control files moved during the takeover: not taking over")
            return None
        self.taken_lease, self.took_over_from = lease, judged.run_id
        log.warning("hot standby run %s took over stream %s from run %s: %s", ns.run_id, ns.stream, judged.run_id,
                    judged.reason)
        return "took_over"

    def wait(self, session: Callable[[], Any]) -> int | None:
        """Prepare (``session`` builds the driver's SparkSession), then wait until the run marker names this
        run (the deployer writes it once the old driver has exited) - or, for a hot standby, until it takes
        over or is no longer wanted.

        Returns an exit code if this driver must not run (preparation failed, stop requested, expired),
        ``None`` when promoted.
        """
        from spark_jobs.runtime.reporter import describe_exception

        ns = self.ns
        self.report("PREPARING")
        try:
            if ns.script:
                ns.script = checked_if_local(ns.script)
            self.spark = session()
            if ns.script:  # the file to run (a fetched URI: the copy its SparkContext fetched through spark.files)
                ns.script = script_file(ns.script)
            self.spark.range(1000).selectExpr("sum(id)").collect()  # warm up executors and code generation
            if ns.job:
                ctx = JobContext(ns.stream, ns.version, ns.checkpoint, ns.trigger_seconds)
                self.prepared_writer = bundled_writer(self.spark, ns.job, list(ns.app_args), ctx)
            from spark_jobs.runtime.standby_gate import StandbyGate

            gate = StandbyGate(self.storage, self.paths, ns.run_id)  # the upgrade's gate runs in this session
            gate.warm_up(self.spark, ns)  # asked before this driver started: load and compile the check
            from spark_jobs.runtime.plan_warm_up import plan_script, warm_up_plan

            planned = plan_script(self.spark, ns) if ns.script else None  # a user script's own first query
            self.plan_warm_up_s = warm_up_plan(self.spark, ns, planned)  # the job's own plan, once, on a copy
        except BaseException as exc:  # noqa: BLE001 - reported to the deployer, who keeps the old version
            log.exception("standby preparation failed")
            self.report("FAILED", describe_exception(exc))
            return EXIT_STARTUP_FAILED
        self.report("READY")
        log.info("standby run %s of %s %s ready; waiting for the run marker", ns.run_id, ns.stream, ns.version)
        deadline = time.monotonic() + ns.standby_timeout
        while True:
            if ns.failover:
                seen = self.failover_check()
                if seen == "took_over":
                    self.report(TOOK_OVER)
                    return None
                if seen == "exit" or self.stop_requested.is_set():
                    self.report("EXPIRED")
                    log.info("hot standby run %s is no longer wanted: exiting without touching the checkpoint",
                             ns.run_id)
                    return EXIT_GRACEFUL
                time.sleep(1.0 if self.remote_storage else 0.05)
                continue
            gate.poll(self.spark, ns)
            try:
                marker = contract.read_marker(self.storage, self.paths)
            except StorageError as exc:
                log.warning("standby: cannot read the run marker (retrying): %s", exc)
                marker = None
            if marker is not None and marker.get("run_id") == ns.run_id:
                self.report("PROMOTED")
                return None
            if self.stop_requested.is_set() or time.monotonic() > deadline:
                self.report("EXPIRED")
                log.info("standby run %s was not promoted: exiting without touching the checkpoint", ns.run_id)
                return EXIT_GRACEFUL
            time.sleep(1.0 if self.remote_storage else 0.05)  # remote: one NameNode request a second
