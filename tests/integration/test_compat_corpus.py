"""The compatibility check against Spark itself, on real change pairs.

For each pair: run v1 on real data -> checkpoint; check v2 against a copy (must not modify it);
then restart v2 on another copy with new data and record what Spark does. The check's verdict must
agree with Spark in every case: Spark fails -> INCOMPATIBLE; Spark accepts -> not INCOMPATIBLE;
Spark silently ignores a change -> COMPATIBLE_WITH_WARNINGS naming the rule.
"""

from __future__ import annotations

import hashlib
import runpy
import shutil
import sys
from pathlib import Path

import pytest

from airflow_streaming.checkpoint.reader import read_checkpoint
from airflow_streaming.compat.check import check_compatibility
from airflow_streaming.compat.model import Severity, Verdict
from compat_corpus import CURRENT, PAIRS, RUNTIME_PAIRS, ChangePair, RuntimePair
from spark_jobs.event_generator import generate_events

pytestmark = pytest.mark.spark

SESSION_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    # A file sink compacts its log every 2 batches, so a moved sink fails at the oracle's 2nd batch.
    "spark.sql.streaming.fileSink.log.compactInterval": "2",
}


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("compat-corpus").config("spark.ui.enabled", "false")
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def reset_conf(spark) -> None:
    for key, value in SESSION_CONF.items():
        spark.conf.set(key, value)


