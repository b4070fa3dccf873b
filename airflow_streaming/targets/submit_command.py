"""The spark-submit command line of a :class:`LaunchPlan` - with no secret on it.

Sensitive conf entries (see :mod:`airflow_streaming.redaction`) go into a 0600 properties file
(``--properties-file``, with ``--load-spark-defaults`` so that ``spark-defaults.conf`` still applies)
that the driver's runtime deletes as soon as it has started: ``ps`` never shows a secret.
"""

from __future__ import annotations

from airflow_streaming.properties_file import read_properties_file, write_properties_file
from airflow_streaming.redaction import MASK, is_sensitive_key
from airflow_streaming.targets.launch_plan import LaunchPlan

__all__ = ["masked_command", "read_properties_file", "spark_submit_argv", "write_properties_file"]


def spark_submit_argv(plan: LaunchPlan, binary: str = "spark-submit", properties_file: str | None = None) -> list[str]:
    """``spark-submit --master M --deploy-mode D --name N --conf k=v ... LAUNCHER runtime args``."""
    argv = [binary, "--master", plan.master, "--deploy-mode", plan.deploy_mode, "--name", plan.name]
    for key, value in plan.conf.items():
        argv += ["--conf", f"{key}={value}"]
    if properties_file:
        argv += ["--properties-file", properties_file, "--load-spark-defaults"]
    if plan.py_files:
        argv += ["--py-files", ",".join(plan.py_files)]
    argv += plan.submit_args
    return [*argv, plan.launcher, *plan.runtime_args]


def masked_command(argv: list[str]) -> str:
    """The command as a string for records and logs (it carries no secret: see the module docstring)."""
    shown = []
    for arg in argv:
        key, sep, _ = arg.partition("=")
        shown.append(f"{key}={MASK}" if sep and is_sensitive_key(key) else arg)
    return " ".join(shown)
