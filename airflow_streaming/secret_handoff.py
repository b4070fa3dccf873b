"""Hand a driver's secret conf to a driver that runs as another Unix user (``run_as_user``), then start it.

Run as that user (after :func:`airflow_streaming.run_as.switch_command`), before spark-submit::

    python .../airflow_streaming/secret_handoff.py <run id> <placeholder> -- spark-submit ... <placeholder> ...

It reads one JSON object ``{"conf": {key: value}}`` from its stdin (a pipe from the worker: nothing on a
command line, in an environment or in a file the worker owns), writes it as the 0600 properties file of
:mod:`airflow_streaming.properties_file` in **its own user's** private directory, puts that path where the
command has ``placeholder`` (``--properties-file``) and in ``AIRFLOW_STREAMING_SECRET_PROPERTIES`` (the
driver's runtime deletes the file once it has started), and replaces itself with the command (same pid:
the worker's record of the driver stays true). Standard library only.
"""

from __future__ import annotations

import json
import os
import sys

ENV_NAME = "AIRFLOW_STREAMING_SECRET_PROPERTIES"


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: secret_handoff.py <run id> <placeholder> -- <command...>", file=sys.stderr)
        return 2
    from airflow_streaming.properties_file import write_properties_file

    run_id, placeholder, command = argv[0], argv[1], argv[3:]
    payload = json.loads(sys.stdin.read() or "{}")
    conf = payload.get("conf") if isinstance(payload, dict) else None
    if not isinstance(conf, dict):
        print("secret_handoff: no conf object on stdin", file=sys.stderr)
        return 2
    path = write_properties_file({str(k): str(v) for k, v in conf.items()}, run_id)
    command = [path if arg == placeholder else arg for arg in command]
    env = dict(os.environ)
    if env.get(ENV_NAME) == placeholder:
        env[ENV_NAME] = path
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.execvpe(command[0], command, env)
    return 127  # not reached


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run by its path
    sys.exit(main(sys.argv[1:]))
