"""Snapshot a cleanly stopped checkpoint (and its file sink's log) so the old version can come back.

Before an upgrade the running version is stopped at a micro-batch boundary, so its last planned batch
N normally has ``commits/N`` (a batch that the stop cancelled anyway - planned, not committed - is left
out and replayed on restart). :func:`take_snapshot` then saves everything needed to restart that
version at batch N+1: the whole checkpoint tree except state files of versions after N+1 (state store version v is
the state after batch v-1) and ``offsets``/``commits`` entries after N, plus the entries <= N of a
file sink's ``<output>/_spark_metadata`` log. If the new version fails, :func:`restore_snapshot`
moves the live checkpoint and sink log aside and puts the snapshot back, so the old version resumes
at batch N+1 and the sink log forgets the batches the new version wrote.

Files are hard-linked when possible (copied otherwise, e.g. across filesystems). Hard links are safe
because Spark never modifies a checkpoint or sink-log file in place: it writes a temp file and
renames it over the final name, and removes old files by deleting them. Either gives the live path
another inode or none, and leaves the snapshot's inode and bytes untouched.

Checkpoints (or sink logs, or snapshot directories) that are not local files - HDFS has no hard
links - are snapshotted by :mod:`.snapshot_copy` instead: through :class:`ControlStorage`, copying
exactly the files a restart at N+1 reads (``method: "copy"`` in the manifest), with the same layout,
manifest-last rule and resumable restore. Pass ``resolve`` (location -> storage and path, e.g.
``SparkStreamHook.storage_of``) and ``snapshot_storage`` (where ``snapshot_dir`` is) for those.

A snapshot directory holds::

    checkpoint/       the checkpoint tree at batch N
    sink_metadata/    the file sink's _spark_metadata log up to batch N (only with a file sink)
    manifest.json     written last, atomically: a directory without it is an incomplete snapshot
    restoring.json    while a restore is under way: where the live directories are moved aside
    restored.json     once a restore completed: its report
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from pydantic import StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic.dataclasses import dataclass

from airflow_streaming.checkpoint.batches import read_batch_position
from airflow_streaming.control.storage import ControlStorage, local_path
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.locations import storage_for
from airflow_streaming.lifecycle import snapshot_copy
from airflow_streaming.models import parse

MANIFEST_NAME = "manifest.json"
SINK_LOG_NAME = "_spark_metadata"
_CHECKPOINT_COPY = "checkpoint"
_SINK_COPY = "sink_metadata"
_RESTORING = "restoring.json"
_RESTORED = "restored.json"

# Metadata log entries: "12", ".12.crc", "12.compact", ".12.compact.crc", ".12.<uuid>.tmp".
_LOG_ENTRY = re.compile(r"\.?(\d+)(?:\.|$)")
# State store files: "12.delta", ".12.delta.crc", "12.delta.crc", "12.snapshot", "12.zip",
# "12_<uuid>.zip", "12_<uuid>.zip.crc", "12.changelog", "12_<uuid>.changelog".
_STATE_FILE = re.compile(r"\.?(\d+)(?:_[^.]*)?\.(?:delta|snapshot|zip|changelog)(?:\.|$)")
_FILE_SINK = re.compile(r"FileSink\[(.+)\]")
_REMOTE_SCHEMES = ("hdfs", "webhdfs")
Resolver = snapshot_copy.Resolver


class SnapshotError(Exception):
    """A snapshot cannot be taken, read or restored; the message names the path and what is wrong."""


@dataclass(frozen=True)
class SnapshotManifest:
    """What a complete snapshot holds (its ``manifest.json``); checked on construction and when read."""

    checkpoint: StrictStr
    snapshot_dir: StrictStr
    batch_id: StrictInt | None
    sink_metadata: StrictStr | None
    files: StrictInt
    bytes: StrictInt
    linked: StrictBool
    created_at: StrictFloat
    method: StrictStr = "link"
    """``link``: a local snapshot (hard links, or copies); ``copy``: taken through ``ControlStorage`` by
    :mod:`.snapshot_copy` (``checkpoint`` and ``sink_metadata`` are then locations as given, URIs)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SnapshotManifest:
        """Parse; :class:`SnapshotError` naming what is missing or wrong. Unknown keys are ignored."""
        return parse(cls, d, SnapshotError)


