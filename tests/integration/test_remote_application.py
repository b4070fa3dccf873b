"""``application`` given as a URI, on real Spark: the script and its ``py_files`` helper are fetched by Spark.

A real HTTP server (``http.server`` in a thread on 127.0.0.1) is the stand-in for ``hdfs://`` / ``s3a://``:
Spark fetches an ``http(s)://`` entry of ``spark.files`` / ``--py-files`` through the same fetch path
(``Utils.fetchFile`` when the driver's SparkContext starts) as a Hadoop filesystem URI. The stream's script
is ``http://127.0.0.1:PORT/job.py``, a small stateful job with its own trigger that imports ``helper`` from
``py_files`` (``http://127.0.0.1:PORT/helper.py``); it is deployed by the lifecycle, makes progress, is
upgraded warm through the compatibility gate to v2 given as ``local:/abs/path/job_v2.py``, and stops gracefully:
the sink holds exactly what was fed. A deploy of a URI the server answers with 404 fails naming the URI.
"""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import pytest

from airflow_streaming.lifecycle.record import Action, Probation, Step
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import committed_sink_files
from streams import wait_for
import stream_actions

pytestmark = [pytest.mark.spark]

JOB = '''"""A team's job, fetched by Spark: dedup by id with a watermark, tagged by a helper from py_files."""
import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import helper  # shipped with py_files (fetched over HTTP too)

parser = argparse.ArgumentParser()
parser.add_argument("--input", required=True)
parser.add_argument("--output", required=True)
parser.add_argument("--checkpoint", required=True)
args = parser.parse_args()

spark = SparkSession.builder.getOrCreate()
events = (spark.readStream.schema("event_id string, device_id string, event_type string, ts string, signal double")
          .json(args.input).withColumn("event_time", F.to_timestamp("ts")))
unique = events.withWatermark("event_time", "10 minutes").dropDuplicates(["event_id", "event_time"])
(helper.tagged(unique).writeStream.queryName("remote_dedup").format("parquet")
 .option("path", args.output).option("checkpointLocation", args.checkpoint)
 .trigger(processingTime="2 seconds").start().awaitTermination())
'''

HELPER = '''from pyspark.sql import functions as F


def tagged(df):
    return df.withColumn("via", F.lit("helper"))
'''


class Served:
    """A directory served over HTTP on 127.0.0.1 (a thread); remembers every path asked for."""

    def __init__(self, root: Path):
        self.requests: list[tuple[str, int]] = []
        served = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_request(self, code: object = "-", size: object = "-") -> None:
                served.requests.append((self.path, int(code) if str(code).isdigit() else 0))

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def test_a_script_fetched_over_http_runs_upgrades_to_a_local_uri_and_stops_exactly_once(streams, tmp_path):
    import pyarrow.dataset as ds

    remote = tmp_path / "artifact-store"  # only reachable over HTTP: no spec names this directory
    remote.mkdir()
    (remote / "job.py").write_text(JOB)
    (remote / "helper.py").write_text(HELPER)
    on_host = tmp_path / "driver-host"
    on_host.mkdir()
    (on_host / "job_v2.py").write_text(JOB.replace("args = parser.parse_args()\n",
                                                   "args = parser.parse_args()\nprint('job v2 on the driver host')\n"))
    inp, out, ckpt = streams.path("in"), streams.path("out"), streams.path("ckpt")
    args = ["--input", inp, "--output", out, "--checkpoint", ckpt]
    fed: list[str] = []

    def feed(run: str, index: int) -> None:
        fed.extend(generate_events(inp, count=20, files=1, run=run, file_start_index=index).event_ids)

    def sink_ids() -> list[str]:
        files = committed_sink_files(out)
        return ds.dataset(files, format="parquet").to_table(columns=["event_id"]).column("event_id").to_pylist() \
            if files else []

    with Served(remote) as server:
        # A URI the server answers with 404: the deploy fails, and says which URI.
        missing = f"{server.url}/missing.py"
        gone = streams.spec("gone", missing, args, py_files=[f"{server.url}/helper.py"])
        gone_hook = streams.hook(gone)
        failed = LifecycleRunner(gone, Action.DEPLOY).run()
        assert failed.step != Step.SUCCEEDED
        log = Path(gone_hook.driver_log_path(failed.new_run_id)).read_text(errors="replace")
        assert missing in (failed.error or "") + log, (failed.error, log[-3000:])
        assert ("/missing.py", 404) in server.requests

        v1 = streams.spec("remote", f"{server.url}/job.py", args, py_files=[f"{server.url}/helper.py"],
                          version="v1")
        hook = streams.hook(v1)
        feed("a", 0)
        deployed = LifecycleRunner(v1, Action.DEPLOY).run()
        assert deployed.step == Step.SUCCEEDED, deployed.error
        assert ("/job.py", 200) in server.requests and ("/helper.py", 200) in server.requests
        wait_for(lambda: set(sink_ids()) >= set(fed), 90, "v1's first events in the sink")
        assert hook.status().queries[0].name == "remote_dedup"

        # Upgraded through the compatibility gate to v2, a file already on the driver's host (local:).
        feed("b", 1)
        v2 = v1.with_version("v2", application=f"local:{on_host / 'job_v2.py'}")
        # Warm: v2's driver is prepared beside v1 (the standby runs the gate and plans the script ahead).
        options = LifecycleOptions(probation=Probation(min_batches=1, window_s=60), poll_s=0.5, warm_start=True)
        result: list = []
        asked = len(server.requests)
        upgrade = threading.Thread(target=lambda: result.append(LifecycleRunner(v2, Action.UPGRADE, options).run()))
        upgrade.start()
        try:  # v2's probation needs a batch: input arrives once it runs
            wait_for(lambda: (hook.lifecycle_record() or {}).get("step") == "PROBATION" or not upgrade.is_alive(),
                     120, "v2 in probation")
            feed("c", 2)
        finally:
            upgrade.join(180)
        assert result and result[0].step == Step.SUCCEEDED, result and result[0].error
        hook = streams.hook(v2)
        assert hook.status().version == "v2"
        v2_log = Path(hook.driver_log_path(result[0].new_run_id)).read_text(errors="replace")
        assert "job v2 on the driver host" in v2_log, v2_log[-3000:]
        assert "planned the script's first query" in v2_log, v2_log[-3000:]
        assert "/job.py" not in [path for path, _ in server.requests[asked:]]  # v2's gate and driver: local:
        feed("d", 3)
        wait_for(lambda: set(sink_ids()) >= set(fed), 90, "every event in the sink")
        assert stream_actions.stop(hook).graceful

    ids = sink_ids()
    assert len(ids) == len(set(ids)) and set(ids) == set(fed)  # nothing lost, nothing duplicated
    via = ds.dataset(committed_sink_files(out), format="parquet").to_table(columns=["via"]).column("via")
    assert set(via.to_pylist()) == {"helper"}  # the helper fetched from py_files ran
