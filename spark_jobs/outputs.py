"""Read the bundled jobs' outputs without Spark (pyarrow), for summaries and exactly-once checks."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as ds


def _data_files(path: str) -> list[str]:
    """The data files under ``path``, never entering Spark's bookkeeping directories.

    A running query creates and deletes ``.spark-staging-*/_temporary/...`` (and ``_temporary``) while we
    look; a listing that walks into them fails when one vanishes mid-walk. Those directories, ``_SUCCESS``,
    ``_spark_metadata`` and ``.crc`` files are skipped before they are entered; a directory that vanishes
    anyway is skipped (``os.walk`` ignores it), as it holds nothing committed.
    """
    found = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        found.extend(os.path.join(root, f) for f in sorted(files) if not f.startswith(("_", ".")))
    return found


def _read(path: str, columns: list[str], fmt: str = "parquet", attempts: int = 20) -> pa.Table | None:
    """``columns`` of every data file under ``path`` (None if there is none yet).

    A batch replayed after a restart overwrites its own partition (dynamic partition overwrite): its old
    files are deleted and the new ones moved in while we read. A file gone between the listing and the read
    makes the read start over (the next listing sees the partition's new files), ``attempts`` times at most.
    """
    for attempt in range(attempts):
        files = _data_files(path) if os.path.isdir(path) else []
        if not files:
            return None
        try:
            return ds.dataset(files, format=fmt, partitioning="hive", partition_base_dir=path,
                              exclude_invalid_files=True).to_table(columns=columns)
        except FileNotFoundError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.05)
    return None


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
    table = _read(path, ["event_id", "batch_id"])
    if table is None:
        return EtlOutput(Counter(), {})
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