def take_snapshot(checkpoint: str, snapshot_dir: str, sink_path: str | None = None, *,
                  resolve: Resolver | None = None, snapshot_storage: ControlStorage | None = None,
                  copy_threads: int = snapshot_copy.COPY_THREADS) -> SnapshotManifest:
    """Snapshot a clean checkpoint (and ``<sink_path>/_spark_metadata`` if it exists) into ``snapshot_dir``.

    Idempotent: a complete snapshot of the same checkpoint at the same batch is returned as is; an
    incomplete one (no manifest: a crash mid-snapshot) is deleted and taken again. Local checkpoints
    into a local ``snapshot_dir`` are hard-linked; anything else is copied (see the module docstring).
    """
    if not _all_local(checkpoint, sink_path, snapshot_storage):
        return _take_copy(checkpoint, snapshot_dir, sink_path, resolve or storage_for,
                          snapshot_storage or LocalStorage(), copy_threads)
    checkpoint = os.path.abspath(local_path(checkpoint))
    snapshot_dir = os.path.abspath(snapshot_dir)
    if not os.path.isdir(checkpoint):
        raise SnapshotError(f"checkpoint directory {checkpoint} does not exist: nothing to snapshot")
    position = read_batch_position(LocalStorage(), checkpoint)
    # A batch planned but not committed (the stop cancelled it) is left out: whoever restarts from the
    # snapshot plans it again, exactly as Spark replays an uncommitted batch.
    batch_id = position.last_committed
    existing = load_manifest(snapshot_dir)
    if existing is not None:
        if (existing.checkpoint, existing.batch_id) == (checkpoint, batch_id):
            return existing
        raise SnapshotError(
            f"{snapshot_dir} already holds a snapshot of {existing.checkpoint} at batch {existing.batch_id}, "
            f"not of {checkpoint} at batch {batch_id}; refusing to overwrite it")
    if os.path.lexists(snapshot_dir):  # no manifest: what a crash mid-snapshot left
        shutil.rmtree(snapshot_dir)
    last = -1 if batch_id is None else batch_id
    files, size, linked = _copy_tree(checkpoint, os.path.join(snapshot_dir, _CHECKPOINT_COPY),
                                     lambda rel: _in_checkpoint_at(rel, last))
    sink_log = os.path.abspath(os.path.join(local_path(sink_path), SINK_LOG_NAME)) if sink_path else None
    sink_metadata = sink_log if sink_log is not None and os.path.isdir(sink_log) else None
    if sink_metadata is not None:
        sink_files, sink_size, sink_linked = _copy_tree(sink_metadata, os.path.join(snapshot_dir, _SINK_COPY),
                                                        lambda rel: _in_log_at(rel, last))
        files, size, linked = files + sink_files, size + sink_size, linked and sink_linked
    manifest = SnapshotManifest(checkpoint, snapshot_dir, batch_id, sink_metadata, files, size, linked, time.time())
    snapshot_copy.write_json(LocalStorage(), os.path.join(snapshot_dir, MANIFEST_NAME), manifest.to_dict())
    return manifest


def _all_local(checkpoint: str, sink_path: str | None, snapshot_storage: ControlStorage | None) -> bool:
    local = ("", "file")
    return (urlparse(checkpoint).scheme in local and (sink_path is None or urlparse(sink_path).scheme in local)
            and (snapshot_storage is None or isinstance(snapshot_storage, LocalStorage)))


def _take_copy(checkpoint: str, snapshot_dir: str, sink_path: str | None, resolve: Resolver,
               snap: ControlStorage, threads: int) -> SnapshotManifest:
    existing = load_manifest(snapshot_dir, snap)
    if existing is not None:
        position = read_batch_position(*resolve(checkpoint))
        if (existing.checkpoint, existing.batch_id) == (checkpoint, position.last_committed) and position.clean:
            return existing
        raise SnapshotError(
            f"{snapshot_dir} already holds a snapshot of {existing.checkpoint} at batch {existing.batch_id}, "
            f"not of {checkpoint} at batch {position.last_committed}; refusing to overwrite it")
    if snap.exists(snapshot_dir):  # no manifest: what a crash mid-snapshot left
        snap.delete_tree(snapshot_dir)
    fields = snapshot_copy.take_copy(checkpoint, snapshot_dir, sink_path, resolve, snap, SnapshotError, threads)
    manifest = SnapshotManifest(**fields)
    snapshot_copy.write_json(snap, f"{snapshot_dir}/{MANIFEST_NAME}", manifest.to_dict())
    return manifest


