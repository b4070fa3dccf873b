"""Run the compatibility check in a child process (no JVM in the caller) and read its JSON report.

Sensitive conf (:func:`airflow_streaming.redaction.is_sensitive_key`) never goes on the child's
command line, which every user of the machine can read (``ps``): it is written to the child's stdin
as one JSON object (``--conf-stdin``), nothing on disk and nothing in its environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from airflow_streaming.exceptions import StreamingError
from airflow_streaming.log_masking import register_secrets
from airflow_streaming.redaction import redact, secret_args_conf, secret_values, split_conf
from airflow_streaming.spec import StreamSpec

__all__ = ["IncompatibleCandidateError", "blocking_problems", "check_command", "run_check"]


class IncompatibleCandidateError(StreamingError):
    """The candidate version may not restart on the stream's checkpoint (or warned, when not allowed)."""


def blocking_problems(report: dict[str, Any], allow_warnings: bool) -> list[str] | None:
    """The findings that block the candidate, or ``None`` if it may go ahead."""
    verdict = report["verdict"]
    if verdict == "INCOMPATIBLE" or (verdict == "COMPATIBLE_WITH_WARNINGS" and not allow_warnings):
        return [f"{f['rule']}: {f['message']}" for f in report["findings"] if f["severity"] != "INFO"]
    return None


def check_command(spec: StreamSpec, allow_warnings: bool, dry_run: bool = True) -> tuple[list[str], str | None]:
    """The child's argv (no secret on it) and what to write to its stdin: the sensitive conf as a JSON
    object, or ``None`` when there is none."""
    spec.refuse_plain_secrets()
    plain, secret = split_conf({**dependency_conf(spec), **{str(k): str(v) for k, v in spec.spark_conf.items()}})
    secret.update(secret_args_conf(spec.secret_args))  # the child appends them to the job's arguments
    runtime = _runtime_of(spec)
    python = runtime.python if runtime else (spec.env_vars or {}).get("PYSPARK_PYTHON") if spec.run_as_user \
        else None
    cmd = [*_switch(spec), python or sys.executable, "-m", "airflow_streaming.compat", "--json",
           "--checkpoint", spec.checkpoint_location,
           "--application", spec.application, "--stream", spec.name,
           "--trigger-seconds", str(spec.trigger_interval)]
    cmd += [arg for key, value in plain.items() for arg in ("--conf", f"{key}={value}")]
    if secret:
        cmd.append("--conf-stdin")
    if spec.storage_conn_id:
        cmd += ["--storage-conn-id", spec.storage_conn_id]
    if allow_warnings:
        cmd.append("--allow-warnings")
    if not dry_run:
        cmd.append("--no-dry-run")
    cmd += ["--", *spec.application_args]
    return cmd, (json.dumps(secret) if secret else None)


def dependency_conf(spec: StreamSpec) -> dict[str, str]:
    """The candidate's own ``py_files``, ``files``, ``jars``, ``packages``... as the conf of the check's local
    session (what spark-submit would turn them into): the check plans the candidate with the files it will
    run with, so that a script importing a helper from its ``py_files`` is checked, not refused for an import
    error. A local ``file:`` path is given as a plain path (PySpark copies a ``py_files`` entry by path)."""
    from airflow_streaming.submit_fields import SESSION_DEPENDENCY_KEYS, spark_properties

    def local(items: str) -> str:
        return ",".join(i[len("file:"):] if i.startswith("file:/") else i for i in items.split(","))

    return {key: local(value) for key, value in spark_properties(spec).items() if key in SESSION_DEPENDENCY_KEYS}


def _runtime_of(spec: StreamSpec) -> Any:
    """The candidate's own Spark runtime (``None``: this provider's PySpark), which runs the check: the Spark
    that will resume the checkpoint is the one that answers. Only local checkpoints there: the child has no
    Airflow connection to read HDFS with (the lifecycle runs such a gate as a gate driver instead)."""
    if spec.spark_runtime is None:
        return None
    from airflow_streaming.location import is_local_location
    from airflow_streaming.spark_runtime import RuntimeUnavailableError, describe, resolve_runtime

    runtime = resolve_runtime(spec.spark_runtime)
    if runtime is not None and not is_local_location(spec.checkpoint_location):
        raise RuntimeUnavailableError(f"the compatibility check in {describe(spec.spark_runtime)} reads the checkpoint "
                                      f"{spec.checkpoint_location} from this host's files only; an upgrade checks it "
                                      "with a gate driver on the stream's target (SparkStreamUpgradeOperator)")
    return runtime


def _switch(spec: StreamSpec) -> list[str]:
    """The prefix that runs the check as the spec's ``run_as_user`` (none without one)."""
    if not spec.run_as_user:
        return []
    from airflow_streaming import run_as

    return run_as.switch_command(run_as.lookup(spec.run_as_user))


