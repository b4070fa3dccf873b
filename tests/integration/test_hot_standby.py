"""The hot standby on real Spark (StreamSpec.hot_standby): the supervisor prepares it beside a healthy
stream; a driver SIGKILLed mid-batch is taken over by it without any supervisor pass (a query start in
its running JVM, not a cold start); the supervisor records the takeover, notifies FAILED_OVER and
prepares the next standby; a stop ends the standby too. Never two drivers on the checkpoint; the sink
is exactly what was fed."""

from __future__ import annotations

import os
import signal
import time

import pytest

from airflow_streaming.control import contract
from airflow_streaming.lifecycle.stored import read_history
from airflow_streaming.supervision.policy import RestartPolicy
from airflow_streaming.lifecycle.supervisor import supervise
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from streams import wait_for
import stream_actions

pytestmark = pytest.mark.spark

POLICY = RestartPolicy(max_attempts=3, backoff_initial_s=1, backoff_max_s=5)


def prepared(hook, events):
    """Supervisor passes until one prepares the hot standby (the stream must be healthy first); none of
    them records a takeover."""
    passes = []

    def one_pass():
        passes.append(supervise(hook, POLICY, events.append))
        return passes[-1].action == "STANDBY_PREPARED" and passes[-1]

    result = wait_for(one_pass, 180, "a supervisor pass preparing the hot standby", interval=1)
    assert [p.action for p in passes if p.action == "FAILED_OVER"] == []
    wait_for(lambda: (hook.hot_standby_state() or {}).get("state") == "READY", 180, "the hot standby READY")
    return result.new_run_id


@pytest.mark.long(covered_by="bench/cross_host_bench.py --smoke")
def test_a_driver_killed_mid_batch_is_taken_over_by_its_hot_standby_exactly_once(streams):
    inp, out = streams.path("input", "hot"), streams.path("output", "hot")
    spec = streams.spec("hot", "events_etl", ["--input", inp, "--output", out, "--quarantine",
                                               streams.path("quarantine", "hot"), "--max-files-per-trigger", "1"],
                        hot_standby=True)
    hook = streams.hook(spec)
    fed = generate_events(inp, count=3000, files=30, run="hot")
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    events: list[dict] = []
    standby = prepared(hook, events)
    assert supervise(hook, POLICY, events.append).action != "STANDBY_PREPARED"  # one standby, never two
    # Prepared, it touched nothing: the status, the lease and the marker are the active run's.
    assert hook.status().run_id == record.run_id
    assert contract.read_lease(hook.storage, hook.paths).run_id == record.run_id
    assert contract.read_marker(hook.storage, hook.paths)["run_id"] == record.run_id

    wait_for(lambda: (d := hook.status()) and d.queries and d.queries[0].status.get("isTriggerActive"), 60,
             "a batch in flight", interval=0.05)
    killed = time.monotonic()
    os.killpg(record.submit_pid, signal.SIGKILL)
    # No supervisor pass: the standby takes the stream over by itself.
    wait_for(lambda: hook.driver_record().run_id == standby, 60, "the hot standby's takeover", interval=0.05)
    wait_for(lambda: (d := hook.status()) and d.run_id == standby and d.totals["batches"] >= 1, 60,
             "the standby's first committed batch", interval=0.05)
    print(f"crash -> first batch committed by the hot standby: {time.monotonic() - killed:.2f} s")
    assert contract.read_lease(hook.storage, hook.paths).run_id == standby
    marker = contract.read_marker(hook.storage, hook.paths)
    assert marker["run_id"] == standby and marker["took_over_from"] == record.run_id
    wait_for(lambda: not hook.processes_of_run(record.run_id), 30, "the killed run's processes to exit")

    # The supervisor records the takeover once, then prepares the next standby once healthy.
    recorded = supervise(hook, POLICY, events.append)
    assert recorded.action == "FAILED_OVER" and events[-1]["kind"] == "FAILED_OVER", recorded
    entry = read_history(hook)[-1]
    assert (entry["action"], entry["old_run_id"], entry["new_run_id"]) == ("failover", record.run_id, standby)
    second = prepared(hook, events)  # and never records the same takeover twice
    assert second not in (standby, record.run_id)

    wait_for(lambda: set(read_etl_output(out).event_ids) >= set(fed.event_ids), 180, "all input processed")
    assert stream_actions.stop(hook).graceful
    wait_for(lambda: not hook.processes_of_run(second), 30, "the hot standby to exit after the stop")
    assert hook.hot_standby_state()["state"] == "EXPIRED"
    output = read_etl_output(out)
    assert output.duplicates == {} and output.rows == fed.valid  # nothing lost, nothing duplicated


def test_a_forged_stale_lease_never_lets_the_hot_standby_run_beside_the_live_driver(streams):
    """Issue 35: a stale lease.json naming the live run (a dead pid, renewed long ago) made the standby take the
    lease while the active driver ran on. Now the standby sees the run's processes alive on its host and waits;
    the active driver's next renewal finds bytes it did not write and stops; only then does the standby take
    over. At no moment is the standby the recorded driver while a process of the active run lives, and the
    sink is exactly what was fed."""
    import socket
    import subprocess
    import sys

    from airflow_streaming.control.process import process_start_time

    inp, out = streams.path("input", "forged"), streams.path("output", "forged")
    spec = streams.spec("forged", "events_etl", ["--input", inp, "--output", out, "--quarantine",
                                                 streams.path("quarantine", "forged"), "--max-files-per-trigger", "1"],
                        hot_standby=True)
    hook = streams.hook(spec)
    fed = generate_events(inp, count=2000, files=20, run="forged")
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    events: list[dict] = []
    standby = prepared(hook, events)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_start = process_start_time(dead.pid)
    dead.wait()
    old = time.time() - 3600
    hook.storage.unguarded.write_atomic(hook.paths.lease, contract.Lease(
        record.run_id, dead.pid, dead_start, socket.gethostname(), old, old, 120).to_json())
    both = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        now_recorded = hook.driver_record().run_id
        active_alive = bool(hook.processes_of_run(record.run_id))
        if now_recorded == standby and active_alive:
            both.append(time.monotonic())
        if now_recorded == standby and not active_alive:
            break
        time.sleep(0.05)
    assert both == [], "the standby took over while the active driver's processes lived"
    assert hook.driver_record().run_id == standby, "the active driver did not stop at its lease renewal"
    wait_for(lambda: set(read_etl_output(out).event_ids) >= set(fed.event_ids), 180, "all input processed")
    assert stream_actions.stop(hook).graceful
    output = read_etl_output(out)
    assert output.duplicates == {} and output.rows == fed.valid  # nothing lost, nothing duplicated