def discard_incomplete(snapshot_dir: str, storage: ControlStorage | None = None) -> None:
    """Remove what a failed snapshot left in ``snapshot_dir`` (only when it has no manifest). Never raises."""
    if storage is not None and not isinstance(storage, LocalStorage):
        try:
            if storage.exists(snapshot_dir) and not storage.exists(f"{snapshot_dir}/{MANIFEST_NAME}"):
                storage.delete_tree(snapshot_dir)
        except OSError:
            pass
        return
    try:
        if os.path.isdir(snapshot_dir) and not os.path.exists(os.path.join(snapshot_dir, MANIFEST_NAME)):
            shutil.rmtree(snapshot_dir, ignore_errors=True)
    except OSError:
        pass


def restore_snapshot(manifest: SnapshotManifest, aside_suffix: str, *, resolve: Resolver | None = None,
                     snapshot_storage: ControlStorage | None = None,
                     copy_threads: int = snapshot_copy.COPY_THREADS) -> dict[str, Any]:
    """Make the live checkpoint (and sink log) exactly the snapshot; the live ones are moved aside.

    The checkpoint goes to ``<checkpoint><aside_suffix>`` and the sink log to
    ``<output>/_spark_metadata<aside_suffix>`` (a counter is appended if taken), kept for forensics.
    Resumable: the aside names are recorded in ``restoring.json`` before anything moves, so a
    restore that crashed midway ends, when called again, with the checkpoint equal to the snapshot
    (a partial copy is replaced, the moved-aside original is kept). A completed restore writes
    ``restored.json``; calling it again while the checkpoint still stands at the snapshot's batch
    does nothing and returns the same report. A ``copy`` snapshot is restored through ``resolve`` and
    ``snapshot_storage`` (see :func:`take_snapshot`).
    """
    if not aside_suffix or os.sep in aside_suffix:
        raise SnapshotError(f"aside suffix {aside_suffix!r} must be a non-empty file name suffix")
    if manifest.method == "copy":
        return snapshot_copy.restore_copy(manifest, aside_suffix, resolve or storage_for,
                                          snapshot_storage or LocalStorage(), SnapshotError, copy_threads)
    snapshot_dir = manifest.snapshot_dir
    source = os.path.join(snapshot_dir, _CHECKPOINT_COPY)
    if not os.path.isfile(os.path.join(snapshot_dir, MANIFEST_NAME)) or not os.path.isdir(source):
        raise SnapshotError(f"snapshot {snapshot_dir} is incomplete (no {MANIFEST_NAME} or no {_CHECKPOINT_COPY}/)")
    restored_path = os.path.join(snapshot_dir, _RESTORED)
    plan_path = os.path.join(snapshot_dir, _RESTORING)
    done = snapshot_copy.read_json(LocalStorage(), restored_path, SnapshotError)
    if done is not None and _stands_at(manifest.checkpoint, manifest.batch_id):
        LocalStorage().delete(plan_path)
        return done
    plan = snapshot_copy.read_json(LocalStorage(), plan_path, SnapshotError) if done is None else None
    if plan is None:
        # A fresh restore. The plan is written before the old marker goes, so no crash leaves a
        # stale plan behind without the marker that makes it ignored.
        plan = {"checkpoint_aside": _aside_name(manifest.checkpoint, aside_suffix),
                "sink_aside": _aside_name(manifest.sink_metadata, aside_suffix) if manifest.sink_metadata else None}
        snapshot_copy.write_json(LocalStorage(), plan_path, plan)
        LocalStorage().delete(restored_path)
    files = _put_back(source, manifest.checkpoint, plan["checkpoint_aside"])
    if manifest.sink_metadata is not None:
        files += _put_back(os.path.join(snapshot_dir, _SINK_COPY), manifest.sink_metadata, plan["sink_aside"])
    report = {"checkpoint": manifest.checkpoint, "batch_id": manifest.batch_id,
              "moved_aside": plan["checkpoint_aside"],
              "sink_metadata_restored": manifest.sink_metadata is not None, "files": files}
    snapshot_copy.write_json(LocalStorage(), restored_path, report)
    LocalStorage().delete(plan_path)
    return report


