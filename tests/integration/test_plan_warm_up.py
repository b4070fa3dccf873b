"""A prepared driver's plan warm-up (spark_jobs/runtime/plan_warm_up.py) against a real Spark checkpoint
of the bundled stateful job: it replays the last committed batch on a scratch copy, and it writes
neither the checkpoint nor the sink - a ``foreachBatch`` sink included - nor leaves its copy behind.
Broken on purpose: garbage in a state file, an unreadable source log, a copy over the byte budget; each
time the warm-up is skipped or fails, says why, and changes nothing. One Spark session for the module."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_streaming.bundled_job import JobContext, bundled_writer
from spark_jobs.runtime.plan_warm_up import MAX_BYTES_CONF, warm_up_plan
from webhdfs_standin import WebHdfsStandIn

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[1]").appName("plan-warm-up-tests")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    try:
        yield session
    finally:
        session.stop()


def _events(directory: Path, name: str, first: int, count: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"event_id": f"e{i}", "device_id": f"d{i % 3}", "event_type": "t", "signal": float(i),
                         "ts": f"2024-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}.000Z"}) for i in range(first, first + count)]
    tmp = directory / f".{name}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.rename(directory / name)


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def stream(spark, tmp_path_factory):
    """device_signals run for three batches (one input file each) to a Parquet sink, then stopped."""
    root = tmp_path_factory.mktemp("warm-up")
    for n in range(3):
        _events(root / "in", f"f{n}.json", n * 50, 50)
    args = ["--input", str(root / "in"), "--output", str(root / "out"), "--max-files-per-trigger", "1"]
    ctx = JobContext("signals", "v1", str(root / "ckpt"), 1.0)
    query = bundled_writer(spark, "device_signals", args, ctx).trigger(availableNow=True).start()
    query.awaitTermination(180)
    assert query.exception() is None
    commits = sorted(int(n) for n in os.listdir(root / "ckpt" / "commits") if n.isdigit())
    assert commits[:3] == [0, 1, 2], commits  # one batch per file (then, maybe, one for the watermark)
    return root, args, commits[-1]


def _ns(root: Path, args: list[str], run_id: str, job: str = "device_signals") -> SimpleNamespace:
    (root / "ctl").mkdir(exist_ok=True)
    return SimpleNamespace(job=job, app_args=list(args), stream="signals", version="v2", trigger_seconds=1.0,
                           checkpoint=str(root / "ckpt"), control_dir=str(root / "ctl"), run_id=run_id)


def _untouched(root: Path):
    before = (_digest(root / "ckpt"), _digest(root / "out"))
    yield
    assert (_digest(root / "ckpt"), _digest(root / "out")) == before
    assert not list((root / "ctl").glob("warm-up/*")), "the scratch copy was left behind"


def test_the_last_committed_batch_is_replayed_on_a_copy_and_nothing_is_written(spark, stream, caplog):
    root, args, last = stream
    caplog.set_level(logging.INFO, "airflow_streaming.runtime")
    check = _untouched(root)
    next(check)
    seconds = warm_up_plan(spark, _ns(root, args, "run-a"))
    assert seconds is not None and seconds > 0, caplog.text
    assert f"plan warm-up replayed batch {last} (" in caplog.text
    assert not spark.streams.active
    next(check, None)


def test_a_foreach_batch_sink_is_never_called(spark, stream, tmp_path):
    """noop replaces the job's format, a foreachBatch function included: the function never runs."""
    root, args, last = stream
    called = tmp_path / "called"
    module = types.ModuleType("spark_jobs.jobs.foreach_batch_probe")

    def build(session, job_args, ctx):
        from spark_jobs.jobs import device_signals

        def sink(df, batch_id):
            called.write_text(f"batch {batch_id}")

        return device_signals.windowed_counts(session, device_signals.parse_args(job_args)).writeStream \
            .outputMode("append").foreachBatch(sink)

    module.build = build
    sys.modules[module.__name__] = module
    try:
        check = _untouched(root)
        next(check)
        assert warm_up_plan(spark, _ns(root, args, "run-b", job="foreach_batch_probe")) is not None
        next(check, None)
    finally:
        del sys.modules[module.__name__]
    assert not called.exists(), called.read_text()


