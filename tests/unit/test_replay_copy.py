"""The scratch copy that replays a checkpoint's last committed batch (pure choice over a listing)."""

from __future__ import annotations

import itertools

from airflow_streaming.checkpoint.replay_copy import choose_replay_copy
from airflow_streaming.control.storage import TreeEntry


def _listing(paths: list[str], size: int = 10) -> list[TreeEntry]:
    dirs = sorted({"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)})
    return sorted([TreeEntry(d, True, 0) for d in dirs] + [TreeEntry(p, False, size) for p in paths])


CHECKPOINT = [
    "metadata", ".metadata.crc",
    "offsets/3", "offsets/4", "offsets/5", "offsets/.5.crc",
    "commits/3", "commits/4", "commits/.4.crc",
    "sources/0/0", "sources/0/1", "sources/0/2.compact", "sources/0/3", "sources/0/4", "sources/0/5",
    "state/0/_metadata/metadata", "state/0/_metadata/v2/0_abc",
    "state/0/0/_metadata/schema", "state/0/0/3.delta", "state/0/0/4.delta", "state/0/0/5.delta",
    "state/0/0/.5.delta.crc", "state/0/0/2.snapshot", "state/0/1/4.delta", "state/0/1/5.delta",
    "state/1/0/4.zip", "state/1/0/5.changelog", "state/1/0/5_1f2e.zip", "state/1/0/SSTs/000008-1f2e.sst",
    "state/1/_stateSchema/default/0_9a8b.schema",
    "_unknown/file",
]


def test_the_copy_ends_one_commit_short_so_that_the_last_committed_batch_is_replayed():
    chosen = choose_replay_copy(_listing(CHECKPOINT), max_bytes=10**6)
    assert chosen.skipped is None and chosen.batch == 4
    assert set(chosen.files) == {
        "metadata", "offsets/3", "offsets/4", "commits/3",
        "sources/0/0", "sources/0/1", "sources/0/2.compact", "sources/0/3", "sources/0/4", "sources/0/5",
        "state/0/_metadata/metadata", "state/0/_metadata/v2/0_abc", "state/0/0/_metadata/schema",
        "state/0/0/3.delta", "state/0/0/4.delta", "state/0/0/2.snapshot", "state/0/1/4.delta",
        "state/1/0/4.zip", "state/1/0/SSTs/000008-1f2e.sst", "state/1/_stateSchema/default/0_9a8b.schema",
    }
    assert chosen.bytes == 10 * len(chosen.files)


def test_over_every_subset_of_logs_no_commit_of_the_replayed_batch_or_later_state_is_ever_copied():
    logs = ["offsets/0", "offsets/1", "offsets/2", "commits/0", "commits/1", "commits/2"]
    state = ["state/0/0/1.delta", "state/0/0/2.delta", "state/0/0/3.delta", "state/0/0/2_x.zip"]
    for n in range(len(logs) + 1):
        for present in itertools.combinations(logs, n):
            chosen = choose_replay_copy(_listing(["metadata", *present, *state]), max_bytes=10**6)
            commits = sorted(int(p.split("/")[1]) for p in present if p.startswith("commits/"))
            if not commits:
                assert chosen.files == () and "no committed batch" in chosen.skipped
                continue
            batch = commits[-1]
            assert chosen.batch == batch
            if f"offsets/{batch}" not in present:
                assert chosen.files == () and f"offsets/{batch} is missing" in chosen.skipped
                continue
            assert f"offsets/{batch}" in chosen.files
            assert not any(p.startswith("commits/") and int(p.split("/")[1]) >= batch for p in chosen.files)
            assert not any(p.startswith("offsets/") and int(p.split("/")[1]) > batch for p in chosen.files)
            versions = [int(p.rsplit("/", 1)[1].split(".")[0].split("_")[0]) for p in chosen.files
                        if p.startswith("state/")]
            assert all(v <= batch for v in versions)
            assert (batch in versions) == (batch >= 1)  # batch N loads state version N (0: empty state)


def test_no_metadata_or_a_copy_over_budget_is_skipped_with_the_reason():
    without = [p for p in CHECKPOINT if p != "metadata"]
    assert "no metadata" in choose_replay_copy(_listing(without), 10**6).skipped
    over = choose_replay_copy(_listing(CHECKPOINT), max_bytes=50)
    assert over.files == () and "over the budget of 50" in over.skipped and over.bytes == 200
