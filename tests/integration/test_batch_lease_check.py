"""Issue 35 on real Spark: a driver checks that it still holds the lease before a foreachBatch batch writes.

A running events_etl stream (its sink is foreachBatch) has written what it was fed; lease.json is then forged
to name another run; new input arrives. The next batch writes nothing (the check runs before the job's
function), the run ends FAILED with the lease message - long before the reporter's next renewal (the
heartbeat, hence the renewal, is 60 s here) would have noticed. Deployed again through the product, the
stream resumes from its checkpoint: the sink is exactly what was fed, nothing lost, nothing duplicated."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from airflow_streaming.control import contract
from airflow_streaming.control.process import process_start_time
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from streams import wait_for
import stream_actions

pytestmark = pytest.mark.spark


def test_a_driver_whose_lease_was_forged_writes_no_further_batch(streams):
    inp, out = streams.path("input", "leased"), streams.path("output", "leased")
    spec = streams.spec("leased", "events_etl", ["--input", inp, "--output", out, "--quarantine",
                                                 streams.path("quarantine", "leased"), "--max-files-per-trigger", "2"],
                        heartbeat_interval=60)
    hook = streams.hook(spec)
    first = generate_events(inp, count=400, files=4, run="before")
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    wait_for(lambda: set(read_etl_output(out).event_ids) >= set(first.event_ids), 90, "the first input written",
             interval=0.2)
    lease = contract.read_lease(hook.storage, hook.paths)
    assert lease.run_id == record.run_id
    # The reporter renews every 60 s: the forgery below is caught by the per-batch check, not by a renewal.
    assert time.time() - lease.renewed_at < 45, "too close to the driver's next lease renewal for this test"
    written = read_etl_output(out)

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_start = process_start_time(dead.pid)
    dead.wait()
    forged = contract.Lease("forged-run", dead.pid, dead_start, socket.gethostname(), time.time(), time.time(), 120)
    hook.storage.unguarded.write_atomic(hook.paths.lease, forged.to_json())
    forged_at = time.time()
    second = generate_events(inp, count=300, files=3, run="after", file_start_index=4)

    status = wait_for(lambda: (d := hook.status()) and d.state == contract.FAILED and d, 40,
                      "the run to fail on its lost lease", interval=0.2)
    message = (status.last_exception or {}).get("message", "")
    assert "LEASE_LOST: refusing to write batch" in message and "forged-run" in message, status.last_exception
    assert time.time() - forged_at < 30  # well before the next renewal (60 s)
    wait_for(lambda: not hook.processes_of_run(record.run_id), 30, "the failed run's processes to exit")
    after = read_etl_output(out)
    assert after.event_ids == written.event_ids, "a batch was written after the lease was forged"
    assert after.rows_per_batch == written.rows_per_batch

    restarted = stream_actions.submit(hook)  # deploy again: the forged holder is dead, its lease stale
    hook.wait_until_ready(restarted)
    assert contract.read_lease(hook.storage, hook.paths).run_id == restarted.run_id
    fed = set(first.event_ids) | set(second.event_ids)
    wait_for(lambda: set(read_etl_output(out).event_ids) >= fed, 90, "all input written after the restart",
             interval=0.2)
    assert stream_actions.stop(hook).graceful
    output = read_etl_output(out)
    assert output.duplicates == {} and output.rows == first.valid + second.valid  # nothing lost or duplicated
    assert set(output.event_ids) == fed
