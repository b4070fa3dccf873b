"""One supervision pass as a process of its own, as the supervisor DAG's task runs it (so that a soak can
SIGKILL the supervising process in the middle of a pass). Prints the pass as one JSON line.

    python tests/soak_pass.py --desired-state FILE --stream NAME [--max-attempts N]

The hook is built from the desired-state file's wanted spec (what the DAG gives the operator); events go
through the stream's notification gate, as :class:`SparkStreamSupervisorOperator` sends them, and every
event (admitted or suppressed as a repeat) is printed with whether it was admitted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from typing import Any

from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle.desired_state import load_desired_state
from airflow_streaming.notifications.gate import NotificationGate
from airflow_streaming.supervision.policy import RestartPolicy
from airflow_streaming.lifecycle.supervisor import supervise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--desired-state", required=True)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--max-attempts", type=int, default=200)
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    hook = SparkStreamHook(load_desired_state(ns.desired_state).target(ns.stream).spec)
    gate = NotificationGate(hook.storage, f"{hook.paths.root}/notifications.json", 900)
    sent: list[dict[str, Any]] = []

    def deliver(event: dict[str, Any]) -> None:
        sent.append({"kind": event["kind"], "admitted": gate.admit(event) is not None})

    policy = RestartPolicy(max_attempts=ns.max_attempts, backoff_initial_s=0, backoff_max_s=0,
                           validity_interval_s=3600)
    result = supervise(hook, policy, deliver, owner="soak supervisor pass")
    o = result.observation
    print(json.dumps({
        "action": result.action, "reason": result.reason, "health": result.health, "new_run_id": result.new_run_id,
        "act": result.decision.act.value if result.decision else None,
        "observation": {k: (v.value if hasattr(v, "value") else v) for k, v in dataclasses.asdict(o).items()}
        if o is not None else None,
        "events": sent,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
