"""The exactly-once checks read a sink while Spark writes it: the reader must neither fail nor invent rows.

CI once failed a hot-standby test here: pyarrow's recursive listing walked into a
``.spark-staging-<uuid>/_temporary/0/_temporary`` directory that the running query deleted mid-walk
(FileNotFoundError). These tests make that churn on purpose, with real files, and read all the while.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.outputs import read_etl_output


def _partition(root, batch: int, ids: list[str], name: str = "part-00000.snappy.parquet") -> None:
    folder = root / "date=2026-11-27" / f"batch_id={batch}"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"event_id": ids}), folder / name)


def _churn(root, stop: threading.Event, replace_batch: int | None, ids: list[str]) -> None:
    """What a running query does beside its committed files: staging trees come and go, and a replayed
    batch's partition is deleted and its new files moved in (dynamic partition overwrite)."""
    while not stop.is_set():
        staging = root / f".spark-staging-{uuid.uuid4()}" / "_temporary" / "0" / "_temporary" / "attempt_0"
        deep = staging / "date=2026-11-27" / "batch_id=9"
        deep.mkdir(parents=True)
        (deep / "part-00000.snappy.parquet").write_bytes(b"not yet parquet")
        (root / "_temporary" / "0").mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging.parents[3])
        shutil.rmtree(root / "_temporary")
        if replace_batch is not None:
            new = root / f".spark-staging-{uuid.uuid4()}"
            new.mkdir()
            pq.write_table(pa.table({"event_id": ids}), new / "part-00000.snappy.parquet")
            target = root / "date=2026-11-27" / f"batch_id={replace_batch}"
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            os.rename(new / "part-00000.snappy.parquet", target / "part-00000.snappy.parquet")
            new.rmdir()


def _read_during_churn(tmp_path, replace_batch: int | None, reads: int = 300):
    first, second = [f"e{i}" for i in range(50)], [f"e{i}" for i in range(50, 80)]
    _partition(tmp_path, 0, first)
    _partition(tmp_path, 1, second)
    (tmp_path / "_SUCCESS").write_bytes(b"")
    stop = threading.Event()
    churn = threading.Thread(target=_churn, args=(tmp_path, stop, replace_batch, second), daemon=True)
    churn.start()
    try:
        return [read_etl_output(str(tmp_path)) for _ in range(reads)], first, second
    finally:
        stop.set()
        churn.join(10)


def test_staging_directories_that_vanish_mid_listing_are_never_entered(tmp_path):
    outputs, first, second = _read_during_churn(tmp_path, replace_batch=None)
    for out in outputs:
        assert sorted(out.event_ids) == sorted(first + second) and not out.duplicates
        assert out.rows_per_batch == {0: 50, 1: 30}


def test_a_partition_replaced_while_read_gives_its_old_or_new_files_never_an_error(tmp_path):
    outputs, first, second = _read_during_churn(tmp_path, replace_batch=1)
    for out in outputs:
        assert not out.duplicates
        assert set(first) <= set(out.event_ids) <= set(first + second)
        assert out.rows_per_batch.get(1, 30) == 30  # the whole replayed batch or none of it (mid-swap)
    assert any(out.rows == 80 for out in outputs)


def test_no_output_yet_reads_as_empty(tmp_path):
    assert read_etl_output(str(tmp_path / "missing")).rows == 0
    (tmp_path / "out" / "_spark_metadata").mkdir(parents=True)
    (tmp_path / "out" / ".spark-staging-1").mkdir()
    assert read_etl_output(str(tmp_path / "out")).rows == 0
