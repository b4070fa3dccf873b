"""What the checkpoint reader reports: plain records of one checkpoint, and their text (no I/O)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.checkpoint.batches import BatchPosition

__all__ = ["CheckpointInfo", "ColumnFamilyInfo", "CommitInfo", "OffsetsInfo", "OperatorInfo", "SourceInfo",
           "StoreInfo", "render_text"]



@dataclass(frozen=True)
class OffsetsInfo:
    """The latest ``offsets/<N>`` file (the plan of the last planned batch)."""

    batch_id: int
    file: str
    version: int
    batch_watermark_ms: int
    batch_timestamp_ms: int
    conf: dict[str, str]
    # One per source in plan order: parsed offset JSON, or None for "-" (no offset yet).
    source_offsets: list[Any]
    # Offsets log v2 only: source id -> offset.
    named_source_offsets: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CommitInfo:
    """The latest ``commits/<N>`` file."""

    batch_id: int
    file: str
    version: int
    next_batch_watermark_ms: int


@dataclass(frozen=True)
class SourceInfo:
    """One source, in plan order (``sources/<index>`` holds its log, if the source keeps one)."""

    index: int
    name: str  # directory name under sources/ (the index, or the source id in offsets v2)
    kind: str  # "file" (has a file-source log), "kafka", "none" (no offset yet) or "unknown"
    offset: Any  # from the latest offsets file (None when absent or "-")
    log_dir: str | None
    latest_log_batch: int | None  # newest batch in sources/<i> (from the listing)
    log_file_read: str | None  # the one log file read (the newest non-compact one when possible)
    entries_in_file: int  # entries in log_file_read
    latest_batch_entries: int | None  # entries of latest_log_batch (None when that file was not read)
    sample_path: str | None  # a file the source read most recently
    path_dirs: list[str]  # distinct parent directories of the entries read (the source path)


@dataclass(frozen=True)
class ColumnFamilyInfo:
    name: str
    key_schema: dict[str, Any]
    value_schema: dict[str, Any]
    key_encoder_spec: dict[str, Any] | None = None
    key_schema_id: int | None = None
    value_schema_id: int | None = None


@dataclass(frozen=True)
class StoreInfo:
    name: str
    num_partitions: int | None
    num_cols_prefix_key: int | None
    schema_file: str | None  # the schema file read (None when none was found)
    schema_version: int | None
    key_schema: dict[str, Any] | None
    value_schema: dict[str, Any] | None
    column_families: list[ColumnFamilyInfo] = field(default_factory=list)


@dataclass(frozen=True)
class OperatorInfo:
    """One stateful operator (``state/<id>``); ids count top-down from the sink."""

    id: int
    name: str | None  # e.g. stateStoreSave, dedupe, symmetricHashJoin (None without operator metadata)
    metadata_file: str | None
    metadata_version: int | None
    num_partitions: int | None
    store_names: list[str]
    stores: list[StoreInfo]
    # The "default" store's (or first store's) schemas, as StructType JSON dicts.
    key_schema: dict[str, Any] | None
    value_schema: dict[str, Any] | None
    schema_version: int | None
    operator_properties: dict[str, Any] | None = None


@dataclass
class CheckpointInfo:
    location: str
    query_id: str
    position: BatchPosition
    last_planned_batch: int | None
    last_committed_batch: int | None
    next_batch_id: int
    clean: bool
    notes: list[str]  # why it is not clean, and other oddities worth a look
    latest_offsets: OffsetsInfo | None
    latest_commit: CommitInfo | None
    sources: list[SourceInfo]
    operators: list[OperatorInfo]
    state_store_provider: str | None
    shuffle_partitions: int | None
    conf: dict[str, str]
    spark_version_hints: list[str]
    files_read: int
    dirs_listed: int
    bytes_read: int

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["position"] = self.position.to_dict()
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False, default=str)

    def render_text(self) -> str:
        return render_text(self)


# --------------------------------------------------------------------------------------------
# As text (``python -m airflow_streaming.checkpoint``).


def _fields(schema: dict[str, Any] | None) -> str:
    if not schema:
        return "-"
    out = []
    for f in schema.get("fields", []):
        t = f.get("type")
        out.append(f"{f.get('name')}: {t if isinstance(t, str) else (t or {}).get('type', '?')}")
    return ", ".join(out) or "(no fields)"


def _ms(value: int) -> str:
    if not value:
        return "0"
    import datetime as _dt

    return f"{value} ({_dt.datetime.fromtimestamp(value / 1000, _dt.timezone.utc).isoformat(timespec='seconds')})"


def render_text(info: CheckpointInfo) -> str:
    lines = [f"Checkpoint {info.location}", f"  query id:            {info.query_id}"]
    lines.append(f"  last planned batch:  {info.last_planned_batch}")
    lines.append(f"  last committed:      {info.last_committed_batch}")
    lines.append(f"  next batch id:       {info.next_batch_id}")
    lines.append(f"  clean:               {'yes' if info.clean else 'NO'}")
    o = info.latest_offsets
    if o:
        lines.append(f"  latest offsets:      {o.file} (v{o.version})")
        lines.append(f"    batch watermark:   {_ms(o.batch_watermark_ms)}")
        lines.append(f"    batch timestamp:   {_ms(o.batch_timestamp_ms)}")
    c = info.latest_commit
    if c:
        lines.append(f"  latest commit:       {c.file} (v{c.version}), next watermark {_ms(c.next_batch_watermark_ms)}")
    lines.append(f"  state store provider: {info.state_store_provider or '-'}")
    lines.append(f"  shuffle partitions:  {info.shuffle_partitions if info.shuffle_partitions is not None else '-'}")
    lines.append(f"Sources ({len(info.sources)}):")
    for s in info.sources:
        lines.append(f"  [{s.index}] {s.kind}  offset={json.dumps(s.offset)}")
        if s.log_dir:
            lines.append(
                f"      log: latest batch {s.latest_log_batch}, read {s.log_file_read} ({s.entries_in_file} entries)"
            )
        if s.path_dirs:
            lines.append(f"      path: {', '.join(s.path_dirs)}")
    lines.append(f"Stateful operators ({len(info.operators)}):")
    for op in info.operators:
        lines.append(
            f"  [{op.id}] {op.name or '?'}  partitions={op.num_partitions}  stores={','.join(op.store_names)}"
            f"  metadata=v{op.metadata_version if op.metadata_version else '-'}"
        )
        for st in op.stores:
            lines.append(f"      store {st.name}: schema v{st.schema_version or '-'} ({st.schema_file or 'not found'})")
            if st.column_families:
                for cf in st.column_families:
                    lines.append(f"        cf {cf.name}: key({_fields(cf.key_schema)}) value({_fields(cf.value_schema)})")
            else:
                lines.append(f"        key:   {_fields(st.key_schema)}")
                lines.append(f"        value: {_fields(st.value_schema)}")
    lines.append("Sinks: not recorded in the checkpoint (a file sink keeps _spark_metadata in its output dir)")
    if info.conf:
        lines.append("Recorded conf:")
        for k in sorted(info.conf):
            lines.append(f"  {k} = {info.conf[k]}")
    if info.spark_version_hints:
        lines.append("Spark version hints:")
        lines += [f"  - {h}" for h in info.spark_version_hints]
    if info.notes:
        lines.append("Notes:")
        lines += [f"  - {n}" for n in info.notes]
    lines.append(f"Read {info.files_read} files ({info.bytes_read} bytes), listed {info.dirs_listed} directories")
    return "\n".join(lines)
