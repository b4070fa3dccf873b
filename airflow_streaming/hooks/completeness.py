"""The completeness watch's reads and its cursor: blocking I/O for the triggerer's worker threads.

:func:`look` reads what :func:`~airflow_streaming.completeness.closed_periods` needs (the checkpoint's
newest batches, the status document's progress reports for the counts) and returns the periods closed
after the cursor. An idle look costs the status document's view (what a health poll of the stream in the same
round read: :meth:`~airflow_streaming.hooks.streaming_job.SparkStreamHook.status_view`) and finding the
checkpoint's newest commit - on a local file system one ``stat`` (``commits/`` is as it was when last listed;
else the next names are asked for: :func:`_commits_after`), elsewhere the ``commits`` listing: when the newest
commit did not change since the last look, nothing new can be complete, and nothing else is read. A look after
new commits first takes only their watermarks - from their progress reports in the status view (Spark's report
of a batch carries the watermark it ran with), else from their ``offsets`` files: when those (or, for
``batches:<N>``, their ids) cross no period end since the last full read of that checkpoint, nothing new can be
complete either and the look stops there (:data:`_SINCE`); only a crossing reads the checkpoint's newest batches
(~65 files) - at a commit every trigger, that full read every poll cost ~2 ms a stream, 40 % of a core for
1,000 streams (BENCHMARKS.md, "A thousand streams").

A stream whose driver recorded several checkpoints (a job with several queries) has a period complete only
when the committed batches of **every** one of them prove it (:func:`_proven_by_all`): the sink of each query
holds it. The periods, their proofs and their counts are those of the first checkpoint (in sorted order); the
others are read at every look (their newest few batches: a commit of any of them may complete a period), so
such a stream's idle look is not the cheap one above.

The **cursor** is the last period a watch emitted, kept per rule in the stream's control directory:
``<control_dir>/completeness/<digest of the rule>.json`` (:func:`cursor_path`). The file holds two slots of
:data:`CURSOR_SLOT` bytes, each a line ``<crc32 of the document, 8 hex digits> <sequence number> <the document
as JSON>`` padded with spaces; the valid slot with the highest number is the cursor. A write replaces the other
slot in place (:meth:`~airflow_streaming.control.storage.ControlStorage.write_in_place`, with its ``fsync``):
no file is created per period (a file creation cost ~260 us of CPU here, ~0.45 ms a cursor write with the
rename and the fsync: a thousand streams closing a period a minute wrote ~17 a second), and a write cut
short (a crash, a full disk) spoils only the slot it wrote: the other holds the cursor before it (that one
period is emitted again, as after a stop before the write). A storage that does not write in place (a remote
one), an absent file or one in the one-document form (what the code before wrote) is written whole with an
atomic replace. The document is ``{"rule", "identity", "start", "end", "batch_id", "at"}``, with ``"counted_through":
{"epoch", "epoch_from", "batch", "input_rows", "late_rows"}`` when the running counts at the period's last batch
were known (:class:`~airflow_streaming.completeness.CountedThrough`: the next period's counts start there; a cursor
without it, or with garbage there, is valid: only the next period's counts may be unknown); a cursor that is not
that (garbage - neither slot valid, another rule, a period that is not one of the rule's) is a
:class:`~airflow_streaming.control.contract.ControlFileError` naming the file, never read as "no cursor"
(that would emit again every period the checkpoint still shows).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import posixpath
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.checkpoint.batches import _batch_ids
from airflow_streaming.checkpoint.committed import DEFAULT_LAST, BatchCounts, _event_ms, batch_counts, read_committed
from airflow_streaming.checkpoint.logs import parse_offsets
from airflow_streaming.completeness import (CompletenessRule, CountedThrough, Counters, PeriodEvent, PeriodKey,
                                            closed_periods)
from airflow_streaming.control.contract import ControlFileError, ControlPaths, parse_json_object, progress_counting_fields

__all__ = ["CURSOR_DIR", "CURSOR_SLOT", "Look", "cursor_path", "look", "read_cursor", "remember_progress", "rule_digest",
           "write_cursor"]

#: The cursors' directory inside a stream's control directory.
CURSOR_DIR = "completeness"

#: Per checkpoint location: ``(newest commit id, highest committed watermark)`` as of the last look that
#: read it fully (or that the gate let through since). Shared by the looks of one process (the triggerer's
#: worker threads); a fact about the checkpoint, whatever the rule. Bounded: cleared past _SINCE_MAX.
_SINCE: dict[str, tuple[int, int | None]] = {}
_SINCE_LOCK = threading.Lock()
_SINCE_MAX = 100_000


def rule_digest(rule: CompletenessRule) -> str:
    """A short stable digest of a rule (its canonical form): the name of its cursor."""
    canonical = json.dumps(rule.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def cursor_path(paths: ControlPaths, rule: CompletenessRule) -> str:
    """``<control_dir>/completeness/<rule digest>.json``."""
    return f"{paths.root}/{CURSOR_DIR}/{rule_digest(rule)}.json"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


#: Bytes of each of the cursor file's two slots (a document is ~400).
CURSOR_SLOT = 2048


def _slot(sequence: int, document: bytes) -> bytes:
    """One slot: ``<crc32 hex> <sequence> <document>`` padded with spaces to :data:`CURSOR_SLOT`, ending in a
    newline."""
    line = b"%08x %d %s" % (zlib.crc32(document), sequence, document)
    if len(line) > CURSOR_SLOT - 1:
        raise ValueError(f"a cursor of {len(line)} bytes does not fit a slot of {CURSOR_SLOT}")
    return line.ljust(CURSOR_SLOT - 1) + b"\n"


#: A slot that holds nothing (no checksum: never valid).
_EMPTY_SLOT = b" " * (CURSOR_SLOT - 1) + b"\n"


def _slots(data: bytes) -> list[tuple[int, int, bytes]] | None:
    """The valid slots of a cursor file as ``(sequence, index, document)``, newest first; ``None`` when ``data``
    is not a two-slot file (the one-document form)."""
    if len(data) != 2 * CURSOR_SLOT or data[:1] == b"{":
        return None
    valid = []
    for index in range(2):
        crc, _, rest = data[index * CURSOR_SLOT:(index + 1) * CURSOR_SLOT].rstrip().partition(b" ")
        sequence, _, document = rest.partition(b" ")
        if len(crc) == 8 and sequence.isdigit() and crc.decode("ascii", "replace") == f"{zlib.crc32(document):08x}":
            valid.append((int(sequence), index, document))
    return sorted(valid, reverse=True)


def read_cursor(storage: Any, path: str, rule: CompletenessRule) -> PeriodKey | None:
    """The last emitted period of ``rule`` (``None``: none yet, the file is absent).

    :class:`ControlFileError` naming the file when it is not a cursor of this rule; a
    :class:`~airflow_streaming.control.storage.StorageError` when it cannot be read."""
    data = storage.read_bytes(path)
    if data is None:
        return None
    fix = "the completeness watch emits nothing until it is fixed: restore it, or delete it to report again " \
          "from the periods the checkpoint still shows (duplicates possible)"
    slots = _slots(data)
    if slots is not None:
        if not slots:
            raise ControlFileError(f"{path}: neither of its two slots holds a cursor (checksums do not match); {fix}")
        data = slots[0][2]
    doc = parse_json_object(path, data, fix)
    start, end = _int(doc.get("start")), _int(doc.get("end"))
    if doc.get("rule") != rule.to_dict():
        raise ControlFileError(f"{path}: a cursor of rule {doc.get('rule')!r}, not of {rule.to_dict()!r}; {fix}")
    if start is None or end is None or rule.period_at(start) != PeriodKey(start, end):
        raise ControlFileError(f"{path}: start/end {doc.get('start')!r}/{doc.get('end')!r} are not a period of "
                               f"{rule.period!r}; {fix}")
    return PeriodKey(start, end, _counted_through(doc.get("counted_through")))


def _counted_through(raw: Any) -> CountedThrough | None:
    """A cursor's ``counted_through``; ``None`` when absent or not one (it only loses the next period's counts)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("epoch"), str):
        return None
    numbers = [_int(raw.get(k)) for k in ("epoch_from", "batch", "input_rows", "late_rows")]
    if any(n is None for n in numbers):
        return None
    return CountedThrough(raw["epoch"], *numbers)  # type: ignore[arg-type]


