"""Checkpoint snapshots on storage without hard links (HDFS): copy exactly what a restart reads.

The local snapshot (:mod:`.snapshot`) hard-links the whole checkpoint tree, which costs nothing.
HDFS has no hard links, so here every byte kept is a byte copied - through :class:`ControlStorage`,
from any backend to any backend (HDFS checkpoint -> HDFS or local control dir, and back). What a
restart of a cleanly stopped query at batch N+1 reads, and so what is kept:

- ``metadata`` and any other top-level file;
- ``offsets/``, ``commits/``: the entries of batches <= N (Spark's restart reads N and N-1; older ones
  are the inspectable history, and small);
- ``sources/<i>/`` (file source log, Kafka's initial offsets): the latest ``<K>.compact`` <= N and every
  entry after it (a file source reads the log from its latest compaction on, and finds no gap);
  every entry when the log was never compacted;
- ``state/<op>/...``: everything under ``_metadata/`` and ``_stateSchema/`` directories, RocksDB's shared
  ``SSTs/``, and per store directory the files that load state version N+1 (the state after batch N):
  HDFS-backed store - the latest ``<S>.snapshot`` <= N+1 and the ``.delta`` files S+1..N+1 (all deltas
  up to N+1 without a snapshot); RocksDB - the latest ``<S>[_<id>].zip`` <= N+1 and the ``.changelog``
  files S+1..N+1. Checksum companions (``.V.delta.crc``, ``V.zip.crc``) follow their file;
- a file sink's ``_spark_metadata``: the latest compaction <= N and the entries after it up to N.

Leftover temp files (``*.tmp``) are never copied. Copies go ``copy_threads`` files at a time (a
NameNode round trip per request is the cost on HDFS, not bytes). The manifest is written last, so
a snapshot without one is incomplete; restores are resumable exactly as the local ones (a
``restoring.json`` plan naming the aside paths is written before anything moves).
"""

from __future__ import annotations

import json
import posixpath
import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow_streaming.checkpoint.batches import read_batch_position
from airflow_streaming.control.contract import ControlFileError, parse_json_object
from airflow_streaming.control.storage import ControlStorage, StorageError, TreeEntry

Resolver = Callable[[str], "tuple[ControlStorage, str]"]

MANIFEST_NAME = "manifest.json"
SINK_LOG_NAME = "_spark_metadata"
CHECKPOINT_COPY, SINK_COPY = "checkpoint", "sink_metadata"
RESTORING, RESTORED = "restoring.json", "restored.json"
COPY_THREADS = 8

# Checksums follow their file: Hadoop's hidden ".N.delta.crc", Spark's own "N_<id>.zip.crc" (4.1+), and a
# local copy's ".N_<id>.zip.crc.crc".
_LOG_ENTRY = re.compile(r"\.?(\d+)(\.compact)?(?:\.crc)*$")
_STATE_FILE = re.compile(r"\.?(\d+)(?:_[^.]*)?\.(delta|snapshot|zip|changelog)(?:\.crc)*$")
_ALWAYS_UNDER = ("_metadata", "_stateSchema", "SSTs")


def restart_files(entries: Iterable[TreeEntry], batch_id: int) -> list[TreeEntry]:
    """The files of a checkpoint tree (``entries`` from :meth:`ControlStorage.list_tree`) that a restart
    at batch ``batch_id + 1`` reads (see the module docstring); ``batch_id`` -1: nothing committed."""
    files = [e for e in entries if not e.is_dir and not posixpath.basename(e.path).endswith(".tmp")]
    by_dir: dict[str, list[TreeEntry]] = {}
    for entry in files:
        by_dir.setdefault(posixpath.dirname(entry.path), []).append(entry)
    kept: list[TreeEntry] = []
    for directory, members in by_dir.items():
        parts = directory.split("/") if directory else []
        if parts in (["offsets"], ["commits"]):
            kept += [e for e in members if (_log_entry(e) or (-1, False))[0] <= batch_id]
        elif len(parts) == 2 and parts[0] == "sources":
            kept += log_since_compaction(members, None)
        elif parts and parts[0] == "state" and not any(p in _ALWAYS_UNDER for p in parts):
            kept += _state_files(members, batch_id + 1)
        else:
            kept += members
    return sorted(kept)


def log_since_compaction(members: list[TreeEntry], up_to: int | None) -> list[TreeEntry]:
    """Entries of one compactible metadata log (file source log, file sink log): the latest compaction
    (<= ``up_to`` when given) and every entry after it (<= ``up_to``), and any unnumbered file."""
    unnumbered, numbered = [], []
    for entry in members:
        parsed = _log_entry(entry)
        if parsed is None:
            unnumbered.append(entry)
        elif up_to is None or parsed[0] <= up_to:
            numbered.append((parsed[0], parsed[1], entry))
    start = max((n for n, compact, _ in numbered if compact), default=-1)
    return unnumbered + [entry for n, _, entry in numbered if n >= start]


