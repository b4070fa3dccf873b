"""Issue 35: the warm-up copy (and a snapshot) of a checkpoint followed symbolic links inside it - a link
planted in a checkpoint made a copy read a file outside it (the worker's seal key) into a tree a driver
reads. A tree with a link inside is refused, naming the link; nothing is copied through it."""

from __future__ import annotations

import os

import pytest

from spark_jobs.runtime.plan_warm_up import copy_for_replay
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.storage import StorageError


def _checkpoint(root) -> str:
    ckpt = root / "ckpt"
    for rel, data in {"metadata": '{"id":"q"}', "offsets/0": "v1\n{}\n{}", "commits/0": "v1\n{}",
                      "state/0/0/1.delta": "d"}.items():
        (ckpt / rel).parent.mkdir(parents=True, exist_ok=True)
        (ckpt / rel).write_text(data)
    return str(ckpt)


@pytest.mark.parametrize("link", ["state/0/0/2.delta", "state/0/1"])
def test_a_link_inside_a_checkpoint_is_refused_and_nothing_is_read_through_it(tmp_path, link):
    secret = tmp_path / "outside" / "airflow_streaming_seal.key"
    secret.parent.mkdir()
    secret.write_text("SEAL-KEY-CANARY")
    ckpt = _checkpoint(tmp_path)
    os.symlink(secret if link.endswith(".delta") else secret.parent, os.path.join(ckpt, link))
    storage = LocalStorage()
    with pytest.raises(StorageError, match=r"symbolic link inside the tree.*" + link.split("/")[-1]):
        storage.list_tree(ckpt)
    scratch = tmp_path / "scratch"
    with pytest.raises(StorageError, match="symbolic link"):
        copy_for_replay(storage, ckpt, storage, str(scratch), 1 << 20)
    copied = [p.read_text() for p in scratch.rglob("*") if p.is_file()] if scratch.exists() else []
    assert not any("SEAL-KEY-CANARY" in text for text in copied)


def test_a_checkpoint_without_links_is_listed_and_a_linked_root_is_the_configured_path(tmp_path):
    ckpt = _checkpoint(tmp_path)
    storage = LocalStorage()
    names = [e.path for e in storage.list_tree(ckpt)]
    assert "state/0/0/1.delta" in names and "commits/0" in names
    os.symlink(ckpt, tmp_path / "configured")  # /data -> /mnt/data: the root may be a link
    assert [e.path for e in storage.list_tree(str(tmp_path / "configured"))] == names
