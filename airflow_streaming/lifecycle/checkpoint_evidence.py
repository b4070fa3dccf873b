"""Why an action knows a stream's checkpoint (a part of :class:`~.runner.LifecycleRunner`): where the file sink
writes, whether the stream has run on its checkpoint, and the checkpoint's position - or why the gate and the
snapshot must not go on (never skipped silently)."""

from __future__ import annotations

from airflow_streaming.checkpoint.batches import BatchPosition
from airflow_streaming.control.contract import ControlFileError
from airflow_streaming.control.storage import StorageError
from airflow_streaming.hooks.streaming_job import storage_path
from airflow_streaming.lifecycle import snapshot as snapshots
from airflow_streaming.lifecycle.record import LifecycleRecord


class CheckpointEvidence:
    """The checkpoint as an action sees it (mixed into the runner)."""

    def _sink_path(self) -> str | None:
        """The file sink's directory, from the running query's last progress (``FileSink[path]``)."""
        try:
            doc = self.home.status()
        except (ControlFileError, StorageError):
            return None
        for query in doc.queries if doc is not None else []:
            for progress in reversed(query.recent_progress):
                path = snapshots.sink_path_from_description((progress.get("sink") or {}).get("description"))
                if path:
                    return path
        return None

    def _ran_evidence(self) -> str | None:
        """Why we know the stream has run on its checkpoint (committed batches recorded somewhere), or
        ``None`` for a stream that has never run."""
        try:
            doc = self.home.status()
        except (ControlFileError, StorageError) as exc:
            return f"its status document cannot be read ({exc})"
        if doc is not None and doc.last_batch_id() is not None:
            return f"status.json of run {doc.run_id} records committed batch {doc.last_batch_id()}"
        for entry in reversed(self.history()):
            for key in ("last_batch_before", "first_batch_after"):
                if isinstance(entry.get(key), int):
                    return f"history.json records batch {entry[key]} ({entry.get('action')} {entry.get('id')})"
        if doc is not None and doc.queries:
            return f"the query of run {doc.run_id} started on it (status.json)"
        return None

    def _checkpoint_position(self, record: LifecycleRecord, purpose: str) -> tuple[BatchPosition | None, str | None]:
        """``(position, refusal)``: the checkpoint's position, or why the action must not go on.

        A checkpoint that is missing, empty or unreadable while the stream has run (see
        :meth:`_ran_evidence`) refuses: the gate and the snapshot are never skipped silently."""
        location = self.home.checkpoint_locations()[0]
        try:
            exists = self.home.checkpoint_exists(location)
            position = self.home.batch_position(location) if exists else None
        except StorageError as exc:
            return None, (f"the checkpoint {location} cannot be read ({exc}): {purpose} cannot run. Check that its "
                          "storage is mounted and readable, then run the action again")
        if position is not None and position.last_committed is not None:
            return position, None
        evidence = self._ran_evidence()
        if evidence is None:
            return position, None
        found = "does not exist" if position is None else "has no committed batch"
        return None, (f"the checkpoint {location} {found}, but the stream has run on it ({evidence}): {purpose} "
                      f"cannot run. Is the checkpoint storage mounted, and is checkpoint_location right? Check "
                      f"{storage_path(location)}; restore it from a snapshot under "
                      f"{self.home.paths.root}/snapshots if it was lost. Nothing was changed")
