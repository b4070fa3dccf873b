"""A user script outside the repository ships its own helper module (``py_files``) and data file (``files``)
through the product's deploy, as a SparkSubmitOperator user would: both reach the real driver."""

from __future__ import annotations

import zipfile

import pytest

from airflow_streaming.lifecycle.operations import deploy_stream, stop_stream
from spark_jobs.outputs import committed_sink_files
from streams import totals, wait_for

pytestmark = pytest.mark.spark

HELPER = '''
from pyspark.sql import functions as F


def tagged(column, tag):
    """The helper the job imports: shipped in a zip with py_files, found on no other path."""
    return F.concat(F.lit(tag + ":"), column)
'''

USER_SCRIPT = '''
import sys

from pyspark import SparkFiles
from pyspark.sql import SparkSession

import dep_helper  # shipped with py_files

spark = SparkSession.builder.appName("job-with-dependencies").getOrCreate()
with open(SparkFiles.get("tag.txt"), encoding="utf-8") as fh:  # shipped with files
    tag = fh.read().strip()
source, sink, checkpoint = sys.argv[1:4]
lines = spark.readStream.format("text").load(source)
query = (lines.select(dep_helper.tagged(lines.value, tag).alias("value")).writeStream.format("parquet")
         .option("path", sink).option("checkpointLocation", checkpoint)
         .trigger(processingTime="1 second").start())
query.awaitTermination()
'''


def test_a_script_imports_its_py_files_helper_and_reads_its_shipped_file(streams, tmp_path):
    import pyarrow.dataset as ds

    job, deps = tmp_path / "job", tmp_path / "deps"  # nowhere near the repository, nor each other
    job.mkdir()
    deps.mkdir()
    script = job / "main.py"
    script.write_text(USER_SCRIPT)
    with zipfile.ZipFile(deps / "helpers.zip", "w") as zf:
        zf.writestr("dep_helper.py", HELPER)
    (deps / "tag.txt").write_text("shipped-v1\n")

    source, sink, ckpt = streams.path("in"), streams.path("out"), streams.path("deps-ckpt")
    sent = [f"event-{i:04d}" for i in range(200)]
    import os

    os.makedirs(source)
    for part in range(2):
        (tmp_path / f"part-{part}.txt").write_text("\n".join(sent[part::2]) + "\n")
        os.replace(tmp_path / f"part-{part}.txt", f"{source}/part-{part}.txt")

    spec = streams.spec("withdeps", str(script), [source, sink, ckpt],
                        py_files=str(deps / "helpers.zip"), files=[str(deps / "tag.txt")])
    hook = streams.hook(spec)
    deployed = deploy_stream(spec)  # the product's deploy: lock, record, history, first progress
    run_id = deployed["run_id"]
    assert deployed["state"] == "RUNNING"
    stored = hook.deployed()["spec"]
    assert stored["py_files"] == [str(deps / "helpers.zip")] and stored["files"] == [str(deps / "tag.txt")]
    wait_for(lambda: (totals(hook, run_id) or {}).get("input_rows", 0) >= len(sent), 60, "the job's progress")

    report = stop_stream(spec)
    assert report["graceful"], report

    # The compatibility check of a v2 plans the candidate with its own py_files and files (its local session
    # gets them when it starts): the script's import of its helper is checked, not refused as an import error.
    from airflow_streaming.compat.run import run_check

    import dataclasses

    checked = run_check(dataclasses.replace(spec, version="v2", checkpoint_location=ckpt), allow_warnings=False)
    assert checked["verdict"] == "COMPATIBLE", checked
    rows = ds.dataset(committed_sink_files(sink), format="parquet").to_table().column("value").to_pylist()
    assert sorted(rows) == sorted(f"shipped-v1:{value}" for value in sent)  # each input once, tagged by the helper
