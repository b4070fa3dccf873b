"""Stop every stream driver recorded under a control location: ``python -m airflow_streaming.stop_all DIR``.

Asks each live driver to stop gracefully (removes its run marker), waits up to ``--timeout`` seconds,
then kills what is left by process group. Used by the demo's exit trap so nothing is left running.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from urllib.parse import urlparse

from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlPaths
from airflow_streaming.control.storage import local_path
from airflow_streaming.control.locations import storage_for
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec


def stop_all(control_location: str, timeout: float) -> list[str]:
    """Stop the live drivers under ``control_location``; return the names of the streams stopped.

    An emergency exit (the demo's trap, a test's cleanup): it does not wait for lifecycle locks, but it
    only kills drivers their target can prove are the recorded ones."""
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
        hook = SparkStreamHook(StreamSpec.from_dict(deployed["spec"]), storage)
        if hook.target_of(record).state(record).gone:
            continue
        hook.request_stop()
        if not hook.wait_gone(record, timeout):
            hook.kill(record)
        stopped.append(name)
    return stopped


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
