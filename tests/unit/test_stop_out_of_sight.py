"""A stop of a driver this host cannot observe (another host's client-mode driver) ends when the driver's control
files say it stopped, in the lifecycle's GONE wait as in the hook's own stop wait - not at the stop's deadline.

Partition trial (b) (``tests/integration/test_partition_airflow_host.py``) found the gap: Airflow's host asked
the stop, the driver stopped at a batch boundary and gave its lease back within 3 s, and the stop returned after
the whole stop timeout (60 s): ``wait_over``'s GONE wait took only the target's word, which for another host's
client driver is always UNKNOWN, while ``wait_gone`` also took the control files' evidence.
"""

from __future__ import annotations

import dataclasses
import socket
import time

import pytest

from airflow_streaming.control import contract
from airflow_streaming.lifecycle.waits import GONE, Wait, wait_over
from airflow_streaming.targets.base import Liveness
from control_fixtures import deployed_stream

RUN = "20260105T000000Z-0000eeee"


def _record(hook, host: str) -> contract.DriverRecord:
    record = contract.DriverRecord(
        run_id=RUN, stream="s1", version="v1", application="device_signals", host=host,
        command=f"spark-submit --run-id {RUN}", log_path="l", submitted_at=time.time(),
        checkpoint_location=hook.spec.checkpoint_location, handle={"pid": 4_000_000, "start_time": 1.0})
    hook.storage.unguarded.write_atomic(hook.paths.driver, record.to_json())
    return record


def _status(hook, state: str, run_id: str = RUN) -> None:
    doc = contract.StatusDocument(stream="s1", version="v1", run_id=run_id, state=state, pid=1, host="host-b",
                                  started_at=1.0, heartbeat_at=time.time(), ready=True,
                                  queries=[contract.QueryStatus("q", "r", "s1", state == contract.RUNNING, last_batch_id=3)],
                                  exit={"code": contract.EXIT_GRACEFUL, "reason": "graceful stop"}
                                  if state == contract.STOPPED else None)
    contract.write_status(hook.storage.unguarded, hook.paths, doc)


def _lease(hook, renewed_ago: float) -> None:
    now = time.time()
    lease = contract.Lease(RUN, 4_000_000, 1.0, "host-b", now - 300, now - renewed_ago, 30.0)
    hook.storage.unguarded.write_atomic(hook.paths.lease, lease.to_json())


@pytest.mark.parametrize(("status", "lease_renewed_ago", "stopped"), [
    (contract.STOPPED, None, True),      # stopped at a batch boundary, lease given back
    (contract.FAILED, None, True),       # ended on its own, lease given back
    (contract.STOPPED, 60.0, True),      # lease left behind but stale (ttl 30 s)
    (contract.STOPPED, 1.0, False),      # still holds a fresh lease: its queries may not have stopped
    (contract.RUNNING, None, False),     # no word that it stopped
    (None, None, False),                 # no status at all
])
def test_the_gone_wait_takes_the_control_files_word_for_a_driver_out_of_sight(tmp_path, status, lease_renewed_ago,
                                                                              stopped):
    spec, hook = deployed_stream(tmp_path, with_checkpoint=False)
    record = _record(hook, "host-b")  # not this host: its processes cannot be seen from here
    if status is None:
        hook.storage.unguarded.delete(hook.paths.status)
    else:
        _status(hook, status)
    if lease_renewed_ago is not None:
        _lease(hook, lease_renewed_ago)
    assert hook.target_of(record).state(record).liveness == Liveness.UNKNOWN
    wait = Wait(GONE, spec.to_dict(), RUN, time.time() + 600)
    assert wait_over(wait) is stopped
    assert hook.wait_gone(record, timeout=0.3) is stopped  # the hook's own stop wait agrees


def test_another_runs_terminal_status_proves_nothing(tmp_path):
    spec, hook = deployed_stream(tmp_path, with_checkpoint=False)
    _record(hook, "host-b")
    _status(hook, contract.STOPPED, run_id="20260105T000000Z-0000ffff")
    assert not wait_over(Wait(GONE, spec.to_dict(), RUN, time.time() + 600))


def test_a_driver_this_host_can_see_is_judged_by_its_process_not_its_files(tmp_path):
    """On the driver's own host the target's word decides: a live process of the run is not gone, whatever its
    status says (here: no process with the recorded identity, so GONE - and a RUNNING status does not hold it)."""
    spec, hook = deployed_stream(tmp_path, with_checkpoint=False)
    record = _record(hook, socket.gethostname())
    _status(hook, contract.RUNNING)
    assert hook.target_of(record).state(record).liveness == Liveness.GONE
    assert wait_over(Wait(GONE, spec.to_dict(), RUN, time.time() + 600))
    assert dataclasses.is_dataclass(record)
