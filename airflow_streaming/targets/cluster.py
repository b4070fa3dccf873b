"""What the cluster targets (standalone cluster mode, YARN, Kubernetes) have in common.

- The run id travels with every driver (``spark.airflow_streaming.run_id``, besides ``--run-id`` in
  the runtime's arguments) and each target adds its own searchable form of it (YARN tags, pod
  labels), so that :meth:`~airflow_streaming.targets.base.DriverTarget.find` can answer "was run X
  submitted?" even when the submission's record was never written.
- A cluster restarts nothing by itself: the project's supervisor is the one restarter (it restarts
  through the lifecycle, under the stream's lock, with backoff and attempt limits). See
  ``docs/cluster.md``, "Who restarts a failed driver".
- The driver's own output lives on the cluster; the control directory's run log
  (``logs/<run_id>.log``) gets a note of where the driver went and what the submission printed.
- YARN and Kubernetes submit with ``spark-submit`` (:func:`run_spark_submit`): secret conf goes in a
  0600 properties file, deleted as soon as spark-submit has handed the application over.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import time
from typing import Any

from airflow_streaming.control.contract import ControlFileError, DriverRecord
from airflow_streaming.control.storage import StorageError
from airflow_streaming.exceptions import ApplicationNotFoundError, DriverStartError
from airflow_streaming.pyspark_install import spark_submit_missing
from airflow_streaming.redaction import scrub, split_entries
from airflow_streaming.targets.base import DriverTarget, LaunchPlan
from airflow_streaming.targets.driver_env import driver_environment
from airflow_streaming.targets.submit_command import (
    masked_command,
    spark_submit_argv,
    submitted_properties,
    write_properties_file,
)

log = logging.getLogger(__name__)

SECRET_CONF_ENV = "AIRFLOW_STREAMING_SECRET_CONF"
"""Environment variable carrying secret conf (JSON) to a cluster driver (standalone: in the REST request;
Kubernetes: from a Secret); the runtime applies it to its SparkSession and removes it from its environment."""
RUN_ID_CONF = "spark.airflow_streaming.run_id"
"""Spark conf key carrying the run id on every cluster driver (shown in the Spark UI's Environment)."""
STREAM_CONF = "spark.airflow_streaming.stream"
SPARK_SUBMIT_TIMEOUT = 300.0
"""Seconds a cluster-mode spark-submit may take to hand the application over (it does not wait for it)."""


class ClusterTarget(DriverTarget):
    """Base of the cluster targets: the run id in the conf, the driver's size and Python, notes in the
    control log, and the recorded submissions of a run id (for :meth:`find`)."""

    kind = "cluster"

    def plan(self, spec: Any, run_id: str, launcher: str, runtime_args: list[str], conf: dict[str, str],
             secret_conf: dict[str, str], log_path: str, standby: bool = False) -> LaunchPlan:
        """The base plan with ``deploy_mode=cluster``, the run id and stream in the conf, and the driver's
        cores, memory and Python from the ``cluster`` settings (explicit ``spark_conf`` wins)."""
        if self.settings.get("supervise"):
            raise ValueError(
                "cluster.supervise: true is not supported: the project's supervisor already restarts a failed "
                "driver (through the lifecycle, with backoff and attempt limits); Spark's supervise would "
                "restart it a second time, including after failures that must not be retried. Remove the "
                "setting and configure the supervisor's restart policy instead (docs/supervision.md).")
        plan = super().plan(spec, run_id, launcher, runtime_args, conf, secret_conf, log_path, standby)
        extra: dict[str, str] = {RUN_ID_CONF: run_id, STREAM_CONF: spec.name}
        if self.settings.get("driver_cores"):
            extra["spark.driver.cores"] = str(self.settings["driver_cores"])
        if self.settings.get("driver_memory"):
            extra["spark.driver.memory"] = str(self.settings["driver_memory"])
        if self.settings.get("python"):
            extra["spark.pyspark.python"] = self.settings["python"]
            extra["spark.pyspark.driver.python"] = self.settings["python"]
        merged = {**extra, **plan.conf}
        merged[RUN_ID_CONF] = run_id  # never overridden: it is how the driver is found again
        return dataclasses.replace(plan, deploy_mode="cluster", conf=merged)

    @staticmethod
    def driver_env_conf(plan: LaunchPlan, prefix: str, spec: Any) -> LaunchPlan:
        """``plan`` with the spec's ``env_vars`` (the plan's ``env``) also as ``<prefix><NAME>`` conf entries
        (``spark.yarn.appMasterEnv.``, ``spark.kubernetes.driverEnv.``: how ``SparkSubmitHook`` hands them to a
        cluster driver); an entry that holds a secret goes with the secret conf, never on the command line."""
        names = {f"{prefix}{name}": name for name in (getattr(spec, "env_vars", None) or {})}
        entries = {key: spec.env_vars[name] for key, name in names.items()}
        plain, secret = split_entries(entries, names)  # judged by the variable's name and value
        return dataclasses.replace(plan, conf={**plan.conf, **plain}, secret_conf={**plan.secret_conf, **secret})

    # ------------------------------------------------------------------ records and notes
    def recorded(self, run_id: str, record: DriverRecord | None = None) -> list[DriverRecord]:
        """The records of ``run_id`` this target wrote (``record``, ``driver.json``, ``standby-driver.json``)."""
        found: dict[str, DriverRecord] = {}
        if record is not None and record.run_id == run_id:
            found[str(record.handle)] = record
        for path in (self.paths.driver, self.paths.standby_driver):
            try:
                data = self.storage.read_bytes(path)
                other = None if data is None else DriverRecord.from_json(path, data)
            except (StorageError, ControlFileError) as exc:
                log.warning("cannot read %s while looking for run %s: %s", path, run_id, exc)
                continue
            if other is not None and other.run_id == run_id and other.target == self.kind:
                found.setdefault(str(other.handle), other)
        return list(found.values())

    def note(self, log_path: str, text: str) -> None:
        """Append ``text`` to the run's log in the control directory (where the driver went, what the
        submission printed). Never raises: the note is for people."""
        if not log_path:
            return
        try:
            old = self.storage.read_bytes(log_path) or b""
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
            self.storage.write_atomic(log_path, old + f"[{stamp} UTC airflow-streaming] {text}\n".encode())
        except (StorageError, OSError) as exc:
            log.warning("cannot write the note to %s: %s", log_path, exc)


def spark_submit_binary(target: ClusterTarget, plan: LaunchPlan, env: dict[str, str]) -> str:
    """The spark-submit to run; :class:`ApplicationNotFoundError` (nothing submitted) if it is missing."""
    binary = target.binary(plan)
    if shutil.which(binary, path=env.get("PATH")) is None:
        raise ApplicationNotFoundError(f"{spark_submit_missing(binary)}, or set cluster.spark_binary; "
                                       "nothing was submitted")
    return binary


def run_spark_submit(target: ClusterTarget, plan: LaunchPlan, what: str,
                     timeout: float = SPARK_SUBMIT_TIMEOUT, secret_conf_file: bool = True) -> tuple[int, str]:
    """Run ``spark-submit`` for a cluster-mode ``plan`` and return ``(exit code, output)``.

    The conf is on the command line except the secret entries, which go in a 0600 properties file that
    is deleted once spark-submit has exited (it hands the application over and returns: the targets
    set ``waitAppCompletion=false``) - unless ``secret_conf_file`` is false: then spark-submit never
    sees them (the target delivers them to the driver another way). The output, secrets masked, is
    noted in the run's log. A spark-submit still running after ``timeout`` is killed; raises
    :class:`DriverStartError` then."""
    env = driver_environment(os.environ, plan.env)
    # This host's Python means nothing on a NodeManager or in an image: the driver's Python is
    # cluster.python (spark.pyspark.python), else the cluster's default.
    env.pop("PYSPARK_PYTHON", None)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    binary = spark_submit_binary(target, plan, env)
    properties = write_properties_file(submitted_properties(plan), plan.run_id) if plan.secret_conf and secret_conf_file \
        else None
    argv = spark_submit_argv(plan, binary, properties)
    target.note(plan.log_path, f"{what}: {masked_command(argv)}")
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env=env, timeout=timeout, check=False)
        output = proc.stdout.decode("utf-8", errors="replace")
        code = proc.returncode
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode("utf-8", errors="replace") if isinstance(exc.stdout, bytes) else ""
        target.note(plan.log_path, f"spark-submit did not return within {timeout:.0f}s (killed):\n"
                                   f"{scrub(output, plan.secret_conf.values())}")
        raise DriverStartError(
            f"spark-submit for run {plan.run_id} did not return within {timeout:.0f}s and was killed; the "
            f"application may or may not have been submitted (the lifecycle looks for run {plan.run_id} before "
            f"submitting again). Check that the cluster manager answers. Output:\n{_tail(output, plan)}") from exc
    finally:
        if properties:
            try:
                os.unlink(properties)
            except OSError:
                pass
    target.note(plan.log_path, f"spark-submit exited {code}:\n{scrub(output, plan.secret_conf.values())}")
    return code, output


def _tail(output: str, plan: LaunchPlan, lines: int = 25) -> str:
    return scrub("\n".join(output.splitlines()[-lines:]), plan.secret_conf.values())


def submit_failure(plan: LaunchPlan, code: int, output: str, what: str, hint: str) -> DriverStartError:
    """The error of a spark-submit that did not hand an application over."""
    return DriverStartError(f"{what} for run {plan.run_id} failed (spark-submit exit code {code}); {hint}. "
                            f"Last spark-submit output:\n{_tail(output, plan)}")
