"""I/O for one managed stream: its control files, its driver (through a deploy target), stop and kill.

Where the driver runs is a :class:`~airflow_streaming.targets.base.DriverTarget` chosen from the
spec (``airflow_streaming.targets.target_for``); where the control files live is a
:class:`~airflow_streaming.control.storage.ControlStorage` chosen from the control location's
scheme. This hook never asks which one it is.

The hook reads freely, and acts only for a recorded step: its acting primitives (submit, adopt,
promote, request a stop, kill, retire a standby, acknowledge a takeover) take the
:class:`~airflow_streaming.control.permit.StepPermit` that the lifecycle runner issues under the stream's
lock as a required argument, and its control storage is a
:class:`~airflow_streaming.control.permit.GuardedStorage` that refuses a write of the stream's acting files
without one (:mod:`airflow_streaming.control.permit`).

The hook is one class made of parts, one file a concern: :mod:`.submission` (submit, standby,
readiness), :mod:`.planning` (what a driver is started with), :mod:`.liveness` (whether the driver runs,
health), :mod:`.stopping` (graceful stop, kill); this file holds what they share (the control files, the
target).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Any
from urllib.parse import urlparse

from airflow.sdk import BaseHook

# The module, not its functions: its functions are looked up at each call (a test counts the parses by patching
# json_object.json_object), with no import statement in a poll.
from airflow_streaming import json_object as control_json
from airflow_streaming.checkpoint.batches import BatchPosition, read_batch_position
from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlFileError, ControlPaths, DriverRecord, StatusDocument
from airflow_streaming.control.storage import ControlStorage, StorageError
from airflow_streaming.control.locations import storage_for
from airflow_streaming.deprecated_names import module_getattr
from airflow_streaming.control.permit import GuardedStorage
from airflow_streaming.exceptions import UnsafeDirectoryError
from airflow_streaming.hooks.hot_standby import HotStandbyMixin
from airflow_streaming.hooks.liveness import LivenessMixin
from airflow_streaming.hooks.storage_retry import retrying
from airflow_streaming.hooks.stopping import KILL_GRACE_SECONDS, StopReport, StoppingMixin
from airflow_streaming.hooks.planning import (
    DEFAULT_SPARK_CONF,
    DRIVER_EXIT_GRACE_SECONDS,
    JAVA_HINT,
    JOBS_DIR,
    LAUNCHER,
    PlanningMixin,
    check_java,
    lease_ttl,
)
from airflow_streaming.hooks.submission import SubmissionMixin
from airflow_streaming.private_dir import private_dir
from airflow_streaming.redaction import redact, secret_values
from airflow_streaming.round_memo import round_memo
from airflow_streaming.spec import StreamSpec
from airflow_streaming.targets import target_for, target_for_record, target_settings
from airflow_streaming.targets.base import DriverTarget

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_SPARK_CONF", "DRIVER_EXIT_GRACE_SECONDS", "JAVA_HINT", "JOBS_DIR", "KILL_GRACE_SECONDS",
           "LAUNCHER", "StopReport", "SparkStreamHook", "check_java", "lease_ttl", "storage_path"]


def storage_path(location: str) -> str:
    """The storage-local path of a checkpoint location or a Hadoop-qualified path (``file:/x`` -> ``/x``)."""
    parsed = urlparse(location)
    return parsed.path if parsed.scheme else location


class SparkStreamHook(PlanningMixin, SubmissionMixin, HotStandbyMixin, LivenessMixin, StoppingMixin, BaseHook):
    """Submit, watch, stop and kill the driver of one stream described by a :class:`StreamSpec`.

    Connections: the spec's ``conn_id`` (a ``spark`` connection of the Spark provider, read as its
    ``SparkSubmitHook`` reads it: master, ``deploy-mode``, ``queue``, ``namespace``, ``principal``,
    ``keytab``, ``rest-scheme``, ``rest-port``, ``yarn_resourcemanager_webapp_address``,
    ``spark-binary``; see :mod:`airflow_streaming.hooks.spark_connection`): connection -> spec -> operator,
    each later one winning field by field (``docs/precedence.md``): a spec's ``master`` replaces only the
    connection's master; and ``storage_conn_id`` (a ``webhdfs`` connection of the HDFS provider) for
    ``hdfs://`` / ``webhdfs://`` control and checkpoint locations.

    :param spec: the stream.
    :param storage: control storage (default: chosen from the control location's scheme); the hook guards
        it (:class:`~airflow_streaming.control.permit.GuardedStorage`).
    :param target: where the driver runs (default: chosen from the spec's master and deploy mode).
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"
    hook_name = "Spark Structured Streaming"

    def __init__(self, spec: StreamSpec, storage: ControlStorage | None = None, target: DriverTarget | None = None):
        super().__init__()
        self.spec = spec
        self.conn_id = spec.conn_id
        default_storage, control_dir = storage_for(spec.control_dir, spec.storage_conn_id)
        self.storage = GuardedStorage(storage or default_storage)
        self.paths = ControlPaths(control_dir)
        checkpoint_storage, self.checkpoint_path = storage_for(spec.checkpoint_location, spec.storage_conn_id)
        self.checkpoint_storage = storage or checkpoint_storage
        self._target = target
        self._resolved: StreamSpec | None = None

    @property
    def remote_storage(self) -> bool:
        """Whether the control files live on remote storage (HDFS...): the driver paces its requests there
        (see ``contract.heartbeat_seconds``) and a local target keeps its driver log on this host."""
        from airflow_streaming.control.local import LocalStorage

        return not isinstance(self.storage.unguarded, LocalStorage)

    def storage_of(self, location: str) -> tuple[ControlStorage, str]:
        """The storage holding ``location`` (a checkpoint, a file sink's output) and the path inside it,
        through the spec's storage connection."""
        return storage_for(location, self.spec.storage_conn_id)

    def driver_log_path(self, run_id: str) -> str:
        """Where the submitting host writes a run's spark-submit output: ``logs/<run_id>.log`` in the control
        dir on local storage; a local file on remote storage (a process's output cannot go to HDFS):
        ``$AIRFLOW_STREAMING_LOG_DIR`` (default: this user's private ``<tmp>/airflow-streaming-logs-<uid>``,
        created 0700 and verified: :func:`airflow_streaming.private_dir.private_dir`) ``/<stream>/<run_id>.log``."""
        if not self.remote_storage:
            return self.paths.log(run_id)
        base = os.environ.get("AIRFLOW_STREAMING_LOG_DIR") or private_dir("airflow-streaming-logs")
        return os.path.join(base, self.spec.name, f"{run_id}.log")

    @property
    def resolved_spec(self) -> StreamSpec:
        """The spec over its Spark connection: master, deploy mode and submit settings from the connection
        where the spec sets none (a spec's ``master`` replaces only the master). A spec that sets its master
        and names a connection that is not defined is used as it is."""
        if self._resolved is None:
            self._resolved = self._spec_with_connection()
        return self._resolved

    @property
    def target(self) -> DriverTarget:
        """Where the driver runs: from the (resolved) spec's master and deploy mode."""
        if self._target is None:
            self._target = target_for(self.resolved_spec, self.storage, self.paths)
        return self._target

    def target_of(self, record: DriverRecord) -> DriverTarget:
        """The target that ran ``record``: the stream's own when it is of the record's kind, else one rebuilt
        from the record's handle (no Spark connection needed; a driver started under another deploy target
        is still checked where it runs)."""
        if self._target is not None and self._target.kind == record.target:
            return self._target
        return target_for_record(record, self.storage, self.paths, target_settings(self.spec), self.spec.master or "")

    def _spec_with_connection(self) -> StreamSpec:
        """The spec over its ``spark`` connection (every field ``SparkSubmitHook`` reads: see
        :mod:`airflow_streaming.hooks.spark_connection`), field by field: the spec's ``master``,
        ``deploy_mode`` and each of its ``cluster`` settings win over the connection's."""
        from airflow_streaming.exceptions import SpecError
        from airflow_streaming.hooks.spark_connection import settings_of
        from airflow_streaming.submit_fields import set_twins

        conn = self._spark_connection()
        if conn is None:
            return self.spec
        settings = settings_of(conn, self.spec.conn_id, self.spec.spark_conf)
        cluster = {**{k: v for k, v in settings.cluster.items() if k not in set_twins(self.spec)},
                   **dict(self.spec.cluster)}  # a spec field (queue) wins over the connection's
        master = self.spec.master or settings.master
        deploy_mode = self.spec.deploy_mode or settings.deploy_mode
        if deploy_mode == "cluster" and not self.spec.deploy_mode and master.startswith("local"):
            raise SpecError("deploy_mode", f"the Spark connection {self.spec.conn_id!r} sets deploy-mode cluster, "
                            f"which the spec's master {master!r} cannot take (the connection's settings are kept "
                            "when a spec sets its master: docs/precedence.md); set `deploy_mode: client` in the spec "
                            "or give it another conn_id")
        return dataclasses.replace(self.spec, master=master, deploy_mode=deploy_mode, cluster=cluster)

    def _spark_connection(self) -> Any:
        """The spec's ``spark`` connection; ``None`` when the spec sets its master and the connection is not
        defined (or cannot be read: the spec's master is enough to submit, as it was before connections were
        merged). Without a master in the spec, a connection that cannot be loaded is a ``ValueError`` saying
        how to define it."""
        from airflow.sdk import BaseHook

        try:
            return BaseHook.get_connection(self.spec.conn_id)
        except Exception as exc:  # noqa: BLE001 - AirflowNotFoundException across Airflow versions
            if self.spec.master is not None:
                if type(exc).__name__ != "AirflowNotFoundException":
                    log.warning("stream %s: the Spark connection %r cannot be read (%s): the spec's master %s is "
                                "used without the connection's settings", self.spec.name, self.spec.conn_id,
                                type(exc).__name__, self.spec.master)
                return None
            raise ValueError(
                f"master: the spec sets no master and the Spark connection {self.spec.conn_id!r} cannot be "
                f"loaded ({exc}); set `master: local[2]` in the spec or define the connection "
                f"(e.g. AIRFLOW_CONN_{self.spec.conn_id.upper()}='{{\"conn_type\": \"spark\", \"host\": \"local[2]\"}}')"
            ) from exc

    # ------------------------------------------------------------------ reading
    def _read(self, what: str, fn: Any) -> Any:
        return retrying(fn, f"reading {what} of {self.spec.name}")

    def status(self) -> StatusDocument | None:
        """The driver's status document (``None`` before the first driver wrote one).

        :class:`ControlFileError` if it is garbage, :class:`StorageError` if it cannot be read."""
        return self._read("status.json", lambda: contract.read_status(self.storage, self.paths))

    def status_parsed(self, round_read: bool = False) -> tuple[dict[str, Any], StatusDocument] | None:
        """The status document as a dict and validated (``None`` before the first driver wrote one); errors as
        for :meth:`status`. The caller must not modify either.

        The file is read at every call. Inside a poll round of the triggerer
        (:func:`airflow_streaming.round_memo.round_memo`) what was made of the bytes read is shared by the
        round's calls that read the same bytes (:meth:`_status_entry`): a stream's health watch and
        completeness watcher poll in the same round (one after the other: ``poll_rounds.call(...,
        group=<stream>)``). Only the last document read is kept (a round holds one at a time, not one a
        stream). Keyed by the bytes themselves (not a file's mtime, size or inode), so a rewrite is never
        served stale, whatever the storage (local, WebHDFS) and its timestamps.

        ``round_read``: inside a round, take the bytes another poll of the same stream read earlier in
        that round (its health watch or its completeness watcher, whichever came first) without reading the
        file again: the status as of that read, milliseconds earlier in the same thread, as if this poll
        had come first. Outside a round, or before the round read this stream's status, it reads. For
        polls only (:meth:`health`, the completeness look): a call that waits for the file to change must
        read it."""
        entry = self._status_entry(round_read)
        if entry is None:
            return None
        if entry[2] is None:
            try:
                doc_dict = control_json.json_object(entry[0], entry[1])
                entry[2] = (doc_dict, StatusDocument.from_dict(entry[0], doc_dict))
            except ControlFileError as exc:
                entry[2] = exc
        if isinstance(entry[2], ControlFileError):
            raise ControlFileError(str(entry[2]))
        return entry[2]

    def status_view(self, round_read: bool = False) -> Any:
        """The status document's :class:`~airflow_streaming.health.view.StatusView` (what a health poll and a
        completeness look read of it: ~14 us to decode a 23 KB document instead of ~46 us and its validation;
        :func:`airflow_streaming.json_object.status_view`), checked as :meth:`status` checks it; ``None``
        before the first driver wrote one. Read and shared within a round as :meth:`status_parsed` (the same
        bytes: a look that goes on to the whole document in the same round parses what its view was made of)."""
        entry = self._status_entry(round_read)
        if entry is None:
            return None
        if entry[3] is None:
            try:
                entry[3] = control_json.status_view(entry[0], entry[1])
            except ControlFileError as exc:
                entry[3] = exc
        if isinstance(entry[3], ControlFileError):
            raise ControlFileError(str(entry[3]))
        return entry[3]

    def _status_entry(self, round_read: bool) -> list[Any] | None:
        """``[path, bytes, parsed, view]`` of ``status.json`` (``parsed``/``view``: ``None`` until made, or the
        :class:`ControlFileError` making it raised); ``None`` when there is no file. Inside a round the entry is
        kept in the round's memo, one at a time: with ``round_read`` the kept one of this file is taken as it
        is; otherwise the file is read, and the kept entry is used only if its bytes are the ones read."""
        path = self.paths.status
        memo = round_memo()
        kept = memo.get("status.json") if memo is not None else None
        if kept is not None and kept[0] != path:
            kept = None
        if round_read and kept is not None:
            return kept
        raw = self._read("status.json", lambda: self.storage.read_bytes(path))
        if raw is None:
            if memo is not None:
                memo.pop("status.json", None)
            return None
        if kept is not None and kept[1] == raw:
            return kept
        entry = [path, raw, None, None]
        if memo is not None:
            memo["status.json"] = entry
        return entry

    def driver_record(self) -> DriverRecord | None:
        """``driver.json`` (``None``: never submitted); errors as for :meth:`status`."""
        return self._read("driver.json", lambda: contract.read_driver_record(self.storage, self.paths))

    @property
    def deployed_path(self) -> str:
        return f"{self.paths.root}/deployed.json"

    def deployed(self) -> dict[str, Any] | None:
        """``{"run_id", "at", "spec"}`` of the last submission (the spec as deployed), ``None`` if never.

        :class:`ControlFileError` naming the file when it is unreadable: the deployed spec is what
        restarts and rollbacks start, so garbage is never read as "never deployed"."""
        return self._read("deployed.json", lambda: self.deployed_at(self.storage, self.deployed_path))

    @staticmethod
    def deployed_at(storage: ControlStorage, path: str) -> dict[str, Any] | None:
        """Parse a ``deployed.json`` (see :meth:`deployed`)."""
        raw = storage.read_bytes(path)
        if raw is None:
            return None
        doc = contract.parse_json_object(path, raw, "it records the deployed spec: restore it from a backup or "
                                         "from the stream's history.json, or move it aside and deploy the stream again")
        if not isinstance(doc.get("spec"), dict) \
                or not isinstance(doc.get("run_id"), (str, type(None))):  # it goes into lifecycle.json
            raise ControlFileError(f"{path}: expected {{'run_id', 'at', 'spec'}}, got {str(doc)[:100]}; move it "
                                   "aside and deploy the stream again")
        return doc

    def checkpoint_locations(self) -> list[str]:
        """The checkpoint roots the stream's query/queries really use.

        The driver records each query's resolved checkpoint (a user script may set its own
        ``checkpointLocation`` or a ``queryName`` under the spec's location); without a record, the
        spec's ``checkpoint_location``."""
        try:
            doc = self.status()
        except (ControlFileError, StorageError):
            doc = None
        recorded = [self._normalized_location(c) for c in (doc.checkpoints() if doc is not None else [])]
        return sorted(set(recorded)) or [self.spec.checkpoint_location]

    def _normalized_location(self, location: str) -> str:
        """A checkpoint root as Spark records it (``file:/x``, ``hdfs://nn:8020/x``) in the spec's form."""
        ours = self.spec.checkpoint_location
        if storage_path(location).rstrip("/") == storage_path(ours).rstrip("/"):
            return ours
        parsed = urlparse(location)
        return parsed.path if parsed.scheme == "file" else location

    def batch_position(self, checkpoint: str | None = None) -> BatchPosition:
        """Last planned/committed batch of the (first) checkpoint the stream uses."""
        location = checkpoint or self.checkpoint_locations()[0]
        return read_batch_position(self.checkpoint_storage, storage_path(location))

    def checkpoint_exists(self, checkpoint: str | None = None) -> bool:
        location = checkpoint or self.checkpoint_locations()[0]
        return self.checkpoint_storage.exists(storage_path(location))

    def lifecycle_record(self) -> dict[str, Any] | None:
        """``lifecycle.json`` as a dict (``None`` if absent); :class:`ControlFileError` if garbage."""
        path = self.paths.record
        raw = self._read(contract.RECORD_NAME, lambda: self.storage.read_bytes(path))
        if raw is None:
            return None
        return contract.parse_json_object(path, raw, "it is the record of the stream's last lifecycle action: "
                                          f"inspect it, then move it aside (mv {path} {path}.bad) to start over")

    # ------------------------------------------------------------------ liveness

    def log_tail(self, run_id: str, lines: int = 40) -> str:
        """The last lines of a run's driver output, with secrets masked.

        Read where this host puts a run's output (:meth:`driver_log_path`), never where ``driver.json``
        says: a driver can write that record, and a ``log_path`` of ``/proc/self/environ`` or
        ``airflow.cfg`` would put the worker's own secrets into task logs and errors."""
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", run_id or ""):
            return f"(no driver log: {str(run_id)[:80]!r} is not a run id)"
        try:
            record = self.driver_record()
        except (ControlFileError, StorageError):
            record = None
        try:
            if record is not None and record.run_id == run_id:
                record = dataclasses.replace(record, log_path=self.driver_log_path(run_id))
                text = self.target_of(record).log_tail(record, lines)
            else:
                from airflow_streaming.control.local import LocalStorage

                logs = LocalStorage() if self.remote_storage else self.storage
                text = "\n".join((logs.read_text(self.driver_log_path(run_id)) or "").splitlines()[-lines:])
        except (StorageError, UnsafeDirectoryError) as exc:
            text = f"(the driver log cannot be read: {exc})"
        return self.redact(text)

    def redact(self, text: str) -> str:
        """``text`` with the spec's secret conf values and every known secret pattern masked
        (:func:`airflow_streaming.redaction.redact`, Airflow's masker included)."""
        return redact(text, secret_values(self.spec.spark_conf))


__getattr__ = module_getattr(__name__, 'StreamingJobHook')  # the old name, deprecated