def _log_entry(entry: TreeEntry) -> tuple[int, bool] | None:
    """``(batch id, is a compaction)`` of a metadata log file name (``12``, ``.12.crc``, ``19.compact``)."""
    match = _LOG_ENTRY.match(posixpath.basename(entry.path))
    return (int(match.group(1)), bool(match.group(2))) if match else None


def _state_files(members: list[TreeEntry], version: int) -> list[TreeEntry]:
    """The files of one state store directory that load state ``version``: the newest full copy
    (``.snapshot``, ``.zip``) <= version and the incremental files (``.delta``, ``.changelog``) after it."""
    versioned, kept = [], []
    for entry in members:
        match = _STATE_FILE.match(posixpath.basename(entry.path))
        if match is None:
            kept.append(entry)  # not a versioned state file: keep
        else:
            versioned.append((int(match.group(1)), match.group(2) in ("snapshot", "zip"), entry))
    base = max((v for v, full, _ in versioned if full and v <= version), default=0)
    for v, full, entry in versioned:
        if (full and v == base) or (not full and base < v <= version):
            kept.append(entry)
    return kept


# ------------------------------------------------------------------------------------------ copying


def copy_files(src: ControlStorage, src_root: str, entries: list[TreeEntry], dst: ControlStorage, dst_root: str,
               dirs: Iterable[str] = (), threads: int = COPY_THREADS) -> tuple[int, int]:
    """Copy ``entries`` (files, relative to ``src_root``) to ``dst_root``, which must not exist, and create
    the directories ``dirs`` that no copied file implies; return (files, bytes)."""
    dst.makedirs(dst_root)
    implied = {posixpath.dirname(e.path) for e in entries}
    implied |= {p for d in list(implied) for p in _parents(d)}
    empty = sorted(set(dirs) - implied)
    for directory in [d for d in empty if not any(o.startswith(d + "/") for o in empty)]:
        dst.makedirs(f"{dst_root}/{directory}")

    failed = threading.Event()

    def copy(entry: TreeEntry) -> int:
        if failed.is_set():  # a worker may pick up the next file before the caller cancels it
            return 0
        try:
            data = src.read_bytes(f"{src_root}/{entry.path}")
            if data is None:
                raise StorageError(2, f"{src_root}/{entry.path} vanished while it was being copied: is a query "
                                      "still running on this checkpoint?")
            dst.write_once(f"{dst_root}/{entry.path}", data)
        except BaseException:
            failed.set()
            raise
        return len(data)

    if not entries:
        return 0, 0
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(entries))), thread_name_prefix="snapshot-copy") as pool:
        futures = [pool.submit(copy, entry) for entry in entries]
        try:
            sizes = [future.result() for future in futures]
        except BaseException:
            for future in futures:  # the first error ends the copy: nothing more is started
                future.cancel()
            raise
    return len(sizes), sum(sizes)


def _parents(path: str) -> list[str]:
    out = []
    while path:
        out.append(path)
        path = posixpath.dirname(path)
    return out


def read_json(storage: ControlStorage, path: str, error: type[Exception]) -> dict[str, Any] | None:
    """The JSON object in ``path`` (``None`` when there is no such file); ``error`` when it is not one."""
    text = storage.read_text(path)
    if text is None:
        return None
    try:
        return parse_json_object(path, text)
    except ControlFileError as exc:
        raise error(str(exc)) from exc