def write_cursor(storage: Any, path: str, rule: CompletenessRule, event: PeriodEvent) -> None:
    """Record ``event`` as the last emitted period of ``rule``: in the slot of the cursor file that does not hold
    the newest valid cursor, in place; the whole file (atomic replace) when it is absent, in the one-document
    form, garbage, or the storage does not write in place."""
    doc = {"rule": rule.to_dict(), "identity": event.identity, "start": event.key.start, "end": event.key.end,
           "batch_id": event.batch_id, "at": time.time()}
    if event.key.counted_through is not None:
        doc["counted_through"] = dataclasses.asdict(event.key.counted_through)
    document = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    data = storage.read_bytes(path)
    slots = _slots(data) if data is not None else None
    if slots:
        sequence, index, _ = slots[0]
        if storage.write_in_place(path, (1 - index) * CURSOR_SLOT, _slot(sequence + 1, document)):
            return
    storage.makedirs(posixpath.dirname(path))
    storage.write_atomic(path, _slot(1, document) + _EMPTY_SLOT)


@dataclass
class Look:
    """One look at a stream for one rule."""

    events: list[PeriodEvent] = field(default_factory=list)
    """Closed periods after the cursor, oldest first (at most ``rule.max_events``)."""
    version: str | None = None
    """The stream's version as its status document says (the spec's when there is none)."""
    checkpoint: str = ""
    newest_commit: int | None = None
    """The newest commit id seen: the next look with the same one reads nothing more."""
    skipped: list[str] = field(default_factory=list)
    """Checkpoint files the read left out (:attr:`~airflow_streaming.checkpoint.committed.CommittedRead.skipped`),
    and the status document's ``earlier_progress`` entries that were garbage."""
    unchanged: bool = False
    """Nothing new can be complete since ``seen`` (no new commit, or new commits that cross no period end):
    the checkpoint's batches were not read."""


