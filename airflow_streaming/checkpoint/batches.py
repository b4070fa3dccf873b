"""Last planned and last committed micro-batch of a checkpoint.

Spark writes ``offsets/<N>`` when it plans batch N (the write-ahead log) and ``commits/<N>`` once
batch N's output is committed. A checkpoint is *clean* when its last planned batch has a commit:
a restart then continues with batch N+1 and replays nothing. A stop in the middle of a batch leaves
``offsets/N`` without ``commits/N``; Spark replays batch N with the same offsets on restart.
Only the two directory listings are read, so the cost does not grow with the checkpoint's age
beyond the listing itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from airflow_streaming.control.storage import ControlStorage


_BATCH_FILE = re.compile(r"[0-9]+")  # what a batch file is named (see _batch_ids)


def _batch_ids(names: list[str]) -> list[int]:
    # Data files are plain ASCII integers; skip .crc, .tmp, compacted, hidden and any odd names
    # (str.isdigit() alone would accept '²' or '١', which int() then rejects: isascii() first; the same
    # names as _BATCH_FILE.fullmatch, ~4x faster on a listing of a few hundred names).
    return sorted(int(n) for n in names if n.isascii() and n.isdigit())


@dataclass(frozen=True)
class BatchPosition:
    """Where a checkpoint stands."""

    checkpoint: str
    last_planned: int | None
    last_committed: int | None

    @property
    def clean(self) -> bool:
        """The last planned batch is committed (or nothing was ever planned)."""
        return self.last_planned == self.last_committed

    @property
    def next_batch_id(self) -> int:
        """The batchId a restart will run next (a replay when not clean)."""
        if self.last_committed is None:
            return 0 if self.last_planned is None else self.last_planned
        return self.last_committed + 1

    def to_dict(self) -> dict[str, object]:
        return {
            "checkpoint": self.checkpoint,
            "last_planned_batch": self.last_planned,
            "last_committed_batch": self.last_committed,
            "clean": self.clean,
            "next_batch_id": self.next_batch_id,
        }


def read_batch_position(storage: ControlStorage, checkpoint: str) -> BatchPosition:
    """Read the last planned and committed batch ids of a checkpoint directory."""
    planned = _batch_ids(storage.list_dir(f"{checkpoint}/offsets"))
    committed = _batch_ids(storage.list_dir(f"{checkpoint}/commits"))
    return BatchPosition(checkpoint, planned[-1] if planned else None, committed[-1] if committed else None)