def tree_hash(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def run_script(path: Path, args: list[str]) -> None:
    saved = sys.argv
    sys.argv = [str(path), *args]
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = saved


def feed(root: Path, run: str) -> None:
    for name in ("src", "src2"):
        generate_events(root / name, count=40, files=1, run=f"{run}{name}", devices=4)


@pytest.mark.parametrize("pair", PAIRS, ids=[p.name for p in PAIRS])
def test_verdict_agrees_with_spark(spark, tmp_path, pair: ChangePair):
    for version in ("v1", "v2"):
        (tmp_path / f"{version}.py").write_text(pair.script(version))
    src, src2, out = tmp_path / "src", tmp_path / "src2", tmp_path / "out"
    args = lambda ckpt: [str(src), str(src2), str(out), str(ckpt)]  # noqa: E731

    reset_conf(spark)
    feed(tmp_path, "one")
    run_script(tmp_path / "v1.py", args(tmp_path / "ckpt"))
    shutil.copytree(tmp_path / "ckpt", tmp_path / "ckpt_check")
    shutil.copytree(tmp_path / "ckpt", tmp_path / "ckpt_oracle")
    before = tree_hash(tmp_path / "ckpt_check")

    # The check: read-only, no query started.
    reset_conf(spark)
    report = check_compatibility(spark, str(tmp_path / "ckpt_check"), str(tmp_path / "v2.py"),
                                 args(tmp_path / "ckpt_check"))
    assert tree_hash(tmp_path / "ckpt_check") == before, "the check modified the checkpoint"
    assert not spark.streams.active

    # The oracle: Spark restarts v2 on the checkpoint with new data.
    reset_conf(spark)
    feed(tmp_path, "two")
    spark_error = None
    try:
        run_script(tmp_path / "v2.py", args(tmp_path / "ckpt_oracle"))
    except Exception as exc:  # noqa: BLE001 - whatever Spark raises is the oracle's answer
        spark_error = f"{type(exc).__name__}: {str(exc)[:300]}"
    reset_conf(spark)

    rules = {f.rule for f in report.findings if f.severity != Severity.INFO}
    detail = f"{pair.name}: verdict {report.verdict.value}, Spark error: {spark_error}\n{report.render_text()}"
    assert (spark_error is not None) == pair.spark_fails, detail
    assert report.dry_run is not None and report.dry_run.status in ("passed", "rejected"), detail
    if spark_error is not None:
        assert report.verdict == Verdict.INCOMPATIBLE, detail
    else:
        assert report.verdict != Verdict.INCOMPATIBLE, detail
    if pair.expected_rule:
        assert pair.expected_rule in rules, detail
        if spark_error is None:
            assert report.verdict == Verdict.COMPATIBLE_WITH_WARNINGS, detail
    if pair.silently_ignored_conf:
        # Spark accepted v2 but kept the checkpoint's value: the warning was right.
        oracle = read_checkpoint(str(tmp_path / "ckpt_oracle"))
        assert oracle.last_committed_batch == 1
        assert oracle.conf[pair.silently_ignored_conf] == SESSION_CONF[pair.silently_ignored_conf], detail
    if not rules:
        assert report.verdict == Verdict.COMPATIBLE, detail


# ------------------------------------------------------------------------------------ Spark runtime changes


def _line(name: str):
    from spark_runtimes import current_runtime, runtime

    return current_runtime() if name == CURRENT else runtime(name)


def _last_counts(out: Path) -> int:
    import json

    batches = sorted(out.glob("batch=*"), key=lambda p: int(p.name.split("=")[1]))
    return sum(json.loads(line)["n"] for f in batches[-1].glob("*.json") for line in f.read_text().splitlines() if line)


#: The runtime pairs (3.5 -> 4.x aggregation and join, a 4.x checkpoint read by 3.5) are the long tier's: the suite's
#: trial of the gate answering in another Spark line on a stateful checkpoint, Spark then resuming it, and a
#: downgrade refused is test_spark_runtime_upgrade.py's (through the lifecycle, on a stateful stream).
@pytest.mark.long(covered_by="tests/integration/test_spark_runtime_upgrade.py::"
                             "test_stateful_stream_moves_from_spark_35_to_4x_keeps_state_rolls_back_to_its_"
                             "old_runtime_and_refuses_a_downgrade")
@pytest.mark.parametrize("pair", RUNTIME_PAIRS, ids=[p.name for p in RUNTIME_PAIRS])
def test_verdict_agrees_with_spark_across_runtimes(tmp_path, pair: RuntimePair):
    """v1 on one Spark line, then the gate (with its dry run) and the oracle in v2's line: the gate's
    verdict agrees with what v2's Spark does, and when Spark refuses, the gate reports Spark's own error."""
    import json

    from spark_runtimes import run_gate

    v1_rt, v2_rt = _line(pair.v1_runtime), _line(pair.v2_runtime)
    script = tmp_path / "job.py"
    script.write_text(pair.script())
    src, src2, out = tmp_path / "src", tmp_path / "src2", tmp_path / "out"
    args = lambda ckpt: [str(src), str(src2), str(out), str(ckpt)]  # noqa: E731

    feed(tmp_path, "one")
    proc = v1_rt.run([str(script), *args(tmp_path / "ckpt")], log=tmp_path / "v1.log",
                     CORPUS_CONF=json.dumps(pair.v1_conf or {}))
    assert proc.returncode == 0, (tmp_path / "v1.log").read_text()[-3000:]
    shutil.copytree(tmp_path / "ckpt", tmp_path / "ckpt_check")
    shutil.copytree(tmp_path / "ckpt", tmp_path / "ckpt_oracle")
    before = tree_hash(tmp_path / "ckpt_check")

    answer = run_gate(v2_rt, tmp_path / "ckpt_check", script, args(tmp_path / "ckpt_check"), tmp_path / "gate.log")
    assert tree_hash(tmp_path / "ckpt_check") == before, "the check modified the checkpoint"

    feed(tmp_path, "two")
    oracle = v2_rt.run([str(script), *args(tmp_path / "ckpt_oracle")], log=tmp_path / "v2.log")
    oracle_text = oracle.stdout + oracle.stderr
    detail = (f"{pair.name} ({v1_rt.version} -> {v2_rt.version}): gate {json.dumps(answer, default=str)[:4000]}\n"
              f"oracle exit {oracle.returncode}: {oracle_text[-2500:]}")
    assert (oracle.returncode != 0) == pair.spark_fails, detail
    assert "verdict" in answer, detail
    if pair.spark_fails:
        assert pair.spark_error in oracle_text, detail
        assert answer["verdict"] == "INCOMPATIBLE" and answer["exit_code"] == 1, detail
        assert answer["dry_run"]["status"] == "rejected" and pair.spark_error in (
            answer["dry_run"]["error_class"] + answer["dry_run"]["message"]), detail
    else:
        assert answer["verdict"] != "INCOMPATIBLE", detail
        assert _last_counts(out) == 80, detail  # 40 + 40 events: v1's counts were kept in the state
