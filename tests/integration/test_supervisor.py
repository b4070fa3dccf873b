"""Supervision on real Spark: a SIGKILLed driver is restarted from its checkpoint (exactly once);
a deterministic failure is not retried and gives up once."""

from __future__ import annotations

import os
import signal
import time

import pytest

from airflow_streaming.supervision.policy import RestartPolicy
from airflow_streaming.lifecycle.supervisor import load_ledger, supervise
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from streams import wait_for
import stream_actions

pytestmark = pytest.mark.spark

POLICY = RestartPolicy(max_attempts=3, backoff_initial_s=1, backoff_max_s=5)


@pytest.mark.long(covered_by="tests/integration/test_kill_and_replay.py::test_stop_timeout_kills_then_restart_replays_the_batch_exactly_once")
def test_driver_killed_mid_batch_is_restarted_from_its_checkpoint_exactly_once(streams):
    inp, out = streams.path("input", "sup"), streams.path("output", "sup")
    spec = streams.spec("sup", "events_etl", ["--input", inp, "--output", out, "--quarantine",
                                               streams.path("quarantine", "sup"), "--max-files-per-trigger", "1"])
    hook = streams.hook(spec)
    fed = generate_events(inp, count=4000, files=20, run="sup")
    # Deployed as "v2" (say, by an upgrade) while the supervisor is still given the original spec.
    assert spec.version != "v2"
    record = stream_actions.submit(streams.hook(spec.with_version("v2")))
    hook.wait_until_ready(record)
    # Kill -9 while a batch is in flight.
    wait_for(lambda: (d := hook.status()) and d.queries and d.queries[0].status.get("isTriggerActive"), 60,
             "a batch in flight")
    os.killpg(record.submit_pid, signal.SIGKILL)
    wait_for(lambda: hook.health().state.value == "FAILED", 30, "FAILED verdict")

    events: list[dict] = []
    first = supervise(hook, POLICY, events.append, max_wait_s=10)
    assert first.action == "RESTARTED" and first.new_run_id != record.run_id, first
    assert [e["kind"] for e in events] == ["RESTARTING"] and events[0]["attempt"] == 1
    # A second pass (a retried or duplicated supervisor task) does not restart again.
    again = supervise(hook, POLICY, events.append)
    assert again.action != "RESTARTED"
    assert hook.driver_record().run_id == first.new_run_id
    assert hook.driver_record().version == "v2"  # the supervisor restarted what is deployed

    new_record = hook.driver_record()
    hook.wait_until_ready(new_record)
    wait_for(lambda: set(read_etl_output(out).event_ids) >= set(fed.event_ids), 180, "all input processed")
    # Catching up on the backlog can be FALLING_BEHIND for a while (batches longer than the trigger on a
    # loaded machine): the supervisor says so (UNHEALTHY) and reports RECOVERED once the stream is healthy.
    recovered = wait_for(lambda: (r := supervise(hook, POLICY, events.append)).action == "RECOVERED" and r, 120,
                         "a supervisor pass reporting RECOVERED", interval=2)
    assert recovered.action == "RECOVERED" and events[-1]["kind"] == "RECOVERED"
    assert {e["kind"] for e in events[1:-1]} <= {"UNHEALTHY"}, [e["kind"] for e in events]
    assert stream_actions.stop(hook).graceful
    output = read_etl_output(out)
    assert output.duplicates == {} and output.rows == fed.valid  # nothing lost, nothing duplicated
    assert load_ledger(hook).failures and record.run_id in load_ledger(hook).handled_run_ids


def test_driver_killed_while_starting_is_restarted_within_two_passes_exactly_once(streams):
    """kill -9 about a second after the submission, before the run wrote its first status document: the
    stream used to stay down for good (health UNKNOWN "no status document and no driver", every pass
    NOTHING, no notification). Now it is FAILED, and a pass restarts it from the checkpoint."""
    inp, out = streams.path("input", "start"), streams.path("output", "start")
    spec = streams.spec("start", "events_etl", ["--input", inp, "--output", out, "--quarantine",
                                                 streams.path("quarantine", "start"), "--max-files-per-trigger", "2"])
    hook = streams.hook(spec)
    fed = generate_events(inp, count=600, files=6, run="start")
    record = stream_actions.submit(hook)
    time.sleep(1.0)
    os.killpg(record.submit_pid, signal.SIGKILL)  # the JVM is still starting: no status yet
    assert hook.status() is None, "the kill landed after the first status: not the phase under test"
    wait_for(lambda: not hook.processes_of_run(record.run_id), 30, "the killed driver's processes to exit")
    verdict = hook.health()
    assert verdict.state.value == "FAILED" and verdict.reasons[0].code == "DRIVER_GONE_AT_START", verdict.summary()

    events: list[dict] = []
    passes = []
    for _ in range(2):
        passes.append(supervise(hook, POLICY, events.append, max_wait_s=10))
        if passes[-1].action == "RESTARTED":
            break
    assert passes[-1].action == "RESTARTED" and passes[-1].new_run_id != record.run_id, passes
    assert "before it reported any status" in passes[-1].reason
    assert [e["kind"] for e in events if e["kind"] != "FAILED"] == ["RESTARTING"], events
    new_record = hook.driver_record()
    hook.wait_until_ready(new_record)
    wait_for(lambda: set(read_etl_output(out).event_ids) >= set(fed.event_ids), 180, "all input processed")
    assert stream_actions.stop(hook).graceful
    output = read_etl_output(out)
    assert output.duplicates == {} and output.rows == fed.valid  # nothing lost, nothing duplicated