def test_broken_on_purpose_skipped_or_failed_with_the_reason_and_nothing_changed(spark, stream, caplog, inject):
    root, args, last = stream
    caplog.set_level(logging.INFO, "airflow_streaming.runtime")
    # over the byte budget: skipped before anything is copied
    spark.conf.set(MAX_BYTES_CONF, "100")
    try:
        check = _untouched(root)
        next(check)
        assert warm_up_plan(spark, _ns(root, args, "run-c")) is None
        next(check, None)
        assert "over the budget of 100" in caplog.text
    finally:
        spark.conf.unset(MAX_BYTES_CONF)
    # a storage error reading the checkpoint (EIO on the source log) and writing the copy (ENOSPC): the
    # warm-up fails, the standby goes on
    for fault in ({"point": "storage.read", "match": "/sources/0/", "action": "error", "errno": "EIO"},
                  {"point": "storage.write", "match": "/warm-up/", "action": "error", "errno": "ENOSPC"}):
        inject([fault])
        try:
            check = _untouched(root)
            next(check)
            assert warm_up_plan(spark, _ns(root, args, "run-d")) is None
            next(check, None)
            assert "plan warm-up failed (the standby goes on)" in caplog.text, fault
        finally:
            inject([])
        caplog.clear()
    # garbage in the state the replay loads (the copy's, not the checkpoint's): the replay fails
    delta = root / "ckpt" / "state" / "0" / "0" / f"{last}.delta"  # the version the replay of `last` loads
    saved = delta.read_bytes()
    delta.write_bytes(b"\x00garbage\x00" * 8)
    try:
        check = _untouched(root)
        next(check)
        assert warm_up_plan(spark, _ns(root, args, "run-e")) is None
        next(check, None)
        assert f"plan warm-up replay of batch {last} failed" in caplog.text, caplog.text[-2000:]
    finally:
        delta.write_bytes(saved)
    assert not spark.streams.active


@pytest.mark.long(covered_by="tests/integration/test_plan_warm_up.py::"
                           "test_the_last_committed_batch_is_replayed_on_a_copy_and_nothing_is_written")
def test_the_replay_with_checkpoint_and_control_dir_on_webhdfs(spark, stream, tmp_path, caplog):
    """The same replay with the checkpoint and the control directory on HDFS, against the WebHDFS-protocol
    STAND-IN (tests/webhdfs_standin.py; no real NameNode can run here): the copy goes through the JVM's
    Hadoop FileSystem, and Spark runs the replay's state store on ``webhdfs://``."""
    root, args, last = stream
    caplog.set_level(logging.INFO, "airflow_streaming.runtime")
    namespace = tmp_path / "hdfs"
    shutil.copytree(root / "ckpt", namespace / "ckpt")
    (namespace / "ctl").mkdir()
    with WebHdfsStandIn(str(namespace)) as nn:
        ns = SimpleNamespace(job="device_signals", app_args=list(args), stream="signals", version="v2",
                             trigger_seconds=1.0, checkpoint=f"{nn.uri}/ckpt", control_dir=f"{nn.uri}/ctl",
                             run_id="run-h")
        before = (_digest(namespace / "ckpt"), _digest(root / "out"))
        seconds = warm_up_plan(spark, ns)
        log = list(nn.log)
    assert seconds is not None, caplog.text[-3000:]
    assert f"plan warm-up replayed batch {last} (" in caplog.text
    assert (_digest(namespace / "ckpt"), _digest(root / "out")) == before
    assert not list((namespace / "ctl").glob("warm-up/*"))
    # the copy was written, and the replay's state store read and wrote, over the WebHDFS protocol
    assert any(e.method == "PUT" and e.path.startswith("/ctl/warm-up/run-h/") for e in log)
    assert any(e.path.startswith("/ctl/warm-up/run-h/state/") and e.method == "GET" for e in log)
    assert not [e for e in log if e.method in ("PUT", "POST", "DELETE") and e.path.startswith("/ckpt")]


