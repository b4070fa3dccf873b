"""Stop every stream driver recorded under a control location: ``python -m airflow_streaming.stop_all DIR``.

Each live stream is stopped by a ``stop`` lifecycle action (the one path that changes a stream: its lock,
a record, a history entry): gracefully at a batch boundary, killed after ``--timeout`` seconds. As an
emergency exit it supersedes an unfinished action of the stream (recorded as such) and waits up to
``--timeout`` for a lock another action holds. Used by the demo's exit trap so nothing is left running.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from urllib.parse import urlparse

from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlPaths
from airflow_streaming.control.lifecycle_lock import LifecycleLockHeld
from airflow_streaming.control.locations import storage_for
from airflow_streaming.control.storage import local_path
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle.operations import stop_stream
from airflow_streaming.lifecycle.runner import LifecycleOptions
from airflow_streaming.spec import StreamSpec

log = logging.getLogger(__name__)


def stop_all(control_location: str, timeout: float) -> list[str]:
    """Stop the live drivers under ``control_location``; return the names of the streams stopped.

    An emergency exit (the demo's trap, a test's cleanup): a stop action per live stream that supersedes an
    unfinished action; it only kills drivers their target can prove are the recorded ones. A stream whose
    lock another live action holds past ``timeout`` is reported and left."""
    storage, root = storage_for(control_location)
    stopped = []
    for name in storage.list_dir(root):
        paths = ControlPaths(f"{root}/{name}")
        try:
            record = contract.read_driver_record(storage, paths)
            deployed = SparkStreamHook.deployed_at(storage, f"{paths.root}/deployed.json")
        except (contract.ControlFileError, OSError) as exc:
            logging.error("%s", exc)
            continue
        if record is None or deployed is None:
            continue
        spec = StreamSpec.from_dict(deployed["spec"])
        if SparkStreamHook(spec, storage).target_of(record).state(record).gone:
            continue
        options = LifecycleOptions(owner=f"stop_all pid {os.getpid()}", stop_timeout=timeout, supersede=True)
        if _stop(name, spec, options, time.monotonic() + timeout):
            stopped.append(name)
    return stopped


def _stop(name: str, spec: StreamSpec, options: LifecycleOptions, deadline: float) -> bool:
    """One stream's stop action; a lock held by another live action is waited for until ``deadline``."""
    while True:
        try:
            stop_stream(spec, options)
            return True
        except LifecycleLockHeld as exc:
            if time.monotonic() > deadline:
                log.error("stream %s not stopped: %s", name, exc)
                return False
            time.sleep(1.0)
        except Exception as exc:  # noqa: BLE001 - one stream's failure does not keep the others running
            log.error("stream %s not stopped: %s", name, exc)
            return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_streaming.stop_all", description=__doc__)
    parser.add_argument("control_location")
    parser.add_argument("--timeout", type=float, default=60.0)
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if urlparse(ns.control_location).scheme in ("", "file") and not os.path.isdir(local_path(ns.control_location)):
        return 0  # never created: nothing ran (remote locations, hdfs:// and webhdfs://, are listed as they are)
    for name in stop_all(ns.control_location, ns.timeout):
        print(f"stopped stream {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
