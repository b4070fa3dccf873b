"""A read-only reader of Spark Structured Streaming checkpoints (plain Python, no Spark needed).

:func:`read_checkpoint` reports what a checkpoint records: the query id, the last planned and
committed batch, the latest offsets (watermark, batch timestamp, recorded SQL confs, per-source
offsets), the latest commit, each source's latest file-source log entry, and each stateful
operator with its state stores, partition count and key/value schemas.

Cost: the reader lists a handful of directories and reads a bounded set of files: ``metadata``,
the LATEST ``offsets`` and ``commits`` file, one file-source log file per source, and per stateful
operator its metadata file and one schema file per store (partition 0's, or the v3 file). It never
reads per-batch history, so the number of files read does not depend on the checkpoint's age
(only the directory listings do). Every access goes through :class:`ControlStorage`, wrapped so
that nothing can be written.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from airflow_streaming.checkpoint.batches import read_batch_position
from airflow_streaming.checkpoint.info import (
    CheckpointInfo,
    ColumnFamilyInfo,
    CommitInfo,
    OffsetsInfo,
    OperatorInfo,
    SourceInfo,
    StoreInfo,
)
from airflow_streaming.checkpoint.logs import (
    CheckpointError,
    CommitEntry,
    OffsetsEntry,
    looks_like_file_source_log,
    parse_commit,
    parse_file_source_log,
    parse_offsets,
    parse_query_metadata,
)
from airflow_streaming.checkpoint.state_schema import (
    OperatorMetadata,
    StateSchemaFile,
    parse_operator_metadata,
    parse_state_schema,
)
from airflow_streaming.control.storage import ControlStorage, StorageError
from airflow_streaming.control.locations import storage_for

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "ColumnFamilyInfo",
    "CommitInfo",
    "OffsetsInfo",
    "OperatorInfo",
    "SourceInfo",
    "StoreInfo",
    "read_checkpoint",
]

PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"

# The SQL confs Spark 4.2.0 records in every offsets file of a new query (observed). A checkpoint
# lacking some of them was written by an older Spark (on restart Spark fills them with defaults);
# one recording others was written by a newer one.
SPARK_42_RECORDED_CONFS = frozenset(
    {
        "spark.sql.function.protobufExtensions.enabled",
        "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan",
        "spark.sql.shuffle.partitions",
        "spark.sql.streaming.aggregation.stateFormatVersion",
        "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion",
        "spark.sql.streaming.join.stateFormatVersion",
        "spark.sql.streaming.multipleWatermarkPolicy",
        "spark.sql.streaming.queryEvolution.enableSourceEvolution",
        "spark.sql.streaming.stateStore.compression.codec",
        "spark.sql.streaming.stateStore.encodingFormat",
        "spark.sql.streaming.stateStore.providerClass",
        "spark.sql.streaming.stateStore.rocksdb.formatVersion",
        "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion",
        "spark.sql.streaming.stateStore.rowChecksum.enabled",
        "spark.sql.streaming.statefulOperator.useStrictDistribution",
    }
)

_COMPACT_RE = re.compile(r"(\d+)\.compact")


# --------------------------------------------------------------------------------------------
# Storage wrapper: read-only, counting, with a per-read listing cache.


class _ReadOnlyStorage(ControlStorage):
    """Forwards reads to ``inner``, counts them, and refuses every write."""

    def __init__(self, inner: ControlStorage) -> None:
        self.inner = inner
        self.files_read = 0
        self.bytes_read = 0
        self.dirs_listed = 0
        self._listings: dict[str, list[str]] = {}

    def read_bytes(self, path: str) -> bytes | None:
        try:
            data = self.inner.read_bytes(path)
        except StorageError as exc:
            raise CheckpointError(f"{path}: cannot be read ({exc})") from exc
        self.files_read += 1
        if data is not None:
            self.bytes_read += len(data)
        return data

    def list_dir(self, path: str) -> list[str]:
        if path not in self._listings:
            try:
                self._listings[path] = list(self.inner.list_dir(path))
            except StorageError as exc:
                raise CheckpointError(f"{path}: cannot be listed ({exc})") from exc
            self.dirs_listed += 1
        return self._listings[path]

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def _refuse(self, *_: object, **__: object) -> Any:
        raise CheckpointError("the checkpoint reader never writes to a checkpoint")

    write_atomic = _refuse  # type: ignore[assignment]
    create_exclusive = _refuse  # type: ignore[assignment]
    delete = _refuse  # type: ignore[assignment]
    makedirs = _refuse  # type: ignore[assignment]


# --------------------------------------------------------------------------------------------
# Reading.


def _join(*parts: str) -> str:
    return posixpath.join(*parts)


def _is_number(name: str) -> bool:
    """Plain ASCII digits (``str.isdigit`` also accepts '²' or '١', which ``int()`` rejects)."""
    return name.isascii() and name.isdigit()


def _batch_ids(names: list[str]) -> list[int]:
    return sorted(int(n) for n in names if _is_number(n))


def _read_required(storage: _ReadOnlyStorage, path: str, what: str) -> bytes:
    data = storage.read_bytes(path)
    if data is None:
        raise CheckpointError(f"{path}: {what} is missing (listed but unreadable, or deleted while reading)")
    return data


def read_checkpoint(location: str, storage: ControlStorage | None = None) -> CheckpointInfo:
    """Read a checkpoint without modifying it. Raises :class:`CheckpointError` naming the bad file."""
    if storage is None:
        inner, root = storage_for(location)
    else:
        inner, root = storage, location
    if len(root) > 1:
        root = root.rstrip("/")
    store = _ReadOnlyStorage(inner)

    if not store.exists(root):
        raise CheckpointError(f"checkpoint {root} does not exist")
    top = store.list_dir(root)
    metadata_path = _join(root, "metadata")
    if "metadata" not in top:
        raise CheckpointError(
            f"checkpoint {root} has no metadata file ({metadata_path}): not a streaming checkpoint, "
            "or a query that never started"
        )
    query_id = parse_query_metadata(metadata_path, _read_required(store, metadata_path, "query metadata"))

    position = read_batch_position(store, root)
    notes: list[str] = []

    offsets: OffsetsEntry | None = None
    offsets_file = None
    if position.last_planned is not None:
        offsets_file = _join(root, "offsets", str(position.last_planned))
        offsets = parse_offsets(offsets_file, _read_required(store, offsets_file, "offsets file"), position.last_planned)
    commit: CommitEntry | None = None
    commit_file = None
    if position.last_committed is not None:
        commit_file = _join(root, "commits", str(position.last_committed))
        commit = parse_commit(commit_file, _read_required(store, commit_file, "commit file"), position.last_committed)

    lp, lc = position.last_planned, position.last_committed
    if lp is not None and (lc is None or lc < lp):
        if lc is None or lc == lp - 1:
            notes.append(f"batch {lp} planned but not committed; Spark will replay it")
        else:
            notes.append(
                f"batches {lc + 1}..{lp} planned but not committed (last commit {lc}); "
                f"Spark will replay batch {lp}"
            )
    elif lc is not None and (lp is None or lc > lp):
        notes.append(f"commit {lc} has no offsets file (last planned {lp}); the offsets log was truncated or deleted")
    if lp is None and "offsets" not in top:
        notes.append("no batch was ever planned (no offsets directory)")

    conf = dict(offsets.conf) if offsets else {}
    sources = _read_sources(store, root, offsets)
    operators = _read_operators(store, root, notes)

    provider = conf.get(PROVIDER_CONF)
    shuffle = conf.get(SHUFFLE_PARTITIONS_CONF)
    try:
        shuffle_partitions = int(shuffle) if shuffle is not None else None
    except ValueError:
        shuffle_partitions = None
        notes.append(f"{offsets_file}: {SHUFFLE_PARTITIONS_CONF}={shuffle!r} is not an integer")
    for op in operators:
        if shuffle_partitions is not None and op.num_partitions is not None and op.num_partitions != shuffle_partitions:
            notes.append(
                f"operator {op.id} ({op.name}) has {op.num_partitions} state partitions but the offsets "
                f"record {SHUFFLE_PARTITIONS_CONF}={shuffle_partitions}"
            )

    hints = _version_hints(store, root, top, offsets, commit, operators)

    return CheckpointInfo(
        location=root,
        query_id=query_id,
        position=position,
        last_planned_batch=lp,
        last_committed_batch=lc,
        next_batch_id=position.next_batch_id,
        clean=position.clean,
        notes=notes,
        latest_offsets=(
            OffsetsInfo(
                batch_id=offsets.batch_id,
                file=offsets_file or "",
                version=offsets.version,
                batch_watermark_ms=offsets.batch_watermark_ms,
                batch_timestamp_ms=offsets.batch_timestamp_ms,
                conf=dict(offsets.conf),
                source_offsets=list(offsets.offsets),
                named_source_offsets=dict(offsets.named_offsets),
            )
            if offsets
            else None
        ),
        latest_commit=(
            CommitInfo(commit.batch_id, commit_file or "", commit.version, commit.next_batch_watermark_ms)
            if commit
            else None
        ),
        sources=sources,
        operators=operators,
        state_store_provider=provider,
        shuffle_partitions=shuffle_partitions,
        conf=conf,
        spark_version_hints=hints,
        files_read=store.files_read,
        dirs_listed=store.dirs_listed,
        bytes_read=store.bytes_read,
    )


# --------------------------------------------------------------------------------------------
# Sources.


def _offset_kind(offset: Any) -> str:
    if offset is None:
        return "none"
    if isinstance(offset, dict) and set(offset) == {"logOffset"}:
        return "file"
    if isinstance(offset, dict) and offset and all(
        isinstance(v, dict) and all(_is_number(str(k).lstrip("-")) for k in v) for v in offset.values()
    ):
        return "kafka"
    return "unknown"


def _read_sources(store: _ReadOnlyStorage, root: str, offsets: OffsetsEntry | None) -> list[SourceInfo]:
    sources_dir = _join(root, "sources")
    dirs = [n for n in store.list_dir(sources_dir) if not n.startswith(".")]
    names: list[str] = []
    planned: list[tuple[str, Any]] = []
    if offsets is not None:
        if offsets.named_offsets:
            planned = list(offsets.named_offsets.items())
        else:
            planned = [(str(i), off) for i, off in enumerate(offsets.offsets)]
    names = [name for name, _ in planned]
    # Source dirs that the latest plan does not mention (e.g. a removed source) come last.
    names += sorted((n for n in dirs if n not in names), key=lambda n: (not _is_number(n), int(n) if _is_number(n) else 0, n))
    offset_by_name = dict(planned)

    result = []
    for index, name in enumerate(names):
        offset = offset_by_name.get(name)
        kind = _offset_kind(offset)
        log_dir = _join(sources_dir, name) if name in dirs else None
        latest = None
        file_read = None
        entries_in_file = 0
        latest_entries = None
        sample = None
        path_dirs: list[str] = []
        if log_dir is not None:
            listing = store.list_dir(log_dir)
            plain = _batch_ids(listing)
            compact = sorted(int(m.group(1)) for n in listing if (m := _COMPACT_RE.fullmatch(n)))
            latest = max(plain[-1:] + compact[-1:], default=None)
            if latest is not None:
                # Prefer the newest plain file: its size is one batch's files, while a compact file
                # holds every file the source ever read (it grows with the checkpoint's age).
                newest_plain = plain[-1] if plain else None
                if newest_plain is not None and (latest == newest_plain or newest_plain == latest - 1):
                    chosen, name_read = newest_plain, str(newest_plain)
                else:
                    chosen, name_read = latest, f"{latest}.compact" if latest in compact else str(latest)
                file_read = _join(log_dir, name_read)
                data = _read_required(store, file_read, "source log file")
                if data[:1] == b"\x00":
                    # Kafka's initial-offset log starts with a NUL byte (kept for compatibility).
                    kind = "kafka"
                elif looks_like_file_source_log(data):
                    kind = "file"
                    entries = parse_file_source_log(file_read, data)
                    entries_in_file = len(entries)
                    if chosen == latest:
                        is_compact = name_read.endswith(".compact")
                        latest_entries = sum(e.batch_id == latest for e in entries) if is_compact else len(entries)
                    recent = [e for e in entries if e.batch_id == chosen] or entries
                    if recent:
                        sample = recent[-1].path
                    path_dirs = sorted({posixpath.dirname(e.path) for e in recent})
                elif kind == "none":
                    kind = "unknown"
        result.append(
            SourceInfo(
                index=index,
                name=name,
                kind=kind,
                offset=offset,
                log_dir=log_dir,
                latest_log_batch=latest,
                log_file_read=file_read,
                entries_in_file=entries_in_file,
                latest_batch_entries=latest_entries,
                sample_path=sample,
                path_dirs=path_dirs,
            )
        )
    return result


# --------------------------------------------------------------------------------------------
# Stateful operators.


def _latest_schema_file(store: _ReadOnlyStorage, directory: str) -> str | None:
    """Newest ``<batchId>_<uuid>`` file of a v3 ``_stateSchema/<store>`` directory."""
    best: tuple[int, str] | None = None
    for name in store.list_dir(directory):
        if name.startswith(".") or name.endswith(".crc"):
            continue
        head = name.split("_", 1)[0]
        if _is_number(head) and (best is None or (int(head), name) > best):
            best = (int(head), name)
    return _join(directory, best[1]) if best else None


def _local_schema_path(op_dir: str, recorded: str) -> str:
    """Map a recorded (absolute, possibly moved) stateSchemaFilePath into this checkpoint."""
    parts = recorded.rstrip("/").split("/")
    if "_stateSchema" in parts:
        i = len(parts) - 1 - parts[::-1].index("_stateSchema")
        return _join(op_dir, *parts[i:])
    return _join(op_dir, "_stateSchema", parts[-1])


def _read_schema(store: _ReadOnlyStorage, path: str) -> StateSchemaFile | None:
    data = store.read_bytes(path)
    return None if data is None else parse_state_schema(path, data)


def _store_info(
    store: _ReadOnlyStorage,
    root: str,
    op_dir: str,
    op_listing: list[str],
    name: str,
    num_partitions: int | None,
    num_cols_prefix_key: int | None,
    recorded_schema_paths: list[str],
) -> StoreInfo:
    schema: StateSchemaFile | None = None
    if recorded_schema_paths:
        # The last recorded path is the schema the latest batch ran with.
        schema = _read_schema(store, _local_schema_path(op_dir, recorded_schema_paths[-1]))
    if schema is None and "_stateSchema" in op_listing:
        latest = _latest_schema_file(store, _join(op_dir, "_stateSchema", name))
        if latest:
            schema = _read_schema(store, latest)
    if schema is None:
        part0 = _join(op_dir, "0") if name == "default" else _join(op_dir, "0", name)
        schema = _read_schema(store, _join(part0, "_metadata", "schema"))
    if schema is None:
        return StoreInfo(name, num_partitions, num_cols_prefix_key, None, None, None, None)
    families = [
        ColumnFamilyInfo(
            cf.name, cf.key_schema, cf.value_schema, cf.key_encoder_spec, cf.key_schema_id, cf.value_schema_id
        )
        for cf in schema.column_families
    ]
    default = schema.default
    return StoreInfo(
        name=name,
        num_partitions=num_partitions,
        num_cols_prefix_key=num_cols_prefix_key,
        schema_file=schema.path,
        schema_version=schema.version,
        key_schema=default.key_schema if default else None,
        value_schema=default.value_schema if default else None,
        column_families=families if schema.version >= 3 else [],
    )


def _operator_metadata(store: _ReadOnlyStorage, op_dir: str, op_listing: list[str]) -> OperatorMetadata | None:
    if "_metadata" not in op_listing:
        return None
    meta_dir = _join(op_dir, "_metadata")
    listing = store.list_dir(meta_dir)
    if "v2" in listing:
        batches = _batch_ids(store.list_dir(_join(meta_dir, "v2")))
        if batches:
            path = _join(meta_dir, "v2", str(batches[-1]))
            return parse_operator_metadata(path, _read_required(store, path, "operator metadata"))
    if "metadata" in listing:
        path = _join(meta_dir, "metadata")
        return parse_operator_metadata(path, _read_required(store, path, "operator metadata"))
    return None


_NOT_A_STORE = {"SSTs", "_metadata"}


def _read_operators(store: _ReadOnlyStorage, root: str, notes: list[str]) -> list[OperatorInfo]:
    state_dir = _join(root, "state")
    operators = []
    for op_id in _batch_ids(store.list_dir(state_dir)):
        op_dir = _join(state_dir, str(op_id))
        op_listing = store.list_dir(op_dir)
        partitions = _batch_ids(op_listing)
        meta = _operator_metadata(store, op_dir, op_listing)
        stores: list[StoreInfo] = []
        if meta is not None:
            if meta.operator_id != op_id:
                notes.append(f"{meta.path}: records operatorId {meta.operator_id} but lives in state/{op_id}")
            for s in meta.stores:
                stores.append(
                    _store_info(
                        store, root, op_dir, op_listing, s.store_name, s.num_partitions,
                        s.num_cols_prefix_key, s.state_schema_file_paths,
                    )
                )
            num_partitions = meta.stores[0].num_partitions if meta.stores else (len(partitions) or None)
        else:
            # No operator metadata (written before Spark 4.0): find the stores in partition 0.
            num_partitions = len(partitions) or None
            names: list[str] = []
            if partitions:
                part0 = store.list_dir(_join(op_dir, str(partitions[0])))
                if "_metadata" in part0:
                    names.append("default")
                names += sorted(n for n in part0 if "." not in n and not n.startswith(("_", ".")) and n not in _NOT_A_STORE and not _is_number(n))
            if not names:
                names = ["default"]
            for name in names:
                stores.append(_store_info(store, root, op_dir, op_listing, name, num_partitions, None, []))
            notes.append(f"state/{op_id}: no operator metadata file (checkpoint written before Spark 4.0?); name unknown")
        main = next((s for s in stores if s.name == "default" and s.schema_file), None) or next(
            (s for s in stores if s.schema_file), None
        )
        for s in stores:
            if s.schema_file is None:
                notes.append(f"state/{op_id}: no state schema file found for store {s.name!r}")
        operators.append(
            OperatorInfo(
                id=op_id,
                name=meta.operator_name if meta else None,
                metadata_file=meta.path if meta else None,
                metadata_version=meta.version if meta else None,
                num_partitions=num_partitions,
                store_names=[s.name for s in stores],
                stores=stores,
                key_schema=main.key_schema if main else None,
                value_schema=main.value_schema if main else None,
                schema_version=main.schema_version if main else None,
                operator_properties=meta.operator_properties if meta else None,
            )
        )
    return operators


# --------------------------------------------------------------------------------------------
# Version hints.


def _version_hints(
    store: _ReadOnlyStorage,
    root: str,
    top: list[str],
    offsets: OffsetsEntry | None,
    commit: CommitEntry | None,
    operators: list[OperatorInfo],
) -> list[str]:
    hints: list[str] = []
    if offsets is not None:
        if offsets.version >= 2:
            hints.append(
                f"offsets log v{offsets.version} (named sources: spark.sql.streaming.offsetLog.formatVersion=2 "
                "with source evolution; Spark 4.2 can write it, older releases cannot read it)"
            )
        keys = set(offsets.conf)
        missing = sorted(SPARK_42_RECORDED_CONFS - keys)
        newer = sorted(k for k in keys - SPARK_42_RECORDED_CONFS)
        if missing:
            hints.append(
                f"offsets lack {len(missing)} conf key(s) Spark 4.2 records ({', '.join(missing)}): "
                "written by an older Spark"
            )
        if newer:
            hints.append(f"offsets record conf key(s) Spark 4.2.0 does not write ({', '.join(newer)}): a newer Spark?")
        if not missing and not newer:
            hints.append("offsets record exactly the conf keys Spark 4.2 writes")
    if commit is not None and commit.version >= 2:
        hints.append(f"commit log v{commit.version} (Spark 4.x; older releases cannot read it)")
    versions = {op.metadata_version for op in operators if op.metadata_version}
    if 1 in versions:
        hints.append("operator metadata v1 present: written by Spark 4.0+ (state-metadata source usable)")
    if 2 in versions:
        hints.append("operator metadata v2 present (transformWithState): Spark 4.0+")
    if operators and not versions:
        hints.append("no operator metadata: written before Spark 4.0")
    schema_versions = sorted({s.schema_version for op in operators for s in op.stores if s.schema_version})
    if schema_versions:
        hints.append("state schema format " + ", ".join(f"v{v}" for v in schema_versions))
    if commit is not None and commit.state_unique_ids:
        hints.append("commits record state store unique ids: spark.sql.streaming.stateStore.checkpointFormatVersion=2")
    # Checksum sidecars: Hadoop's are hidden (.N.delta.crc, binary). Spark's own checkpoint file
    # checksums (spark.sql.streaming.checkpoint.fileChecksum.enabled, on by default in 4.2; observed
    # beside RocksDB's N_<uuid>.zip, not beside HDFS-store deltas) are visible N.zip.crc JSON files.
    # One bounded listing: partition 0 of the first operator (its size does not grow with age).
    if operators:
        part0 = _join(root, "state", str(operators[0].id), "0")
        visible = [n for n in store.list_dir(part0) if n.endswith(".crc") and not n.startswith(".")]
        if visible:
            hints.append(
                f"visible checkpoint checksum files ({visible[0]}, ...): Spark 4.1+ file checksums"
            )
    return hints