TEAM_SCRIPT = '''
"""A team's own stateful job (not written for the product): counts per device, foreachBatch to its own files."""
import argparse
import json
import os

from pyspark.sql import SparkSession, functions as F

parser = argparse.ArgumentParser()
parser.add_argument("--input"); parser.add_argument("--sink"); parser.add_argument("--checkpoint")
parser.add_argument("--available-now", action="store_true")
ns = parser.parse_args()
spark = SparkSession.builder.getOrCreate()
events = spark.readStream.schema("event_id string, device_id string, event_type string, signal double, ts string") \\
    .option("maxFilesPerTrigger", 1).json(ns.input)
counts = events.groupBy("device_id").agg(F.count("*").alias("n"))


def write(df, batch_id):
    os.makedirs(ns.sink, exist_ok=True)
    with open(os.path.join(ns.sink, f"batch-{batch_id}.json"), "w") as fh:
        json.dump(sorted(tuple(r) for r in df.collect()), fh)


writer = counts.writeStream.queryName("team_counts").outputMode("update").foreachBatch(write) \\
    .option("checkpointLocation", ns.checkpoint)
writer = writer.trigger(availableNow=True) if ns.available_now else writer.trigger(processingTime="30 seconds")
writer.start().awaitTermination()
'''


def test_a_user_scripts_own_query_is_planned_held_and_replayed(spark, tmp_path, caplog):
    """A standby of a user script runs it up to its first start(), which is held (nothing starts), and
    replays the last committed batch with the script's own plan and output mode: its checkpoint and its
    foreachBatch sink untouched, no copy left, no query left running."""
    import runpy

    from spark_jobs.runtime.plan_warm_up import SCRIPT_CONF, plan_script

    caplog.set_level(logging.INFO, "airflow_streaming.runtime")
    root = tmp_path
    script = root / "team_counts.py"
    script.write_text(TEAM_SCRIPT)
    for n in range(2):
        _events(root / "in", f"f{n}.json", n * 40, 40)
    args = ["--input", str(root / "in"), "--sink", str(root / "out"), "--checkpoint", str(root / "ckpt")]
    saved = sys.argv
    sys.argv = [str(script), *args, "--available-now"]
    try:
        runpy.run_path(str(script), run_name="__main__")  # the team's job, run as itself: two batches
    finally:
        sys.argv = saved
    assert sorted(p.name for p in (root / "out").iterdir()) == ["batch-0.json", "batch-1.json"]
    ns = SimpleNamespace(job=None, script=str(script), app_args=args, stream="team", version="v2",
                         trigger_seconds=5.0, checkpoint="/unused-by-scripts", control_dir=str(root / "ctl"),
                         run_id="run-s")
    (root / "ctl").mkdir()
    check = _untouched(root)
    next(check)
    planned = plan_script(spark, ns)
    assert planned is not None, caplog.text[-2000:]
    assert not spark.streams.active  # held: nothing started
    assert (planned.checkpoint, planned.output_mode, planned.query_name) == (str(root / "ckpt"), "update", "team_counts")
    assert planned.trigger == {"kind": "processing_time", "interval_s": 30.0}
    seconds = warm_up_plan(spark, ns, planned)
    assert seconds is not None and seconds > 0, caplog.text[-3000:]
    assert "plan warm-up replayed batch 1 (" in caplog.text
    assert not spark.streams.active
    next(check, None)  # checkpoint and sink byte for byte as they were (foreachBatch never called), no copy
    assert sys.argv == saved

    # Off by conf; a script that fails before its first query: no plan, the standby goes on.
    spark.conf.set(SCRIPT_CONF, "false")
    try:
        assert plan_script(spark, ns) is None
    finally:
        spark.conf.unset(SCRIPT_CONF)
    # A script that stops its session on the way out (try/finally): the held start() unwinds through it, and
    # the standby's session must survive it.
    stopping = root / "stopping.py"
    stopping.write_text(TEAM_SCRIPT.replace("writer.start().awaitTermination()",
                                            "try:\n    writer.start().awaitTermination()\nfinally:\n    spark.stop()"))
    assert plan_script(spark, SimpleNamespace(**{**vars(ns), "script": str(stopping)})) is not None
    assert spark.range(3).count() == 3  # still alive
    assert "stop of its session was skipped while its query was planned" in caplog.text
    broken = root / "broken.py"
    broken.write_text("raise RuntimeError('the config service is down')\n")
    assert plan_script(spark, SimpleNamespace(**{**vars(ns), "script": str(broken)})) is None
    assert "the script failed before its first query (no replay): RuntimeError: the config service is down" in caplog.text
