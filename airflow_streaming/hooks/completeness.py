"""The completeness watch's reads and its cursor: blocking I/O for the triggerer's worker threads.

:func:`look` reads what :func:`~airflow_streaming.completeness.closed_periods` needs (the checkpoint's
newest batches, the status document's progress reports for the counts) and returns the periods closed
after the cursor. An idle look costs the status document and one listing (the checkpoint's ``commits``):
when the newest commit did not change since the last look, nothing new can be complete, and nothing else
is read. A look after new commits first reads only the new commits' ``offsets`` files (usually one): when
their watermarks (or, for ``batches:<N>``, their ids) cross no period end since the last full read of
that checkpoint, nothing new can be complete either and the look stops there (:data:`_SINCE`); only a
crossing reads the checkpoint's newest batches (~65 files) - at a commit every trigger, that full read
every poll cost ~2 ms a stream, 40 % of a core for 1,000 streams (BENCHMARKS.md, "A thousand streams").

The **cursor** is the last period a watch emitted, kept per rule in the stream's control directory:
``<control_dir>/completeness/<digest of the rule>.json`` (:func:`cursor_path`), replaced atomically through
the hook's storage. It is ``{"rule", "identity", "start", "end", "batch_id", "at"}``; a cursor that is not
that (garbage, another rule, a period that is not one of the rule's) is a
:class:`~airflow_streaming.control.contract.ControlFileError` naming the file, never read as "no cursor"
(that would emit again every period the checkpoint still shows).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.checkpoint.batches import _batch_ids
from airflow_streaming.checkpoint.committed import DEFAULT_LAST, read_committed
from airflow_streaming.checkpoint.logs import parse_offsets
from airflow_streaming.completeness import CompletenessRule, PeriodEvent, PeriodKey, closed_periods
from airflow_streaming.control.contract import ControlFileError, ControlPaths, parse_json_object

__all__ = ["CURSOR_DIR", "Look", "cursor_path", "look", "read_cursor", "remember_progress", "rule_digest",
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


def read_cursor(storage: Any, path: str, rule: CompletenessRule) -> PeriodKey | None:
    """The last emitted period of ``rule`` (``None``: none yet, the file is absent).

    :class:`ControlFileError` naming the file when it is not a cursor of this rule; a
    :class:`~airflow_streaming.control.storage.StorageError` when it cannot be read."""
    data = storage.read_bytes(path)
    if data is None:
        return None
    fix = "the completeness watch emits nothing until it is fixed: restore it, or delete it to report again " \
          "from the periods the checkpoint still shows (duplicates possible)"
    doc = parse_json_object(path, data, fix)
    start, end = _int(doc.get("start")), _int(doc.get("end"))
    if doc.get("rule") != rule.to_dict():
        raise ControlFileError(f"{path}: a cursor of rule {doc.get('rule')!r}, not of {rule.to_dict()!r}; {fix}")
    if start is None or end is None or rule.period_at(start) != PeriodKey(start, end):
        raise ControlFileError(f"{path}: start/end {doc.get('start')!r}/{doc.get('end')!r} are not a period of "
                               f"{rule.period!r}; {fix}")
    return PeriodKey(start, end)


def write_cursor(storage: Any, path: str, rule: CompletenessRule, event: PeriodEvent) -> None:
    """Record ``event`` as the last emitted period of ``rule`` (atomic replace)."""
    doc = {"rule": rule.to_dict(), "identity": event.identity, "start": event.key.start, "end": event.key.end,
           "batch_id": event.batch_id, "at": time.time()}
    storage.makedirs(posixpath.dirname(path))
    storage.write_atomic(path, json.dumps(doc, sort_keys=True).encode())


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
    """Checkpoint files the read left out (:attr:`~airflow_streaming.checkpoint.committed.CommittedRead.skipped`)."""
    unchanged: bool = False
    """Nothing new can be complete since ``seen`` (no new commit, or new commits that cross no period end):
    the checkpoint's batches were not read."""