AGG = '''
import sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.getOrCreate()
src, ckpt = sys.argv[1:3]
events = spark.readStream.schema("event_id STRING, device_id STRING, signal DOUBLE").json(src)
agg = events.groupBy("device_id").agg({aggs})
agg.writeStream.outputMode("update").format("noop").option("checkpointLocation", ckpt) \\
    .trigger(processingTime="1 second").start().awaitTermination()
'''


def test_deterministic_failure_is_not_retried_and_gives_up_once(streams, tmp_path):
    src, ckpt = streams.path("in"), streams.path("agg-ckpt")
    v1, v2 = tmp_path / "v1.py", tmp_path / "v2.py"
    v1.write_text(AGG.format(aggs='F.count("*").alias("n")'))
    v2.write_text(AGG.format(aggs='F.count("*").alias("n"), F.sum("signal").alias("s")'))
    generate_events(src, count=50, run="one")
    hook1 = streams.hook(streams.spec("agg", str(v1), [src, ckpt]))
    record = stream_actions.submit(hook1)
    hook1.wait_until_ready(record)
    wait_for(lambda: (hook1.status().totals["batches"] >= 1), 60, "v1 batch")
    assert stream_actions.stop(hook1).graceful

    generate_events(src, count=50, run="two")
    hook = streams.hook(streams.spec("agg", str(v2), [src, ckpt]))  # an incompatible redeploy
    bad = stream_actions.submit(hook)
    wait_for(lambda: hook.health().state.value == "FAILED", 120, "the incompatible version to fail")
    events: list[dict] = []
    passes = [supervise(hook, POLICY, events.append) for _ in range(2)]
    gave_up = [e for e in events if e["kind"] == "GAVE_UP"]
    assert len(gave_up) == 1 and not [e for e in events if e["kind"] == "RESTARTING"], (passes, events)
    assert gave_up[0]["error_class"] == "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"
    assert any("not retried" in r for r in gave_up[0]["health_reasons"])
    assert hook.driver_record().run_id == bad.run_id  # nothing was resubmitted


SUPERVISOR_DAG = """
from datetime import datetime
from airflow.sdk import DAG
from airflow_streaming.notifications import StreamHttpNotifier
from airflow_streaming.operators.supervise import SparkStreamSupervisorOperator

with DAG("supervise_test", schedule=None, start_date=datetime(2026, 1, 1)):
    SparkStreamSupervisorOperator(task_id="supervise", specs=[{spec!r}],
                                  notifiers=[StreamHttpNotifier(url="{url}", payload_format="slack")])
"""


@pytest.mark.long(covered_by="tests/integration/test_notifiers.py::"
                           "test_notifier_as_on_failure_callback_in_a_dag_run")
@pytest.mark.airflow
def test_supervisor_dag_notifies_a_real_webhook_once_per_state_change(streams, tmp_path, airflow_db):
    """A driver that crashes at start (deterministic), supervised by the DAG run twice: exactly one
    GAVE_UP message reaches a real HTTP server, and nothing is resubmitted."""
    import http.server
    import json
    import subprocess
    import sys
    import threading

    received: list[dict] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        app = tmp_path / "crash.py"
        app.write_text("from pyspark.sql import SparkSession\nSparkSession.builder.getOrCreate()\n"
                       "raise ModuleNotFoundError(\"No module named 'orders_schema'\")\n")
        spec = streams.spec("crashloop", str(app), [])
        hook = streams.hook(spec)
        record = stream_actions.submit(hook)
        wait_for(lambda: hook.health().state.value == "FAILED", 120, "the crash at start")
        dags = tmp_path / "dags"
        dags.mkdir()
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        (dags / "supervise_test.py").write_text(SUPERVISOR_DAG.format(spec=spec.to_dict(), url=url))
        env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
        for _ in range(2):
            run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "supervise_test"], env=env,
                                 capture_output=True, text=True, timeout=600)
            assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
        texts = [m["text"] for m in received]
        assert len(texts) == 1, texts  # one state change, one message, whatever the number of passes
        assert "GAVE_UP" in texts[0] or "gave up" in texts[0].lower()
        assert "crashloop" in texts[0] and "orders_schema" in texts[0]
        assert hook.driver_record().run_id == record.run_id  # a deterministic failure is not restarted
    finally:
        server.shutdown()


