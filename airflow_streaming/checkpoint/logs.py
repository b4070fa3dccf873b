"""Parsers for the text logs Spark keeps in a streaming checkpoint (``HDFSMetadataLog`` files).

Every parser takes the file's path (only used in error messages) and its bytes, and raises
:class:`CheckpointError` naming the file when the content is not what Spark writes. Nothing here
touches storage: the reader decides which few files to fetch.

Formats (Spark 4.x; the version line is ``v<N>``, checked like Spark's ``MetadataVersionUtil``):

``offsets/<N>`` (``OffsetSeqLog``)
    v1: ``v1``, an ``OffsetSeqMetadata`` JSON line (``batchWatermarkMs``, ``batchTimestampMs``,
    ``conf``), then one line per source in plan order: the source's offset JSON or ``-``.
    v2 (Spark 4.1+ ``OffsetMap``): the same metadata line (plus ``sourceMetadataInfo`` /
    ``controlBatchInfo``), then one ``<sourceId>:<offset JSON or ->`` line per source.
``commits/<N>`` (``CommitLog``)
    ``v1``/``v2``/``v3`` then ``{"nextBatchWatermarkMs":...}`` (v2 adds ``stateUniqueIds``, v3
    ``sinkMetadataMap``).
``metadata``
    a single JSON object ``{"id": "<query uuid>"}`` (no version line).
``sources/<i>/<N>`` and ``sources/<i>/<N>.compact`` (``FileStreamSourceLog``)
    ``v1`` then one ``{"path","timestamp","batchId"}`` JSON line per file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

OFFSETS_VERSIONS = (1, 2)
COMMITS_VERSIONS = (1, 2, 3)
FILE_SOURCE_LOG_VERSIONS = (1,)
OPERATOR_METADATA_VERSIONS = (1, 2)

_VERSION_RE = re.compile(r"v(\d+)")


class CheckpointError(ValueError):
    """A checkpoint is missing or one of its files cannot be understood; the message names the file."""


def supported(versions: tuple[int, ...]) -> str:
    return ", ".join(f"v{v}" for v in versions)


def decode_text(path: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def parse_version(path: str, line: str, versions: tuple[int, ...], what: str) -> int:
    """Check a ``v<N>`` version line against the versions this reader understands."""
    text = line.strip()
    match = _VERSION_RE.fullmatch(text)
    if not match:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise CheckpointError(f"{path}: malformed {what}: expected a version line like 'v1', got {shown!r}")
    version = int(match.group(1))
    if version not in versions:
        raise CheckpointError(
            f"{path}: unsupported {what} version v{version} (supported: {supported(versions)}); "
            "it was probably written by a newer Spark"
        )
    return version


def parse_json(path: str, text: str, what: str, line_no: int | None = None) -> Any:
    where = f" line {line_no}" if line_no is not None else ""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        shown = text if len(text) <= 60 else text[:60] + "..."
        raise CheckpointError(f"{path}:{where} {what} is not valid JSON ({exc.msg}): {shown!r}") from exc


def _parse_json_object(path: str, text: str, what: str, line_no: int | None = None) -> dict[str, Any]:
    value = parse_json(path, text, what, line_no)
    if not isinstance(value, dict):
        where = f" line {line_no}" if line_no is not None else ""
        raise CheckpointError(f"{path}:{where} {what} must be a JSON object, got {type(value).__name__}")
    return value


def _lines(path: str, data: bytes, what: str) -> list[str]:
    text = decode_text(path, data)
    if not text.strip():
        raise CheckpointError(f"{path}: empty {what} file (truncated write?)")
    return text.split("\n")


def _int_field(path: str, obj: dict[str, Any], key: str, what: str, default: int | None = None) -> int | None:
    if key not in obj:
        return default
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"{path}: {what} field {key!r} must be an integer, got {value!r}")
    return value


@dataclass(frozen=True)
class OffsetsEntry:
    """One ``offsets/<N>`` file: the write-ahead log entry of a planned batch."""

    batch_id: int
    version: int
    batch_watermark_ms: int
    batch_timestamp_ms: int
    conf: dict[str, str]
    # Plan order. v1: one per source; v2: in file order. Parsed JSON, or None for "-".
    offsets: list[Any]
    # v2 only: source id -> offset (same values as ``offsets``); empty for v1.
    named_offsets: dict[str, Any] = field(default_factory=dict)
    # Any other keys of the metadata line (v2: sourceMetadataInfo, controlBatchInfo).
    extra_metadata: dict[str, Any] = field(default_factory=dict)


def parse_offsets(path: str, data: bytes, batch_id: int) -> OffsetsEntry:
    lines = _lines(path, data, "offsets")
    version = parse_version(path, lines[0], OFFSETS_VERSIONS, "offsets log")
    if len(lines) < 2:
        raise CheckpointError(f"{path}: truncated offsets file: no metadata line after {lines[0].strip()!r}")
    meta_line = lines[1].strip()
    meta: dict[str, Any] = {}
    if meta_line:
        meta = _parse_json_object(path, meta_line, "offsets metadata", 2)
    elif version >= 2:
        raise CheckpointError(f"{path}: truncated offsets file: v2 requires a metadata line")
    conf = meta.get("conf") or {}
    if not isinstance(conf, dict):
        raise CheckpointError(f"{path}: offsets metadata 'conf' must be a JSON object")
    offsets: list[Any] = []
    named: dict[str, Any] = {}
    body = lines[2:]
    # Spark writes no trailing newline; tolerate one (or a blank tail) anyway.
    while body and not body[-1].strip():
        body.pop()
    for i, raw in enumerate(body, start=3):
        line = raw.strip()
        if version >= 2:
            source_id, sep, value = line.partition(":")
            if not sep or not source_id:
                raise CheckpointError(f"{path}: line {i}: expected '<sourceId>:<offset>', got {line[:60]!r}")
            parsed = None if value == "-" else parse_json(path, value, f"offset of source {source_id}", i)
            named[source_id] = parsed
            offsets.append(parsed)
        else:
            if not line:
                raise CheckpointError(f"{path}: line {i}: empty offset line (truncated write?)")
            offsets.append(None if line == "-" else parse_json(path, line, "source offset", i))
    if not offsets:
        # Every streaming query has at least one source, so a file without offset lines was cut
        # short (Spark writes the metadata line and then the offsets, with no trailing newline).
        raise CheckpointError(f"{path}: truncated offsets file: no source offset lines after the metadata line")
    extra = {k: v for k, v in meta.items() if k not in ("batchWatermarkMs", "batchTimestampMs", "conf")}
    return OffsetsEntry(
        batch_id=batch_id,
        version=version,
        batch_watermark_ms=_int_field(path, meta, "batchWatermarkMs", "offsets metadata", 0) or 0,
        batch_timestamp_ms=_int_field(path, meta, "batchTimestampMs", "offsets metadata", 0) or 0,
        conf={str(k): str(v) for k, v in conf.items()},
        offsets=offsets,
        named_offsets=named,
        extra_metadata=extra,
    )


@dataclass(frozen=True)
class CommitEntry:
    """One ``commits/<N>`` file: batch N's output is committed."""

    batch_id: int
    version: int
    next_batch_watermark_ms: int
    # v2+: operator id -> per-partition state store unique ids (checkpoint format v2); else None.
    state_unique_ids: dict[str, Any] | None = None
    # v3: sink name -> sink metadata.
    sink_metadata: dict[str, Any] | None = None