@functools.lru_cache(maxsize=1 << 14)
def _iso_ms(text: Any) -> int | None:
    """Epoch ms of a progress report's ``eventTime.watermark`` (``None``: not one). Cached: a report's watermark
    is seen at every look while the report stays in the status (~20 looks)."""
    return _event_ms(text) if isinstance(text, str) else None


def _reported_watermarks(view: Any, query_ids: set[Any] | None, batches: set[int] | None = None) -> dict[int, int]:
    """Batch id -> ``eventTime.watermark`` (epoch ms) of the progress reports in the status ``view`` of the
    queries ``query_ids`` (``None``: the view's only query; with several and no ids, nothing), of the batch ids
    ``batches`` only when given (a look asks for its few new commits' of the ~20 reports). Spark writes a
    batch's report after its commit, with the watermark it ran with: its ``offsets`` file's
    ``batchWatermarkMs`` (``ProgressReporter``: ``formatTimestamp(offsetSeqMetadata.batchWatermarkMs)``)."""
    queries = (view.queries or []) if view is not None else []
    if query_ids is None:
        queries = queries if len(queries) == 1 else []
    else:
        queries = [q for q in queries if q.id in query_ids]
    marks: dict[int, int] = {}
    for query in queries:
        for report in query.recent_progress or ():
            batch = report.batchId
            if report.eventTime is None or not isinstance(batch, int) or isinstance(batch, bool) or (
                    batches is not None and batch not in batches):
                continue
            ms = _iso_ms(report.eventTime.watermark)
            if ms is not None:
                marks[batch] = max(ms, marks.get(batch, ms))
    return marks


