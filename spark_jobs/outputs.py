"""Read the bundled jobs' outputs without Spark (pyarrow), for summaries and exactly-once checks."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass

import pyarrow.dataset as ds


def _dataset(path: str, fmt: str = "parquet") -> ds.Dataset | None:
    if not os.path.isdir(path):
        return None
    # Skip Spark's bookkeeping (_SUCCESS, _spark_metadata, .crc files).
    return ds.dataset(path, format=fmt, partitioning="hive", exclude_invalid_files=True,
                      ignore_prefixes=["_", "."])


@dataclass(frozen=True)
class EtlOutput:
    """What the ETL job wrote: every event id (with repeats, if any) and rows per batch."""

    event_ids: Counter
    rows_per_batch: dict[int, int]

    @property
    def rows(self) -> int:
        return sum(self.event_ids.values())

    @property
    def duplicates(self) -> dict[str, int]:
        return {k: v for k, v in self.event_ids.items() if v > 1}

    def rows_in_batches(self, first: int, last: int | None) -> int:
        return sum(n for b, n in self.rows_per_batch.items() if b >= first and (last is None or b <= last))


def read_etl_output(path: str) -> EtlOutput:
    dataset = _dataset(path)
    if dataset is None:
        return EtlOutput(Counter(), {})
    table = dataset.to_table(columns=["event_id", "batch_id"])
    ids = Counter(table.column("event_id").to_pylist())
    per_batch = Counter(int(b) for b in table.column("batch_id").to_pylist())
    return EtlOutput(ids, dict(per_batch))


def count_quarantined(path: str) -> int:
    """Number of quarantined lines (JSON files under ``<quarantine>/batch_id=N/``)."""
    total = 0
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for name in files:
            if name.startswith("part-"):
                with open(os.path.join(root, name), "rb") as fh:
                    total += sum(1 for line in fh if line.strip())
    return total


def committed_sink_files(path: str) -> list[str]:
    """Files a Spark file sink committed, from its ``_spark_metadata`` log (what Spark readers see).

    Files of a batch cancelled before its commit stay in the directory but are not listed here.
    """
    log_dir = os.path.join(path, "_spark_metadata")
    files: set[str] = set()
    if not os.path.isdir(log_dir):
        return []
    for name in sorted(os.listdir(log_dir)):
        if name.startswith(".") or not name.split(".")[0].isdigit():
            continue
        with open(os.path.join(log_dir, name)) as fh:
            for line in fh.read().splitlines()[1:]:
                entry = json.loads(line)
                target = entry["path"].removeprefix("file://").removeprefix("file:")
                if entry.get("action", "add") == "delete":
                    files.discard(target)
                else:
                    files.add(target)
    return sorted(files)


def read_window_counts(path: str) -> dict[tuple[str, str], int]:
    """``{(window_start ISO, device_id): events}`` from the device-signals output's committed files,
    summed over rows (a window written twice shows up as a doubled count)."""
    files = committed_sink_files(path)
    if not files:
        return {}
    table = ds.dataset(files, format="parquet").to_table(columns=["window_start", "device_id", "events"])
    out: Counter = Counter()
    for start, device, events in zip(*(table.column(c).to_pylist() for c in ("window_start", "device_id", "events"))):
        out[(start.isoformat(), device)] += events
    return dict(out)