def load_manifest(snapshot_dir: str, storage: ControlStorage | None = None) -> SnapshotManifest | None:
    """The manifest of the complete snapshot in ``snapshot_dir`` (on ``storage``, default local files),
    or ``None`` if there is none."""
    path = f"{snapshot_dir.rstrip('/')}/{MANIFEST_NAME}"
    data = snapshot_copy.read_json(storage or LocalStorage(), path, SnapshotError)
    if data is None:
        return None
    try:
        return SnapshotManifest.from_dict(data)
    except (SnapshotError, TypeError) as exc:
        raise SnapshotError(f"{path} is not a snapshot manifest: {exc}") from exc


def sink_path_from_description(description: str | None) -> str | None:
    """The output directory of a file sink from its progress description ``FileSink[<path>]``.

    A local absolute path, or an ``hdfs://`` / ``webhdfs://`` URI as given. ``None`` for any other
    sink, another file system's URI, or a path relative to the driver's working directory.
    """
    match = _FILE_SINK.fullmatch((description or "").strip())
    if match is None:
        return None
    path = match.group(1)
    parsed = urlparse(path)
    if parsed.scheme in _REMOTE_SCHEMES and parsed.path.startswith("/"):
        return path
    if path.startswith("file:"):
        path = local_path(path)
    return path if os.path.isabs(path) else None


def _in_checkpoint_at(rel: str, batch_id: int) -> bool:
    """Whether checkpoint file ``rel`` (relative path) belongs to the checkpoint as of ``batch_id``."""
    parts = rel.split(os.sep)
    if parts[0] in ("offsets", "commits") and len(parts) == 2:
        return _in_log_at(rel, batch_id)
    if parts[0] == "state":
        version = _STATE_FILE.match(parts[-1])
        return version is None or int(version.group(1)) <= batch_id + 1
    return True


def _in_log_at(rel: str, batch_id: int) -> bool:
    """Whether metadata log file ``rel`` is unnumbered or an entry of a batch <= ``batch_id``."""
    entry = _LOG_ENTRY.match(os.path.basename(rel))
    return entry is None or int(entry.group(1)) <= batch_id


def _copy_tree(source: str, dest: str, keep: Callable[[str], bool] = lambda rel: True) -> tuple[int, int, bool]:
    """Recreate ``source`` (directories and kept files) at ``dest``, which must not exist.

    Returns (files, bytes, linked); linked is False once a file had to be copied instead.
    """
    files = size = 0
    linked = True
    for dirpath, dirnames, filenames in os.walk(source, onerror=_raise):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, source)
        os.makedirs(os.path.normpath(os.path.join(dest, rel_dir)))
        for name in sorted(filenames):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if keep(rel):
                linked = _place(os.path.join(dirpath, name), os.path.join(dest, rel), linked)
                files += 1
                size += os.path.getsize(os.path.join(dest, rel))
    return files, size, linked


def _place(source: str, dest: str, try_link: bool) -> bool:
    """Hard-link ``source`` at ``dest`` if ``try_link``, else (or if that fails) copy it; return whether linked."""
    if try_link:
        try:
            os.link(source, dest)
            return True
        except OSError:
            pass
    shutil.copy2(source, dest)
    return False


def _put_back(source: str, dest: str, aside: str | None) -> int:
    """Make ``dest`` a copy of ``source`` after moving the live ``dest`` to ``aside``; return the file count.

    Once ``aside`` exists (or when nothing was there to move aside), whatever is at ``dest`` is a
    partial copy left by an interrupted restore, and is replaced.
    """
    if aside is not None and not os.path.lexists(aside) and os.path.lexists(dest):
        os.rename(dest, aside)
    elif os.path.lexists(dest):
        shutil.rmtree(dest)
    return _copy_tree(source, dest)[0]


def _aside_name(path: str, suffix: str) -> str | None:
    """A free name ``<path><suffix>`` (then ``.1``, ``.2``...) for ``path``, or ``None`` if ``path`` is absent."""
    if not os.path.lexists(path):
        return None
    candidate, counter = path + suffix, 0
    while os.path.lexists(candidate):
        counter += 1
        candidate = f"{path}{suffix}.{counter}"
    return candidate


def _stands_at(checkpoint: str, batch_id: int | None) -> bool:
    """Whether ``checkpoint`` exists with ``batch_id`` as its last planned and last committed batch."""
    if not os.path.isdir(checkpoint):
        return False
    position = read_batch_position(LocalStorage(), checkpoint)
    return position.last_planned == position.last_committed == batch_id


def _raise(exc: OSError) -> None:
    raise exc