def _crosses(hook: Any, rule: CompletenessRule, checkpoint: str, location: str, seen_commit: int,
             commits: list[int]) -> bool:
    """Whether the commits after ``seen_commit`` may close a period the last full read of ``location``
    could not (``True`` whenever unsure: the caller then reads the checkpoint fully)."""
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
    for batch_id in new:
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


def remember_progress(memory: dict[tuple[Any, int], dict[str, Any]], reports: list[dict[str, Any]]) -> None:
    """Add the counting fields of progress ``reports`` to ``memory`` (``(query id, batch id)`` -> report), keeping
    the newest :data:`REMEMBERED_BATCHES` batch ids. The status document holds only the current driver run's
    reports: a period whose batches ran under two drivers (a kill, an upgrade) has its counts only if the watch
    remembered the first driver's reports."""
    for report in reports:
        batch = report.get("batchId") if isinstance(report, dict) else None
        if not isinstance(batch, int) or isinstance(batch, bool):
            continue
        event_time = report.get("eventTime")
        memory[(report.get("id"), batch)] = {
            "id": report.get("id"), "batchId": batch, "numInputRows": report.get("numInputRows"),
            "stateOperators": [{"numRowsDroppedByWatermark": op.get("numRowsDroppedByWatermark")}
                               for op in report.get("stateOperators") or [] if isinstance(op, dict)],
            "eventTime": {"min": event_time.get("min")} if isinstance(event_time, dict) else None}
    if len(memory) > REMEMBERED_BATCHES:
        for key in sorted(memory, key=lambda k: k[1])[:len(memory) - REMEMBERED_BATCHES]:
            del memory[key]


def look(hook: Any, rule: CompletenessRule, after: PeriodKey | None, seen: tuple[str, int | None] | None,
         memory: dict[tuple[Any, int], dict[str, Any]] | None = None) -> Look:
    """The periods of ``rule`` closed after ``after`` in the stream of ``hook`` (a
    :class:`~airflow_streaming.hooks.streaming_job.SparkStreamHook`). ``seen`` is ``(checkpoint, newest
    commit)`` of a previous look that returned fewer than ``rule.max_events`` events: if the checkpoint's
    newest commit is still that one, nothing more is read (:attr:`Look.unchanged`).

    Reads the status document (the checkpoint the stream's first query uses, as its driver recorded it,
    else the spec's location; the progress reports), the checkpoint's ``commits`` listing, and only when
    a commit is new, the checkpoint's newest batches. Raises what the reads raise
    (:class:`ControlFileError`, ``StorageError``, ``CheckpointError``)."""
    from airflow_streaming.hooks.streaming_job import storage_path

    parsed = hook.status_parsed()  # the health poll of the same round parsed it already: shared
    doc = parsed[1] if parsed is not None else None
    memory = {} if memory is None else memory
    remember_progress(memory, [p for q in (doc.queries if doc is not None else []) for p in q.recent_progress])
    recorded = sorted({hook._normalized_location(c) for c in (doc.checkpoints() if doc is not None else [])})
    location = (recorded or [hook.spec.checkpoint_location])[0]
    checkpoint = storage_path(location).rstrip("/") or "/"
    commits = _batch_ids(hook.checkpoint_storage.list_dir(posixpath.join(checkpoint, "commits")))
    newest = commits[-1] if commits else None
    version = doc.version if doc is not None else hook.spec.version
    if seen == (location, newest) or (
            seen is not None and seen[0] == location and seen[1] is not None and newest is not None
            and not _crosses(hook, rule, checkpoint, location, seen[1], commits)):
        return Look(version=version, checkpoint=location, newest_commit=newest, unchanged=True)
    read = read_committed(hook.checkpoint_storage, checkpoint, progress=sorted(memory.values(),
                                                                               key=lambda r: r["batchId"]))
    events = closed_periods(rule, read.batches, after)
    _remember(location, newest, read)
    return Look(events, version, location, newest, read.skipped)