def _crosses(hook: Any, rule: CompletenessRule, checkpoint: str, location: str, seen_commit: int,
             commits: list[int], view: Any, query_ids: set[Any] | None) -> bool:
    """Whether the commits after ``seen_commit`` may close a period the last full read of ``location``
    could not (``True`` whenever unsure: the caller then reads the checkpoint fully). A new commit's watermark
    is its progress report's in the status ``view`` (what the health poll of the round decoded; the reports of
    ``query_ids``: :func:`_reported_watermarks`), else its ``offsets`` file's.

    A report's watermark only ever decides whether to read: a period is emitted only from what the checkpoint
    proves. One higher than its batch's (there is none in Spark) costs a full read that finds nothing; one lower
    (neither) could only hold a look back until a later commit - the status is the driver's, and so is the
    checkpoint."""
    new = [c for c in commits if c > seen_commit]
    if not new or len(new) > 8:
        return True
    if rule.by_batches:  # period [s, e) is proven by a commit of e - 1
        return rule.period_at(seen_commit + 1) != rule.period_at(new[-1] + 1)
    with _SINCE_LOCK:
        since = _SINCE.get(location)
    if since is None or since[0] != seen_commit or since[1] is None:
        return True
    top = since[1]
    reported = _reported_watermarks(view, query_ids, set(new))
    for batch_id in new:
        mark = reported.get(batch_id)
        if mark is not None:
            top = max(top, mark)
            continue
        path = posixpath.join(checkpoint, "offsets", str(batch_id))
        try:
            data = hook.checkpoint_storage.read_bytes(path)
            if data is None:
                return True
            top = max(top, parse_offsets(path, data, batch_id).batch_watermark_ms)
        except Exception:  # noqa: BLE001 - unsure: read fully, which reports it
            return True
    if rule.period_at(top) != rule.period_at(since[1]):
        return True
    with _SINCE_LOCK:
        _SINCE[location] = (new[-1], top)
    return False


#: How many commits past the last one seen :func:`_commits_after` asks for before it lists instead.
_PROBE_MAX = 8

#: Per checkpoint: ``(identity of its commits/ directory taken just before a listing, the newest commit that
#: listing found)`` (:meth:`~airflow_streaming.control.storage.ControlStorage.directory_identity`); absent when
#: the storage could not vouch for the directory. Single dict operations (atomic under the GIL); bounded.
_LISTED: dict[str, tuple[Any, int | None]] = {}


def _list_commits(storage: Any, checkpoint: str) -> list[int]:
    """The ids in ``commits/``, sorted; remembers the directory's identity as it was before the listing (an entry
    added meanwhile changes it: the next look lists again)."""
    directory = posixpath.join(checkpoint, "commits")
    mark = storage.directory_identity(directory)
    commits = _batch_ids(storage.list_dir(directory))
    if mark is None:
        _LISTED.pop(checkpoint, None)
    else:
        if len(_LISTED) >= _SINCE_MAX:
            _LISTED.clear()
        _LISTED[checkpoint] = (mark, commits[-1] if commits else None)
    return commits


def _commits_after(storage: Any, checkpoint: str, seen: int) -> list[int] | None:
    """``[seen, seen + 1, ...]``: the commit ``seen`` and those after it, without listing ``commits/`` (~200 names
    read and sorted) - on a storage where a ``stat`` costs less (a local file system). ``None``, and the caller
    lists (:func:`_list_commits`), whenever that cannot be told for sure.

    - Nothing new: the directory is as it was before the listing that found ``seen`` the newest (its identity:
      an entry added, removed or renamed changes it). One ``stat``.
    - New commits: ``commits/<seen>`` is there and so are the next names, ``seen + 1``... up to
      :data:`_PROBE_MAX` of them (Spark commits batch N + 1 after N). A log with gaps (async progress tracking
      writes the logs only every interval) may hold a newer one past the first name missing: the next look, whose
      directory is not the one last listed, asks for the next name, finds none and lists.
    - ``None``: the storage's ``exists`` is not cheap (a remote store: each is a request), ``commits/<seen>`` is
      gone (a checkpoint restored or replaced), the directory changed with no next name (a gap, a purge of old
      entries, a file being written), more than :data:`_PROBE_MAX` are new."""
    if not getattr(storage, "cheap_exists", False):
        return None
    directory = posixpath.join(checkpoint, "commits")
    listed = _LISTED.get(checkpoint)
    if listed is not None and listed[1] == seen and storage.directory_identity(directory) == listed[0]:
        return [seen]
    if not storage.exists(posixpath.join(directory, str(seen))):
        return None
    found = [seen]
    for _ in range(_PROBE_MAX + 1):  # up to _PROBE_MAX new ones, and the name after them
        if not storage.exists(posixpath.join(directory, str(found[-1] + 1))):
            return found if len(found) > 1 else None
        found.append(found[-1] + 1)
    return None


