"""The newest micro-batches of a checkpoint as :class:`~airflow_streaming.completeness.CommittedBatch`.

What :func:`~airflow_streaming.completeness.closed_periods` needs from a checkpoint: for each of the
newest ``last`` planned batches, the watermark it ran with (``batchWatermarkMs`` of ``offsets/<N>``)
and whether it is committed (``commits/<N>`` exists and is a commit log entry); with the driver's
progress reports (Spark's ``StreamingQueryProgress`` as JSON objects, e.g. a status file's
``recent_progress``), the batch's ``numInputRows``, late rows (``numRowsDroppedByWatermark``) and
earliest event time (``eventTime.min``).

Cost: the ``offsets`` and ``commits`` listings, then at most ``last`` offsets files and ``last`` commit
files (and ``metadata`` when progress is given); nothing older, whatever the checkpoint's age. A triggerer
reads the same checkpoints again and again (a completeness watcher reads its stream's newest batches each
time a period may have closed), and Spark never changes an ``offsets`` or ``commits`` file once it is in
place: what an earlier read parsed from one (its watermark; that it is a commit) is used again while the
storage vouches it is the same file (:meth:`~airflow_streaming.control.storage.ControlStorage.file_identity`:
on a local file system one ``stat``, ~4 us, against ~35 us to read and parse it). A file the storage cannot
vouch for (a rewrite, a restored snapshot's copy, a file written in the last seconds, a storage without
identities, a network file system that may answer `stat` from a cache) is read. Nothing that failed to parse is kept.

Bad files never raise: a batch whose offsets file is missing, unreadable or not what Spark writes
(empty, cut short, garbage) is left out, and a commit file in that state does not count as a commit
(so it proves nothing); each is recorded in :attr:`CommittedRead.skipped` with the reason and the file.
Leaving a batch out only delays a completeness event (a later committed batch proves the period), it
never makes one early. Only a listing that fails raises, as
:class:`~airflow_streaming.checkpoint.logs.CheckpointError` naming the directory.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from airflow_streaming.checkpoint.batches import _batch_ids
from airflow_streaming.checkpoint.logs import CheckpointError, parse_commit, parse_offsets, parse_query_metadata
from airflow_streaming.completeness import CommittedBatch
from airflow_streaming.control.storage import ControlStorage, StorageError

__all__ = ["DEFAULT_LAST", "BatchCounts", "CommittedRead", "batch_counts", "progress_counts", "read_committed"]

#: How many of the newest batches are read unless told otherwise. The row counts of a period are
#: known only when every batch of it (and the one before) is among them.
DEFAULT_LAST = 32


@dataclass(frozen=True)
class CommittedRead:
    """The newest batches of a checkpoint, in batch id order."""

    checkpoint: str
    batches: list[CommittedBatch]
    skipped: list[str] = field(default_factory=list)
    """Why a batch was left out or its commit not counted, naming the file."""
    query_id: str | None = None
    """The checkpoint's query id (read only when progress was given)."""
    files_read: int = 0


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class BatchCounts(NamedTuple):
    """What a batch's progress report tells: ``None`` where it does not."""

    input_rows: int | None
    late_rows: int | None
    first_event_ms: int | None


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _event_ms(value: Any) -> int | None:
    """Epoch ms of an ISO time as Spark's progress writes it (``2026-01-01T10:00:05.000Z``, UTC)."""
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def batch_counts(report: Mapping[str, Any]) -> BatchCounts:
    """What one progress report tells of its batch (see :func:`progress_counts`)."""
    operators = report.get("stateOperators") or []
    dropped = [_int(op.get("numRowsDroppedByWatermark")) if isinstance(op, Mapping) else None for op in operators]
    late = None if None in dropped else sum(dropped)  # type: ignore[arg-type]
    event_time = report.get("eventTime")
    first_event = _event_ms(event_time.get("min")) if isinstance(event_time, Mapping) else None
    if first_event is not None and first_event <= 0:
        # Spark counts a row whose event time is null (a malformed line) as the epoch in eventTime.min:
        # not a real earliest event (it would start a first look at the look-back limit, 48 empty hours).
        first_event = None
    return BatchCounts(_int(report.get("numInputRows")), late, first_event)


def progress_counts(progress: Iterable[Mapping[str, Any]], query_id: str | None = None,
                    since: int | None = None) -> dict[int, BatchCounts]:
    """Batch id -> counts from progress reports; with ``query_id``, reports of another query (another
    checkpoint) are ignored; with ``since``, reports of batches before it (not asked for). A later report of a
    batch id (a replay) replaces an earlier one. Late rows are ``numRowsDroppedByWatermark`` summed over the
    state operators (0 without any)."""
    counts: dict[int, BatchCounts] = {}
    for report in progress:
        if not isinstance(report, Mapping):
            continue
        batch = _int(report.get("batchId"))
        if batch is None or (since is not None and batch < since) \
                or (query_id is not None and report.get("id") not in (None, query_id)):
            continue
        counts[batch] = batch_counts(report)
    return counts


def _counted_since(counted: Mapping[tuple[Any, int], BatchCounts], query_id: str | None,
                   since: int | None) -> dict[int, BatchCounts]:
    """:func:`progress_counts` of counts already made: ``(query id, batch id) -> counts``."""
    return {batch: c for (query, batch), c in counted.items()
            if (since is None or batch >= since) and (query_id is None or query in (None, query_id))}