def _cwd(spec: StreamSpec) -> str | None:
    """Where the check runs: the ``run_as_user``'s home (the worker's directory may be closed to it)."""
    if not spec.run_as_user:
        return None
    from airflow_streaming import run_as

    return run_as.working_directory(run_as.lookup(spec.run_as_user))


def check_environment(spec: StreamSpec) -> dict[str, str] | None:
    """The check child's environment. The child runs the candidate's code (it plans the job), so it gets none
    of Airflow's configuration and credentials (:func:`airflow_streaming.targets.driver_env.driver_environment`)
    - except for a checkpoint on HDFS, which it reads through the spec's Airflow connection (``None``: this
    process's environment). A candidate with its own Spark runtime gets that runtime's ``SPARK_HOME`` and
    Python, with the runtime tree (``spark_jobs`` and the pure modules, no other site-packages) as its
    ``PYTHONPATH``; a spec with ``run_as_user`` that user's home and name (:mod:`airflow_streaming.run_as`)."""
    from airflow_streaming.location import is_local_location
    from airflow_streaming.targets.driver_env import driver_environment

    runtime = _runtime_of(spec)
    if runtime is None:
        if not is_local_location(spec.checkpoint_location):
            return None
        env = driver_environment(os.environ)
        if spec.run_as_user:
            import pyspark

            from airflow_streaming import run_as
            from airflow_streaming.targets.runtime_bundle import PROJECT_ROOT

            env = run_as.switched_environment(env, run_as.lookup(spec.run_as_user))
            # Its Python (env_vars PYSPARK_PYTHON) may be another installation: this provider and PySpark first.
            site = os.path.dirname(os.path.dirname(os.path.abspath(pyspark.__file__)))
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), site, env.get("PYTHONPATH")]))
        return env
    from airflow_streaming.spark_runtime import without_class_archive
    from airflow_streaming.targets.runtime_bundle import runtime_tree

    env = driver_environment(os.environ, runtime.environment())
    env["PYTHONPATH"] = runtime_tree()
    if "SPARK_SUBMIT_OPTS" in env:
        env["SPARK_SUBMIT_OPTS"] = without_class_archive(env["SPARK_SUBMIT_OPTS"])
    if spec.run_as_user:
        from airflow_streaming import run_as

        env = run_as.switched_environment(env, run_as.lookup(spec.run_as_user))
    return env


def run_check(spec: StreamSpec, allow_warnings: bool, dry_run: bool = True, timeout: float = 600) -> dict[str, Any]:
    """Run ``python -m airflow_streaming.compat`` for ``spec`` (the candidate) against its checkpoint.

    The check runs in a child process with its own local Spark session, so the Airflow worker never
    hosts a JVM. Returns the JSON report (redacted); raises :class:`StreamingError` if the check itself
    failed.
    """
    cmd, secret_input = check_command(spec, allow_warnings, dry_run)
    secrets = secret_values(spec.spark_conf)
    register_secrets(secrets)
    proc = subprocess.run(cmd, input=secret_input, stdin=None if secret_input is not None else subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout, env=check_environment(spec),
                          cwd=_cwd(spec))
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if line.startswith("{")), None)
    try:
        report = json.loads("\n".join(lines[start:])) if start is not None else None
    except json.JSONDecodeError:
        report = None
    if report is None or "error" in report:
        reason = report["error"] if report else (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise StreamingError(f"compatibility check of {spec.application!r} against {spec.checkpoint_location} "
                             f"could not run: {redact(str(reason), secrets)}")
    return redact(report, secrets)


def start_check_detached(spec: StreamSpec, allow_warnings: bool, dry_run: bool, report_to: str, token: str,
                         log_path: str) -> int:
    """Start the check in a detached child that writes ``{"id": token, "report" | "error"}`` to the
    storage location ``report_to`` when it ends (a deferred upgrade's trigger waits for that file, so
    no worker slot waits for the check). Returns the child's pid; its output goes to ``log_path``."""
    cmd, secret_input = check_command(spec, allow_warnings, dry_run)
    cut = cmd.index("--")
    cmd[cut:cut] = ["--report-to", report_to, "--report-id", token, "--run-id", token]
    register_secrets(secret_values(spec.spark_conf))
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if secret_input is not None else subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                                env=check_environment(spec), cwd=_cwd(spec))
    if secret_input is not None and proc.stdin is not None:
        proc.stdin.write(secret_input.encode())
        proc.stdin.close()
    return proc.pid


def read_detached_report(spec: StreamSpec, answer: dict[str, Any] | None) -> dict[str, Any]:
    """The report in a detached check's answer; :class:`StreamingError` when the check could not run."""
    secrets = secret_values(spec.spark_conf)
    if not isinstance(answer, dict) or not isinstance(answer.get("report"), dict):
        reason = (answer or {}).get("error") if isinstance(answer, dict) else None
        raise StreamingError(f"compatibility check of {spec.application!r} against {spec.checkpoint_location} "
                             f"could not run: {redact(str(reason or 'it ended without a report'), secrets)}")
    return redact(answer["report"], secrets)
