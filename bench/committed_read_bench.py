#!/usr/bin/env python
"""What a completeness watcher's full read of a checkpoint costs, with and without the files it read before.

Usage (from the project root; no Spark)::

    .venv/bin/python bench/committed_read_bench.py [--runs 7] [--reads 300] [--json bench/results/committed_read.json]

When a stream's commits may close a period, its completeness watcher reads the checkpoint's newest 32 batches
(``airflow_streaming.checkpoint.committed.read_committed``): the ``offsets`` and ``commits`` listings, the
watermark of each ``offsets/<N>``, whether each ``commits/<N>`` is a commit. Spark never changes those files once
they are in place, so a read uses what the previous read parsed from a file while the storage vouches it is the
same file (``ControlStorage.file_identity``; on a local file system one ``stat``). This bench times that read on a
checkpoint written as Spark writes one (``metadata``, 100 retained batches of ``offsets``/``commits`` with their
``.crc`` sidecars, the files settled, i.e. written more than ``LocalStorage.SETTLED_S`` before) with 40 progress
reports for the counts, in one process:

- ``kept``: ``LocalStorage``, the read the triggerer makes (after a first read that fills what is kept);
- ``baseline`` (same run, alternated): the same read through a storage that cannot vouch for a file (the base
  class's ``file_identity``: every file read and parsed, as before the change, and as on WebHDFS today).

Each run times ``--reads`` reads of each; the figure is the median over ``--runs`` of each run's mean CPU per read
(``time.process_time``), the files each read opened, and the ratio kept / baseline. The share of a core is what
1,000 streams closing a period once a minute each (``bench/scale_watch_bench.py``'s fleet: ~17 full reads a
second) would spend on those reads.

``--smoke`` (CI): 1 run of 20 reads each, files settled by a shorter ``SETTLED_S``; JSON to a temp dir.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for entry in (str(ROOT), str(ROOT / "bench")):
    if entry not in sys.path:
        sys.path.insert(0, entry)
from harness import add_smoke_argument, smoke_results  # noqa: E402

BATCHES = 100  # Spark's default minBatchesToRetain
REPORTS = 40
READS_PER_S = 1000 / 60  # 1,000 streams, a period closed per stream and minute


def build_checkpoint(root: str) -> None:
    """``metadata``, ``offsets/<N>`` and ``commits/<N>`` (temp file + rename, as Spark's file manager) with
    ``.crc`` sidecars, for the newest ``BATCHES`` batches."""
    for sub in ("offsets", "commits"):
        os.makedirs(os.path.join(root, sub))
    Path(root, "metadata").write_text(json.dumps({"id": "q-bench"}))
    for batch in range(BATCHES):
        meta = {"batchWatermarkMs": batch * 5000, "batchTimestampMs": 1_767_225_600_000 + batch * 5000,
                "conf": {"spark.sql.shuffle.partitions": "2",
                         "spark.sql.streaming.stateStore.providerClass":
                             "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"}}
        files = {f"offsets/{batch}": f"v1\n{json.dumps(meta)}\n{json.dumps({'logOffset': batch})}",
                 f"commits/{batch}": f'v1\n{{"nextBatchWatermarkMs":{batch * 5000}}}'}
        for name, text in files.items():
            directory, base = os.path.split(os.path.join(root, name))
            tmp = os.path.join(directory, f".{base}.tmp")
            Path(tmp).write_bytes(text.encode())
            os.replace(tmp, os.path.join(directory, base))
            Path(directory, f".{base}.crc").write_bytes(b"crc\x00")


def reports() -> list[dict[str, Any]]:
    first = BATCHES - REPORTS
    return [{"id": "q-bench", "batchId": b, "numInputRows": 400, "stateOperators": [{"numRowsDroppedByWatermark": 0}],
             "eventTime": {"min": "2026-01-01T00:00:00.000Z"}} for b in range(first, BATCHES)]


def one_run(storages: dict[str, Any], checkpoint: str, reads: int, first: str) -> dict[str, dict[str, float]]:
    from airflow_streaming.checkpoint.committed import read_committed

    progress = reports()
    out: dict[str, dict[str, float]] = {}
    order = ["kept", "baseline"] if first == "kept" else ["baseline", "kept"]
    for name in order:
        storage = storages[name]
        expected = read_committed(storage, checkpoint, progress=progress)  # fills what is kept
        files = 0
        began = time.process_time()
        for _ in range(reads):
            read = read_committed(storage, checkpoint, progress=progress)
            files += read.files_read
        cpu = (time.process_time() - began) / reads
        if read.batches != expected.batches or read.skipped:
            raise SystemExit(f"{name}: a read differs from the first one: {read.batches[-1:]} {read.skipped[:1]}")
        out[name] = {"cpu_s": cpu, "files_read": files / reads}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--json", default="bench/results/committed_read.json")
    add_smoke_argument(parser)
    ns = parser.parse_args()

    from airflow_streaming.control.local import LocalStorage
    from airflow_streaming.control.storage import ControlStorage

    class CannotVouch(LocalStorage):
        file_identity = ControlStorage.file_identity  # type: ignore[assignment]

    if ns.smoke:
        ns.runs, ns.reads = 1, 20
        ns.json = str(Path(smoke_results("committed_read")) / "committed_read.json")
        LocalStorage.SETTLED_S = 0.05
    root = tempfile.mkdtemp(prefix="committed-read-bench-")
    try:
        checkpoint = os.path.join(root, "checkpoint")
        build_checkpoint(checkpoint)
        time.sleep(LocalStorage.SETTLED_S + 0.2)  # the files settled, as a running stream's older batches are
        storages = {"kept": LocalStorage(), "baseline": CannotVouch()}
        runs = [one_run(storages, checkpoint, ns.reads, "kept" if i % 2 else "baseline") for i in range(ns.runs)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {name: statistics.median(r[name]["cpu_s"] for r in runs) for name in ("kept", "baseline")}
    files = {name: statistics.median(r[name]["files_read"] for r in runs) for name in ("kept", "baseline")}
    ratio = med["kept"] / med["baseline"]
    print(f"full read of 32 batches: {med['kept'] * 1e3:.3f} ms CPU with what is kept ({files['kept']:.0f} files read), "
          f"{med['baseline'] * 1e3:.3f} ms without ({files['baseline']:.0f} files read), ratio {ratio:.2f}", flush=True)
    print(f"at {READS_PER_S:.1f} full reads a second (1,000 streams, a period a minute each): "
          f"{100 * med['kept'] * READS_PER_S:.2f} % of a core, against {100 * med['baseline'] * READS_PER_S:.2f} %",
          flush=True)
    doc = {"benchmark": "a completeness watcher's full read of a checkpoint (issue 37)",
           "config": {"runs": ns.runs, "reads": ns.reads, "batches": BATCHES, "reports": REPORTS},
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_end": os.getloadavg()},
           "results": {"kept_ms": round(med["kept"] * 1e3, 4), "baseline_ms": round(med["baseline"] * 1e3, 4),
                       "ratio_kept_over_baseline": round(ratio, 3), "files_read": files, "raw": runs}}
    Path(ns.json).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.json).write_text(json.dumps(doc, indent=1))
    print(f"wrote {ns.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