FLAKY = '''
import os, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
src, ckpt, flag = sys.argv[1:4]

def sink(batch, batch_id):
    if os.path.exists(flag):
        raise ConnectionResetError(f"sink connection reset (batch {batch_id})")
    batch.count()

(spark.readStream.format("text").load(src).writeStream.foreachBatch(sink).option("checkpointLocation", ckpt)
 .trigger(processingTime="1 second").start().awaitTermination())
'''


@pytest.mark.long(covered_by="tests/integration/test_supervisor.py::"
                           "test_deterministic_failure_is_not_retried_and_gives_up_once")
def test_attempts_exhausted_give_up_and_a_healthy_period_resets_the_counter(streams, tmp_path):
    app, flag, src = tmp_path / "flaky.py", tmp_path / "sink-down", streams.path("in")
    app.write_text(FLAKY)
    policy = RestartPolicy(max_attempts=1, backoff_initial_s=0, reset_after_healthy_s=5)
    hook = streams.hook(streams.spec("flaky", str(app), [src, streams.path("ckpt"), str(flag)]))
    events: list[dict] = []

    def fail_current_run(n: int) -> None:
        flag.write_text("down")
        generate_events(src, count=10, run=f"f{n}")
        wait_for(lambda: hook.health().state.value == "FAILED", 120, f"failure {n}")

    generate_events(src, count=10, run="ok0")
    first = stream_actions.submit(hook)
    hook.wait_until_ready(first)
    fail_current_run(1)
    flag.unlink()  # the sink is back before the restart replays the failed batch
    assert supervise(hook, policy, events.append).action == "RESTARTED"  # attempt 1 of 1

    # Healthy for longer than reset_after_healthy_s: the counter starts over.
    hook.wait_until_ready(hook.driver_record())
    assert supervise(hook, policy, events.append).action == "RECOVERED"
    time.sleep(6)
    supervise(hook, policy, events.append)
    assert load_ledger(hook).failures == []

    fail_current_run(2)
    flag.unlink()
    again = supervise(hook, policy, events.append)
    assert again.action == "RESTARTED", again  # attempt 1 again, not "exhausted"
    hook.wait_until_ready(hook.driver_record())
    fail_current_run(3)  # the restarted driver fails again: 1 restart already used within the interval
    final = supervise(hook, policy, events.append)
    assert final.action == "GAVE_UP" and "1 restarts within" in final.reason, final
    assert [e["kind"] for e in events] == ["RESTARTING", "RECOVERED", "RESTARTING", "GAVE_UP"]
    assert all(e["error_class"] for e in events if e["kind"] != "RECOVERED")


ISOLATION_DAG = """
from datetime import datetime
from airflow.sdk import DAG
from airflow_streaming.operators.supervise import SparkStreamSupervisorOperator

with DAG("supervise_isolation", schedule=None, start_date=datetime(2026, 1, 1)):
    SparkStreamSupervisorOperator(task_id="supervise", specs={specs!r})
"""


@pytest.mark.airflow
def test_one_bad_stream_does_not_blind_the_supervisor(tmp_path, airflow_db):
    """Three streams: a spec file that does not exist, one whose restart ledger is corrupt, one fine.
    Under `airflow dags test`: the fine one is supervised, the two others are reported by name, the task
    fails at the end, and the corrupt ledger is left as it was."""
    import json
    import subprocess
    import sys

    from control_fixtures import deployed_stream

    bad_root, good_root = tmp_path / "bad", tmp_path / "good"
    bad_spec, bad_hook = deployed_stream(bad_root)
    good_spec, good_hook = deployed_stream(good_root)
    for hook in (bad_hook, good_hook):
        record = {"run_id": "20260101T000000Z-0000aaaa", "stream": "s1", "version": "v1",
                  "application": "device_signals", "host": "elsewhere", "command": "c", "log_path": "l",
                  "submitted_at": 1.0, "checkpoint_location": "/x", "target": "local", "handle": {}}
        hook.storage.unguarded.write_atomic(hook.paths.driver, json.dumps(record).encode())
    ledger = f"{bad_hook.paths.root}/supervisor.json"
    bad_hook.storage.unguarded.write_atomic(ledger, b"{not json")
    specs = [str(tmp_path / "missing-spec.yaml"), bad_spec.to_dict(), good_spec.to_dict()]
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "supervise_isolation.py").write_text(ISOLATION_DAG.format(specs=specs))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "supervise_isolation"], env=env,
                         capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-3000:]
    assert "2 of 3 stream(s) could not be supervised (the others were)" in output, output[-3000:]
    assert "missing-spec.yaml' does not exist" in output and f"{ledger} is unreadable" in output
    assert "stream s1: STOPPED -> NOTHING" in output  # the good stream was supervised
    assert bad_hook.storage.read_bytes(ledger) == b"{not json"