#: What earlier reads parsed, per checkpoint root: batch id -> (hash of the identity of ``offsets/<id>``, its
#: watermark, hash of the identity of ``commits/<id>`` when that file is a commit, else ``None``). Each read
#: replaces its root's entry with the batches it read (at most ``last``); emptied when it holds
#: :data:`_KNOWN_ROOTS` roots. An identity is kept as its 64-bit hash (~8 KiB a checkpoint of 32 batches
#: against ~30 KiB with the identities and paths themselves). Shared by the threads of a triggerer's poll
#: rounds: single dict operations, atomic under the GIL; two reads of one root at once only replace each
#: other's entry.
_KNOWN: dict[str, dict[int, tuple[int, Any, int | None]]] = {}
_KNOWN_ROOTS = 4096


class _Reader:
    def __init__(self, storage: ControlStorage, root: str) -> None:
        self.storage, self.root = storage, root
        self.skipped: list[str] = []
        self.files_read = 0

    def listing(self, name: str) -> list[int]:
        path = posixpath.join(self.root, name)
        try:
            return _batch_ids(self.storage.list_dir(path))
        except StorageError as exc:
            raise CheckpointError(f"{path}: cannot be listed ({exc})") from exc

    def read(self, path: str, what: str) -> bytes | None:
        try:
            data = self.storage.read_bytes(path)
        except StorageError as exc:
            self.skipped.append(f"{path}: {what} cannot be read ({exc})")
            return None
        self.files_read += 1
        if data is None:
            self.skipped.append(f"{path}: {what} was listed but is gone")
        return data


def read_committed(storage: ControlStorage, checkpoint: str, last: int = DEFAULT_LAST,
                   progress: Iterable[Mapping[str, Any]] | None = None,
                   counted: Mapping[tuple[Any, int], BatchCounts] | None = None) -> CommittedRead:
    """Read the newest ``last`` planned batches of ``checkpoint`` (a path in ``storage``), read-only.

    ``counted``: instead of ``progress``, the counts already made of progress reports (:func:`batch_counts`),
    ``(query id, batch id) -> counts`` - what a completeness watch remembers across its looks: tuples of
    numbers, which the garbage collector does not walk, where the reports themselves were five containers
    each (a thousand watches kept ~600,000 of them, walked at every full collection)."""
    if last < 1:
        raise ValueError(f"last must be at least 1, got {last}")
    root = checkpoint.rstrip("/") or "/"
    reader = _Reader(storage, root)
    planned = reader.listing("offsets")
    commits = set(reader.listing("commits"))
    newest = planned[-last:]
    orphans = sorted(i for i in commits if not newest or i > newest[-1])
    if orphans:
        reader.skipped.append(f"{posixpath.join(root, 'commits')}: commit(s) {orphans} have no offsets file (no watermark)")

    counts: dict[int, BatchCounts] = {}
    query_id = None
    if progress is not None or counted is not None:
        meta_path = posixpath.join(root, "metadata")
        data = reader.read(meta_path, "query metadata")
        if data is not None:
            try:
                query_id = parse_query_metadata(meta_path, data)
            except CheckpointError as exc:
                reader.skipped.append(f"{exc} (progress reports not checked against the query id)")
        since = newest[0] if newest else None
        counts = progress_counts(progress, query_id, since) if counted is None \
            else _counted_since(counted, query_id, since)

    known = _KNOWN.get(root, {})
    kept: dict[int, tuple[int, Any, int | None]] = {}
    batches = []
    # The directories' paths joined once: a look's read stats ~60 files, and a join is ~2.5 us.
    offsets_dir, commits_dir = posixpath.join(root, "offsets", ""), posixpath.join(root, "commits", "")
    for batch_id in newest:
        offsets_path = offsets_dir + str(batch_id)
        identity = storage.file_identity(offsets_path)
        entry = known.get(batch_id)
        if identity is not None and entry is not None and entry[0] == hash(identity):
            watermark = entry[1]
        else:
            data = reader.read(offsets_path, "offsets file")
            if data is None:
                continue
            try:
                watermark = parse_offsets(offsets_path, data, batch_id).batch_watermark_ms
            except CheckpointError as exc:
                reader.skipped.append(f"{exc} (batch {batch_id} left out)")
                continue
        committed, commit_hash = False, None
        if batch_id in commits:
            commit_path = commits_dir + str(batch_id)
            commit_identity = storage.file_identity(commit_path)
            if commit_identity is not None and entry is not None and entry[2] == hash(commit_identity):
                committed, commit_hash = True, entry[2]
            else:
                data = reader.read(commit_path, "commit file")
                if data is not None:
                    try:
                        parse_commit(commit_path, data, batch_id)
                        committed = True
                        commit_hash = None if commit_identity is None else hash(commit_identity)
                    except CheckpointError as exc:
                        reader.skipped.append(f"{exc} (batch {batch_id} not counted as committed)")
        if identity is not None:
            kept[batch_id] = (hash(identity), watermark, commit_hash)
        known_batch = counts.get(batch_id, BatchCounts(None, None, None))
        batches.append(CommittedBatch(batch_id, watermark, committed, *known_batch))
    if len(_KNOWN) >= _KNOWN_ROOTS and root not in _KNOWN:
        _KNOWN.clear()
    _KNOWN[root] = kept
    return CommittedRead(root, batches, reader.skipped, query_id, reader.files_read)
