#!/usr/bin/env python
"""Checkpoint reader benchmark: does reading a checkpoint cost more as the checkpoint ages?

Usage (from the project root)::

    .venv/bin/python bench/checkpoint_bench.py [--runs 5] [--json bench/results/checkpoint.json]

Builds SYNTHETIC checkpoints by hand (no Spark) in temp dirs, in the exact format Spark 4.2.0 writes
(copied from real checkpoints, see tests/fixtures/checkpoints/): ``metadata``; ``offsets/N`` and
``commits/N`` for every batch with Hadoop's hidden ``.N.crc`` sidecars; a file-source log in
``sources/0`` (one plain file per batch, a ``.compact`` file every 10 batches holding every entry so
far, older files removed as Spark's log cleanup does); and 3 stateful operators x 200 partitions,
each partition with ``_metadata/schema`` (schema v2) and a few ``N.delta`` files, plus the operator
metadata. Two sizes: 10,000 batches and 100 batches (Spark's default retention keeps ~100).

For each it times ``read_checkpoint`` (median of N runs, warm page cache) and records how many files
it read, how many directories it listed and how many bytes it read, next to the time of the bare
directory listings (``read_batch_position``, what the existing code already does) for reference.

``--smoke`` (CI): 20 and 200 batches, one timed read each, the same table; JSON to a temp dir.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from airflow_streaming.checkpoint.batches import read_batch_position  # noqa: E402
from airflow_streaming.checkpoint.reader import read_checkpoint  # noqa: E402
from airflow_streaming.checkpoint.state_schema import encode_schema_v2  # noqa: E402
from airflow_streaming.control.local import LocalStorage  # noqa: E402
from harness import add_smoke_argument, smoke_results  # noqa: E402

DEFAULT_JSON = "bench/results/checkpoint.json"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
QUERY_ID = "3efa0466-a4b7-4c02-abfc-de66d624d451"
# The conf map Spark 4.2.0 writes into every offsets file (copied from a real checkpoint).
CONF_42 = {
    "spark.sql.streaming.stateStore.providerClass": HDFS,
    "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion": "2",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion": "5",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution": "false",
    "spark.sql.streaming.stateStore.encodingFormat": "unsaferow",
    "spark.sql.streaming.statefulOperator.useStrictDistribution": "true",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
    "spark.sql.streaming.stateStore.rowChecksum.enabled": "false",
    "spark.sql.streaming.aggregation.stateFormatVersion": "2",
    "spark.sql.function.protobufExtensions.enabled": "false",
    "spark.sql.shuffle.partitions": "200",
    "spark.sql.streaming.join.stateFormatVersion": "2",
    "spark.sql.streaming.stateStore.compression.codec": "lz4",
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan": "false",
}
OPERATORS = [
    (0, "stateStoreSave", ["key:string", "window_start:timestamp"], ["count:long", "sum:long"]),
    (1, "stateStoreSave", ["key:string"], ["count:long"]),
    (2, "dedupe", ["key:string", "event_id:string"], ["__dummy__:void"]),
]
PARTITIONS = 200
DELTAS_PER_PARTITION = 3
COMPACT_INTERVAL = 10


def _struct(spec: list[str]) -> dict:
    fields = []
    for item in spec:
        name, typ = item.split(":")
        fields.append({"name": name, "type": typ, "nullable": True, "metadata": {}})
    return {"type": "struct", "fields": fields}


def _put(path: str, data: bytes) -> None:
    """Write a file plus Hadoop's hidden checksum sidecar (.name.crc), as Spark's local FS does."""
    with open(path, "wb") as fh:
        fh.write(data)
    chunks = [data[i : i + 512] for i in range(0, len(data), 512)] or [b""]
    crc = b"crc\x00" + struct.pack(">i", 512) + b"".join(struct.pack(">I", zlib.crc32(c)) for c in chunks)
    head, tail = os.path.split(path)
    with open(os.path.join(head, f".{tail}.crc"), "wb") as fh:
        fh.write(crc)


def build(root: str, batches: int) -> dict:
    """A synthetic checkpoint of ``batches`` committed batches; returns counts of what was written."""
    t0 = time.perf_counter()
    os.makedirs(root)
    _put(f"{root}/metadata", json.dumps({"id": QUERY_ID}, separators=(",", ":")).encode())
    for sub in ("offsets", "commits", "sources/0"):
        os.makedirs(f"{root}/{sub}")
    base_ts = 1795317835574
    for b in range(batches):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": base_ts + 1000 * b, "conf": CONF_42}
        _put(f"{root}/offsets/{b}", ("v1\n" + json.dumps(meta, separators=(",", ":")) + '\n{"logOffset":%d}' % b).encode())
        _put(f"{root}/commits/{b}", b'v1\n{"nextBatchWatermarkMs":0}')
    # File-source log: Spark keeps the latest compact file and the plain files after the previous one.
    entry = lambda b: json.dumps(  # noqa: E731
        {"path": f"file:///data/in/part-{b:05d}.json", "timestamp": base_ts + 1000 * b, "batchId": b},
        separators=(",", ":"),
    )
    last = batches - 1
    compacts = [b for b in range(batches) if (b + 1) % COMPACT_INTERVAL == 0]
    keep_from = compacts[-2] + 1 if len(compacts) >= 2 else 0
    for b in range(keep_from, batches):
        if b in compacts:
            _put(f"{root}/sources/0/{b}.compact", ("v1\n" + "\n".join(entry(i) for i in range(b + 1))).encode())
        else:
            _put(f"{root}/sources/0/{b}", ("v1\n" + entry(b)).encode())
    for op_id, name, key, value in OPERATORS:
        op = f"{root}/state/{op_id}"
        os.makedirs(f"{op}/_metadata")
        info = {
            "operatorInfo": {"operatorId": op_id, "operatorName": name},
            "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0, "numPartitions": PARTITIONS}],
        }
        _put(f"{op}/_metadata/metadata", ("v1\n" + json.dumps(info, separators=(",", ":"))).encode())
        schema = encode_schema_v2(_struct(key), _struct(value))
        for p in range(PARTITIONS):
            os.makedirs(f"{op}/{p}/_metadata")
            _put(f"{op}/{p}/_metadata/schema", schema)
            for v in range(last + 2 - DELTAS_PER_PARTITION, last + 2):
                _put(f"{op}/{p}/{v}.delta", b"\x00\x00\x00\x10" + os.urandom(16) + b"\xff\xff\xff\xff")
    total_files = sum(len(f) for _, _, f in os.walk(root))
    return {"batches": batches, "files_on_disk": total_files, "build_s": round(time.perf_counter() - t0, 2)}


def measure(root: str, runs: int) -> dict:
    storage = LocalStorage()
    read_checkpoint(root)  # warm-up (page cache, imports)
    times, list_times = [], []
    info = None
    for _ in range(runs):
        t0 = time.perf_counter()
        info = read_checkpoint(root)
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        read_batch_position(storage, root)
        list_times.append(time.perf_counter() - t0)
    assert info is not None and info.clean and len(info.operators) == len(OPERATORS)
    assert all(op.num_partitions == PARTITIONS and op.key_schema for op in info.operators)
    return {
        "read_checkpoint_median_ms": round(statistics.median(times) * 1000, 2),
        "read_checkpoint_ms": [round(t * 1000, 2) for t in times],
        "listing_only_median_ms": round(statistics.median(list_times) * 1000, 2),
        "files_read": info.files_read,
        "dirs_listed": info.dirs_listed,
        "bytes_read": info.bytes_read,
        "last_committed_batch": info.last_committed_batch,
        "source_log_file_read": os.path.relpath(info.sources[0].log_file_read, root),
    }


def machine() -> dict:
    model = "?"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000])
    parser.add_argument("--json", default=DEFAULT_JSON)
    add_smoke_argument(parser)
    args = parser.parse_args()
    if args.smoke:  # two small checkpoints, one timed read each
        args.runs, args.sizes = 1, [20, 200]
        args.json = os.path.join(smoke_results("checkpoint"), "checkpoint.json")

    results = []
    work = tempfile.mkdtemp(prefix="bench-checkpoint-")
    try:
        for batches in args.sizes:
            root = os.path.join(work, f"ckpt-{batches}")
            built = build(root, batches)
            print(f"built {batches} batches: {built['files_on_disk']} files in {built['build_s']} s", flush=True)
            results.append({**built, **measure(root, args.runs)})
            shutil.rmtree(root)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mach = machine()
    header = f"{'batches':>8} {'files on disk':>14} {'read_checkpoint':>16} {'listing only':>13} {'files read':>11} {'dirs listed':>12} {'bytes read':>11}"
    print()
    print(f"read_checkpoint, median of {args.runs} (warm page cache); {OPERATORS.__len__()} operators x {PARTITIONS} partitions")
    print(header)
    for r in results:
        print(
            f"{r['batches']:>8} {r['files_on_disk']:>14} {r['read_checkpoint_median_ms']:>13.2f} ms"
            f" {r['listing_only_median_ms']:>10.2f} ms {r['files_read']:>11} {r['dirs_listed']:>12} {r['bytes_read']:>11}"
        )
    print(f"machine: {mach['nproc']} cores, {mach['cpu_model']}, {mach['python']}, load {mach['loadavg']}")

    out = {
        "benchmark": "checkpoint_reader",
        "runs": args.runs,
        "config": {"operators": len(OPERATORS), "partitions": PARTITIONS, "deltas_per_partition": DELTAS_PER_PARTITION,
                   "file_source_compact_interval": COMPACT_INTERVAL},
        "machine": mach,
        "results": results,
    }
    path = ROOT / args.json  # an absolute --json stays as given
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