def write_json(storage: ControlStorage, path: str, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` as indented JSON, atomically."""
    storage.write_atomic(path, json.dumps(data, indent=2).encode("utf-8"))


# ------------------------------------------------------------------------------------------ take / restore


def take_copy(checkpoint: str, snapshot_dir: str, sink_path: str | None, resolve: Resolver,
              snap: ControlStorage, error: type[Exception], threads: int = COPY_THREADS) -> dict[str, Any]:
    """Copy what a restart of ``checkpoint`` reads (and the sink log) into ``snapshot_dir`` on ``snap``;
    return the manifest fields (the caller builds and writes the manifest). ``error`` is the exception
    raised for a checkpoint that cannot be snapshotted."""
    storage, root = resolve(checkpoint)
    if not storage.exists(root):
        raise error(f"checkpoint directory {checkpoint} does not exist: nothing to snapshot")
    position = read_batch_position(storage, root)
    if not position.clean:
        raise error(f"checkpoint {checkpoint} is not clean: last planned batch {position.last_planned}, last "
                    f"committed batch {position.last_committed}; stop the query gracefully before taking a snapshot")
    batch_id = position.last_committed
    last = -1 if batch_id is None else batch_id
    tree = storage.list_tree(root)
    kept = restart_files(tree, last)
    files, size = copy_files(storage, root, kept, snap, f"{snapshot_dir}/{CHECKPOINT_COPY}",
                             [e.path for e in tree if e.is_dir], threads)
    sink_metadata = None
    if sink_path:
        sink_log = f"{sink_path.rstrip('/')}/{SINK_LOG_NAME}"
        sink_storage, sink_root = resolve(sink_log)
        if sink_storage.exists(sink_root):
            sink_tree = [e for e in sink_storage.list_tree(sink_root) if not e.is_dir and "/" not in e.path]
            sink_files, sink_size = copy_files(sink_storage, sink_root, log_since_compaction(sink_tree, last), snap,
                                               f"{snapshot_dir}/{SINK_COPY}", (), threads)
            files, size, sink_metadata = files + sink_files, size + sink_size, sink_log
    return {"checkpoint": checkpoint, "snapshot_dir": snapshot_dir, "batch_id": batch_id,
            "sink_metadata": sink_metadata, "files": files, "bytes": size, "linked": False, "created_at": time.time(),
            "method": "copy"}


def restore_copy(manifest: Any, aside_suffix: str, resolve: Resolver, snap: ControlStorage,
                 error: type[Exception], threads: int = COPY_THREADS) -> dict[str, Any]:
    """Make the live checkpoint (and sink log) exactly the snapshot, moving the live ones aside; resumable
    (see :func:`airflow_streaming.lifecycle.snapshot.restore_snapshot`)."""
    snapshot_dir = manifest.snapshot_dir
    source = f"{snapshot_dir}/{CHECKPOINT_COPY}"
    if not snap.exists(f"{snapshot_dir}/{MANIFEST_NAME}") or not snap.exists(source):
        raise error(f"snapshot {snapshot_dir} is incomplete (no {MANIFEST_NAME} or no {CHECKPOINT_COPY}/)")
    storage, root = resolve(manifest.checkpoint)
    restored_path, plan_path = f"{snapshot_dir}/{RESTORED}", f"{snapshot_dir}/{RESTORING}"
    done = read_json(snap, restored_path, error)
    if done is not None and _stands_at(storage, root, manifest.batch_id):
        snap.delete(plan_path)
        return done
    plan = read_json(snap, plan_path, error) if done is None else None
    if plan is None:
        sink = resolve(manifest.sink_metadata) if manifest.sink_metadata else None
        plan = {"checkpoint_aside": _aside_name(storage, root, aside_suffix),
                "sink_aside": _aside_name(sink[0], sink[1], aside_suffix) if sink else None}
        write_json(snap, plan_path, plan)
        snap.delete(restored_path)
    files = _put_back(snap, source, storage, root, plan["checkpoint_aside"], threads)
    if manifest.sink_metadata is not None:
        sink_storage, sink_root = resolve(manifest.sink_metadata)
        files += _put_back(snap, f"{snapshot_dir}/{SINK_COPY}", sink_storage, sink_root, plan["sink_aside"], threads)
    report = {"checkpoint": manifest.checkpoint, "batch_id": manifest.batch_id, "moved_aside": plan["checkpoint_aside"],
              "sink_metadata_restored": manifest.sink_metadata is not None, "files": files}
    write_json(snap, restored_path, report)
    snap.delete(plan_path)
    return report


def _put_back(src: ControlStorage, source: str, dst: ControlStorage, dest: str, aside: str | None, threads: int) -> int:
    """Make ``dest`` a copy of ``source`` after moving the live ``dest`` to ``aside`` (once that exists, or
    when there was nothing to move aside, whatever is at ``dest`` is a partial copy and is replaced)."""
    if aside is not None and not dst.exists(aside) and dst.exists(dest):
        dst.move(dest, aside)
    elif dst.exists(dest):
        dst.delete_tree(dest)
    tree = src.list_tree(source)
    return copy_files(src, source, [e for e in tree if not e.is_dir], dst, dest,
                      [e.path for e in tree if e.is_dir], threads)[0]


def _aside_name(storage: ControlStorage, path: str, suffix: str) -> str | None:
    if not storage.exists(path):
        return None
    candidate, counter = path + suffix, 0
    while storage.exists(candidate):
        counter += 1
        candidate = f"{path}{suffix}.{counter}"
    return candidate


def _stands_at(storage: ControlStorage, root: str, batch_id: int | None) -> bool:
    if not storage.exists(root):
        return False
    position = read_batch_position(storage, root)
    return position.last_planned == position.last_committed == batch_id
