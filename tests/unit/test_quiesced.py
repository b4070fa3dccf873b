"""A warm upgrade promotes its prepared driver once the old run has *quiesced* - stopped gracefully and
given its lease back - not once its JVM has exited too. Both halves, without a JVM:

- the deployer's judgement (``SparkStreamHook.quiesced``) over every combination of the run's status,
  exit code and lease: quiesced only when the run can commit nothing more;
- the driver's order (``Driver._finish_cleanup``): the lease goes back before the session's shutdown only
  when no query is active, and never before the final status is written.
"""

from __future__ import annotations

import itertools
import os
import socket
import time

from airflow_streaming.control import contract
from control_fixtures import RUN_ID, deployed_stream

OTHER = "20260101T000009Z-0000cccc"


def _lease(run_id: str) -> contract.Lease:
    now = time.time()
    return contract.Lease(run_id, os.getpid(), None, socket.gethostname(), now, now, 60.0)


def test_quiesced_only_when_the_run_stopped_gracefully_and_gave_its_lease_back(tmp_path):
    _, hook = deployed_stream(tmp_path, with_checkpoint=False)
    states = (contract.STARTING, contract.RUNNING, contract.STOPPING, contract.STOPPED, contract.FAILED)
    exits = (None, {"code": contract.EXIT_GRACEFUL, "reason": "graceful stop"}, {"code": 3, "reason": "failed"})
    leases = (None, RUN_ID, OTHER, "garbage")
    seen = set()
    for state, exit_, holder, status_run in itertools.product(states, exits, leases, (RUN_ID, OTHER)):
        contract.write_status(hook.storage.unguarded, hook.paths, contract.StatusDocument(
            stream="s1", version="v1", run_id=status_run, state=state, pid=1, host="h", started_at=1.0,
            heartbeat_at=2.0, exit=exit_))
        if holder is None:
            hook.storage.unguarded.delete(hook.paths.lease)
        elif holder == "garbage":
            hook.storage.unguarded.write_atomic(hook.paths.lease, b"{not json")
        else:
            hook.storage.unguarded.write_atomic(hook.paths.lease, _lease(holder).to_json())
        expected = (status_run == RUN_ID and state == contract.STOPPED and exit_ is not None
                    and exit_["code"] == contract.EXIT_GRACEFUL and holder in (None, OTHER))
        assert hook.quiesced(RUN_ID) is expected, (state, exit_, holder, status_run)
        seen.add(expected)
    assert seen == {True, False}
    hook.storage.unguarded.write_atomic(hook.paths.status, b"\x00garbage")
    hook.storage.unguarded.delete(hook.paths.lease)
    assert hook.quiesced(RUN_ID) is False  # an unreadable status: wait for the process instead


class _Streams:
    def __init__(self, active):
        self.active = active


class _Spark:
    """A session whose stop() notes whether the lease was still there at that moment."""

    def __init__(self, storage, paths, active):
        self.storage, self.paths, self.streams = storage, paths, _Streams(active)
        self.lease_at_stop: bytes | None = None

    def stop(self):
        self.lease_at_stop = self.storage.read_bytes(self.paths.lease)


class _Reporter:
    def __init__(self, storage, paths, lease, order):
        self.storage, self.paths, self.lease, self.order = storage, paths, lease, order

    def close(self):
        self.order.append("close")

    def write(self):
        self.order.append(("status written", self.storage.read_bytes(self.paths.lease) is not None))


def _driver(hook, active):
    from spark_jobs.runtime.launcher import Driver, parse_args

    ns = parse_args(["--stream", "s1", "--version", "v1", "--run-id", RUN_ID, "--control-dir", hook.paths.root,
                     "--checkpoint", str(hook.spec.checkpoint_location), "--job", "device_signals"])
    driver = Driver(ns)
    lease = contract.acquire_lease(driver.storage, driver.paths, RUN_ID, 60.0)
    order: list = []
    driver.reporter = _Reporter(driver.storage, driver.paths, lease, order)
    driver.spark = _Spark(driver.storage, driver.paths, active)
    return driver, lease, order


def test_the_driver_gives_its_lease_back_before_the_session_stops_only_when_no_query_runs(tmp_path):
    _, hook = deployed_stream(tmp_path, with_checkpoint=False)
    driver, lease, order = _driver(hook, active=[])
    driver._finish_cleanup(lease)
    assert order == ["close", ("status written", True)]  # the final status while the lease was still held
    assert driver.spark.lease_at_stop is None  # given back before the session's shutdown
    assert hook.storage.read_bytes(hook.paths.lease) is None

    driver, lease, order = _driver(hook, active=["a query that did not stop"])
    driver._finish_cleanup(lease)
    assert driver.spark.lease_at_stop == lease.to_json()  # still held while the session stops
    assert hook.storage.read_bytes(hook.paths.lease) is None  # and given back after it
