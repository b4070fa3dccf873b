"""Run one lifecycle operation from a shell, as the ``stream_operations`` DAG does (same code path).

    python -m airflow_streaming.lifecycle --desired-state FILE --stream NAME --action upgrade [--version v2]

Prints the JSON result. Exit code 0 when the action did what was asked, 1 when it ended REFUSED /
ROLLED_BACK / FAILED (the result says how), 2 when it could not run (bad input, a held lock...).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from airflow_streaming.lifecycle.desired_state import load_desired_state
from airflow_streaming.lifecycle.operations import ACTIONS, LifecycleOutcomeError, operate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_streaming.lifecycle", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--desired-state", required=True, help="the desired-state YAML file")
    parser.add_argument("--stream", required=True)
    parser.add_argument("--action", required=True, choices=ACTIONS)
    parser.add_argument("--version", default=None)
    parser.add_argument("--allow-warnings", action="store_true", default=None)
    parser.add_argument("--owner", default=None, help="who runs it (recorded in the lifecycle record)")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        result = operate(load_desired_state(ns.desired_state), ns.stream, ns.action, ns.version, ns.allow_warnings,
                         owner=ns.owner or "python -m airflow_streaming.lifecycle")
    except LifecycleOutcomeError as exc:
        print(json.dumps(exc.result, indent=1, default=str))
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a CLI reports, it does not trace back
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
