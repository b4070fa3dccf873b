"""A stream's control directory and checkpoint on disk, as after a real run, for tests without a JVM."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from airflow_streaming.sealing import sealed
from airflow_streaming.control import contract
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec

FIXTURE_CHECKPOINT = Path(__file__).resolve().parent / "fixtures" / "checkpoints" / "spark42_agg_dedup"
RUN_ID = "20260101T000000Z-0000aaaa"


def spec_under(tmp_path: Path, **overrides) -> StreamSpec:
    fields = {"name": "s1", "application": "device_signals", "checkpoint_location": str(tmp_path / "ckpt" / "s1"),
              "control_location": str(tmp_path / "control"), "master": "local[2]", "version": "v1",
              "application_args": ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]}
    fields.update(overrides)
    return StreamSpec.from_dict(fields)


def deployed_stream(tmp_path: Path, with_checkpoint: bool = True) -> tuple[StreamSpec, SparkStreamHook]:
    """A stream that ran (deployed.json, a status of a run with committed batches, a real Spark 4.2
    checkpoint) and whose driver is gone - everything a lifecycle action reads, without a JVM."""
    spec = spec_under(tmp_path)
    hook = SparkStreamHook(spec)
    storage = hook.storage.unguarded  # fixtures are written behind the step guard
    if with_checkpoint:
        shutil.copytree(FIXTURE_CHECKPOINT, spec.checkpoint_location)
    run_id = RUN_ID
    storage.write_atomic(hook.deployed_path, json.dumps({"run_id": run_id, "at": 1.0, "spec": sealed(spec.to_dict())}).encode())
    doc = contract.StatusDocument(stream="s1", version="v1", run_id=run_id, state=contract.STOPPED, pid=1,
                                  host="elsewhere", started_at=1.0, heartbeat_at=2.0, ready=True,
                                  queries=[contract.QueryStatus("q", "r", "s1", False, last_batch_id=3)],
                                  exit={"code": 0, "reason": "graceful stop"})
    contract.write_status(storage, hook.paths, doc)
    return spec, hook


def tree_digest(root: str) -> str:
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            digest.update(path.encode())
            with open(path, "rb") as fh:
                digest.update(fh.read())
    return digest.hexdigest()