def _remember(location: str, newest: int | None, read: Any) -> None:
    """After a full read: the newest commit and the highest committed watermark it saw."""
    if newest is None or read.skipped:
        with _SINCE_LOCK:
            _SINCE.pop(location, None)
        return
    marks = [b.watermark_ms for b in read.batches if b.committed]
    with _SINCE_LOCK:
        if len(_SINCE) >= _SINCE_MAX:
            _SINCE.clear()
        _SINCE[location] = (newest, max(marks) if marks else None)


#: How many batches of progress a watch remembers (beyond what :func:`read_committed` reads, nothing is used).
REMEMBERED_BATCHES = 4 * DEFAULT_LAST


def remember_progress(memory: dict[tuple[Any, int], BatchCounts], reports: list[dict[str, Any]]) -> None:
    """Add what progress ``reports`` tell of their batches to ``memory`` (``(query id, batch id)`` ->
    :class:`~airflow_streaming.checkpoint.committed.BatchCounts` of the report's counting fields,
    :func:`~airflow_streaming.control.contract.progress_counting_fields`), keeping the newest
    :data:`REMEMBERED_BATCHES` batch ids; a report that is not one is left out, a later report of a batch (a
    replay) replaces the earlier. The status document's ``recent_progress`` holds only the current driver run's
    newest reports; its ``earlier_progress`` the counting fields of those before (earlier driver runs' too,
    carried over by each starting driver): fed both, a watch started at any time knows the counts of the newest
    batches, and what it remembered covers a driver that died before it carried them. Kept as tuples of numbers
    (not the reports: the garbage collector walks every container a triggerer keeps, at each full collection)."""
    for report in reports:
        fields = progress_counting_fields(report)
        if fields is not None:
            memory[(fields["id"], fields["batchId"])] = batch_counts(fields)
    if len(memory) > REMEMBERED_BATCHES:
        for key in sorted(memory, key=lambda k: k[1])[:len(memory) - REMEMBERED_BATCHES]:
            del memory[key]


#: How many of the newest batches of each further checkpoint a look reads for its proofs (Spark's watermark
#: never goes back: the newest committed batches hold the highest one; a few, in case one file is unreadable).
_PROOF_LAST = 4


def _proven_by_all(hook: Any, rule: CompletenessRule, others: list[str],
                   events: list[PeriodEvent]) -> tuple[list[PeriodEvent], list[str]]:
    """The leading ``events`` that the committed batches of each checkpoint of ``others`` prove too (a committed
    batch with a watermark at or past the period's end; for ``batches:<N>``, a committed batch id at or past
    its last), and what the reads left out. A checkpoint with no committed batch yet proves nothing."""
    from airflow_streaming.hooks.streaming_job import storage_path

    left_out: list[str] = []
    for other in others:
        read = read_committed(hook.checkpoint_storage, storage_path(other).rstrip("/") or "/", last=_PROOF_LAST)
        left_out.extend(read.skipped)
        committed = [b for b in read.batches if b.committed]
        if rule.by_batches:
            top = max((b.batch_id for b in committed), default=-1)
            events = [e for e in events if e.key.end - 1 <= top]
        else:
            mark = max((b.watermark_ms for b in committed), default=None)
            events = [e for e in events if mark is not None and e.key.end <= mark]
    return events, left_out