def parse_commit(path: str, data: bytes, batch_id: int) -> CommitEntry:
    lines = _lines(path, data, "commit")
    version = parse_version(path, lines[0], COMMITS_VERSIONS, "commit log")
    if len(lines) < 2 or not lines[1].strip():
        raise CheckpointError(f"{path}: truncated commit file: no metadata line after {lines[0].strip()!r}")
    meta = _parse_json_object(path, lines[1].strip(), "commit metadata", 2)
    ids = meta.get("stateUniqueIds")
    sinks = meta.get("sinkMetadataMap")
    return CommitEntry(
        batch_id=batch_id,
        version=version,
        next_batch_watermark_ms=_int_field(path, meta, "nextBatchWatermarkMs", "commit metadata", 0) or 0,
        state_unique_ids=ids if isinstance(ids, dict) else None,
        sink_metadata=sinks if isinstance(sinks, dict) else None,
    )


def parse_query_metadata(path: str, data: bytes) -> str:
    """The query id from the checkpoint's ``metadata`` file."""
    text = decode_text(path, data).strip()
    if not text:
        raise CheckpointError(f"{path}: empty query metadata file")
    # Spark writes a single JSON line; take the first line in case anything follows.
    meta = _parse_json_object(path, text.split("\n", 1)[0], "query metadata")
    query_id = meta.get("id")
    if not isinstance(query_id, str) or not query_id:
        raise CheckpointError(f"{path}: query metadata has no 'id'")
    return query_id


@dataclass(frozen=True)
class FileSourceEntry:
    path: str
    timestamp: int
    batch_id: int


def parse_file_source_log(path: str, data: bytes) -> list[FileSourceEntry]:
    """Entries of a file source log file (``sources/<i>/<N>`` or ``<N>.compact``)."""
    lines = _lines(path, data, "file source log")
    parse_version(path, lines[0], FILE_SOURCE_LOG_VERSIONS, "file source log")
    entries: list[FileSourceEntry] = []
    for i, raw in enumerate(lines[1:], start=2):
        line = raw.strip()
        if not line:
            continue
        obj = _parse_json_object(path, line, "file source entry", i)
        file_path = obj.get("path")
        if not isinstance(file_path, str):
            raise CheckpointError(f"{path}: line {i}: file source entry has no 'path'")
        entries.append(
            FileSourceEntry(
                path=file_path,
                timestamp=_int_field(path, obj, "timestamp", "file source entry", 0) or 0,
                batch_id=_int_field(path, obj, "batchId", "file source entry", -1),  # type: ignore[arg-type]
            )
        )
    return entries


def looks_like_file_source_log(data: bytes) -> bool:
    """Whether the bytes look like a FileStreamSourceLog file (used to guess a source's kind)."""
    head = data[:4096].decode("utf-8", errors="replace").split("\n")
    if len(head) < 2 or not _VERSION_RE.fullmatch(head[0].strip()):
        return False
    first = head[1].strip()
    return not first or (first.startswith("{") and '"path"' in first)
