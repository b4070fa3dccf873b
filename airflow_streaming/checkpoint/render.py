"""The checkpoint reader's report as text (``python -m airflow_streaming.checkpoint``)."""

from __future__ import annotations

import json
from typing import Any

from airflow_streaming.checkpoint.info import CheckpointInfo

__all__ = ["render_text"]


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