def look(hook: Any, rule: CompletenessRule, after: PeriodKey | None, seen: tuple[str, int | None] | None,
         memory: dict[tuple[Any, int], BatchCounts] | None = None) -> Look:
    """The periods of ``rule`` closed after ``after`` in the stream of ``hook`` (a
    :class:`~airflow_streaming.hooks.streaming_job.SparkStreamHook`). ``seen`` is ``(checkpoint, newest
    commit)`` of a previous look that returned fewer than ``rule.max_events`` events: if the checkpoint's
    newest commit is still that one, nothing more is read (:attr:`Look.unchanged`).

    Reads the status document's view (the checkpoints of the stream's queries, as its driver recorded them, else
    the spec's location), the first checkpoint's newest commit (:func:`_commits_after`, else the ``commits``
    listing), and only when a commit is new and may close a period, the whole status document (the progress
    reports and, for a period longer than the batches read, the running ``counters`` of the first checkpoint's
    query, which ``after.counted_through`` continues) and the checkpoint's newest batches; with several
    recorded checkpoints, also the newest batches of the others (a period must be proven by all of them). Raises what the reads raise
    (:class:`ControlFileError`, ``StorageError``, ``CheckpointError``)."""
    from airflow_streaming.hooks.streaming_job import storage_path

    view = hook.status_view(round_read=True)  # what the health poll of the same round read: shared
    by_query = {q: hook._normalized_location(str(c)) for q, c in
                ((view.query_checkpoints or {}).items() if view is not None else ())}
    recorded = sorted(set(by_query.values()))
    location = (recorded or [hook.spec.checkpoint_location])[0]
    checkpoint = storage_path(location).rstrip("/") or "/"
    commits = _commits_after(hook.checkpoint_storage, checkpoint, seen[1]) \
        if seen is not None and seen[0] == location and seen[1] is not None else None
    if commits is None:
        commits = _list_commits(hook.checkpoint_storage, checkpoint)
    newest = commits[-1] if commits else None
    version = view.version if view is not None else hook.spec.version
    others = recorded[1:]
    if not others and (seen == (location, newest) or (
            seen is not None and seen[0] == location and seen[1] is not None and newest is not None
            and not _crosses(hook, rule, checkpoint, location, seen[1], commits, view,
                             {q for q, c in by_query.items() if c == location} if by_query else None))):
        return Look(version=version, checkpoint=location, newest_commit=newest, unchanged=True)
    # Only here, not at a look that stops above (~0.25 ms for a full earlier_progress): a report stays in the
    # status document (recent_progress, then earlier_progress, which the next driver carries over) while its
    # batch is among the query's newest 32, and a period's counts need its batches among those anyway.
    memory = {} if memory is None else memory
    parsed = hook.status_parsed(round_read=True)  # the whole document: the bytes its view was made of
    doc = parsed[1] if parsed is not None else None
    earlier, ignored = doc.earlier_reports() if doc is not None else ([], 0)
    remember_progress(memory, [*earlier, *(p for q in (doc.queries if doc is not None else [])
                                           for p in q.recent_progress)])
    read = read_committed(hook.checkpoint_storage, checkpoint, counted=memory)
    entry = doc.counters_of(read.query_id) if doc is not None else None
    counters = None if entry is None else Counters(f"{read.query_id}/{entry['epoch']}", entry["from_batch"],
                                                   entry["through_batch"], entry["input_rows"], entry["late_rows"])
    events = closed_periods(rule, read.batches, after, counters)
    _remember(location, newest, read)
    skipped = list(read.skipped)
    if others:
        events, left_out = _proven_by_all(hook, rule, others, events)
        skipped += left_out
    if ignored:
        skipped.append(f"{hook.paths.status}: {ignored} earlier_progress entr{'y' if ignored == 1 else 'ies'} not "
                       f"a progress report's counting fields (left out)")
    return Look(events, version, location, newest, skipped)
