"""Which files of a checkpoint a scratch copy needs so that a query started on it *replays* the last
committed batch (pure: a listing in, a choice out).

A prepared driver (a warm upgrade's standby, a hot standby) runs the job's own plan once before it is
promoted, so that its first real batch finds the plan's code generated and its classes loaded (see
``spark_jobs.runtime.plan_warm_up``). It runs that plan on a scratch copy of the checkpoint, never on the
checkpoint. For the copy to run exactly the kind of batch the real query will run next - the same
sources, the same state, a handful of recent input - the copy ends one commit short:

- ``metadata`` (the query id), ``offsets/N`` and ``offsets/N-1``, where N is the last committed batch;
- ``commits/N-1`` but not ``commits/N``: Spark finds batch N planned and not committed, and replays it
  with its logged offsets;
- every file under ``sources/`` (a file source's log of seen files, its compactions);
- every file under ``state/`` except the versions that batch N or later wrote: batch N loads state
  version N and writes N+1, so ``<v>.delta``, ``<v>.snapshot``, ``<v>.zip``, ``<v>.changelog`` and
  ``<v>_<id>.*`` with v > N are left out;
- no ``.crc`` side file and nothing that is neither of the above.

Nothing is chosen for a checkpoint with no committed batch (a first start runs from scratch anyway), or
when the chosen files exceed a byte budget (a state of many GiB is not worth copying for a warm-up).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from airflow_streaming.control.storage import TreeEntry

__all__ = ["ReplayCopy", "choose_replay_copy"]

_BATCH = re.compile(r"[0-9]+")
_STATE_VERSION = re.compile(r"([0-9]+)(?:[._].*)?")


@dataclass(frozen=True)
class ReplayCopy:
    """The outcome: ``files`` (relative paths) to copy to replay ``batch``, or ``skipped`` (why not)."""

    batch: int | None
    files: tuple[str, ...]
    bytes: int
    skipped: str | None = None


def _batch_ids(entries: Iterable[TreeEntry], log: str) -> list[int]:
    prefix = f"{log}/"
    return sorted(int(e.path[len(prefix):]) for e in entries
                  if not e.is_dir and e.path.startswith(prefix) and _BATCH.fullmatch(e.path[len(prefix):]))


def _state_file_wanted(path: str, batch: int) -> bool:
    name = path.rsplit("/", 1)[-1]
    if name.endswith(".crc") or name.startswith("."):
        return False
    version = _STATE_VERSION.fullmatch(name)
    return version is None or int(version.group(1)) <= batch


def choose_replay_copy(entries: Iterable[TreeEntry], max_bytes: int) -> ReplayCopy:
    """The files of a checkpoint (its :meth:`~airflow_streaming.control.storage.ControlStorage.list_tree`)
    that replay its last committed batch, within ``max_bytes``."""
    entries = list(entries)
    committed = _batch_ids(entries, "commits")
    planned = set(_batch_ids(entries, "offsets"))
    if not committed:
        return ReplayCopy(None, (), 0, "no committed batch: a first start has nothing to replay")
    batch = committed[-1]
    if batch not in planned:
        return ReplayCopy(batch, (), 0, f"offsets/{batch} is missing: batch {batch} cannot be replayed")
    wanted = {"metadata", f"offsets/{batch}"}
    if batch > 0:
        wanted |= {f"offsets/{batch - 1}", f"commits/{batch - 1}"}
    files: list[str] = []
    size = 0
    for entry in entries:
        if entry.is_dir:
            continue
        path = entry.path
        name = path.rsplit("/", 1)[-1]
        keep = (path in wanted
                or (path.startswith("sources/") and not name.endswith(".crc") and not name.startswith("."))
                or (path.startswith("state/") and _state_file_wanted(path, batch)))
        if keep:
            files.append(path)
            size += entry.size
    if "metadata" not in files:
        return ReplayCopy(batch, (), 0, "the checkpoint has no metadata file")
    if size > max_bytes:
        return ReplayCopy(batch, (), size, f"the copy would be {size} bytes, over the budget of {max_bytes}")
    return ReplayCopy(batch, tuple(files), size)
