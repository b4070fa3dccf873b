"""The spark-submit command line of a :class:`LaunchPlan` - with no secret on it.

Private conf entries (every key not known as a public Spark setting: :mod:`airflow_streaming.public_conf`,
:func:`airflow_streaming.redaction.split_conf`) go into a 0600 properties file
(``--properties-file``, with ``--load-spark-defaults`` so that ``spark-defaults.conf`` still applies)
that the driver's runtime deletes as soon as it has started: ``ps`` never shows a secret. When the spec
names its own ``properties_file`` (read *instead of* ``spark-defaults.conf``, as ``SparkSubmitHook`` passes
it), that file's entries go first into the 0600 file (:func:`submitted_properties`), without
``--load-spark-defaults``: spark-submit reads one properties file.
"""

from __future__ import annotations

import re

from airflow_streaming.exceptions import ApplicationNotFoundError
from airflow_streaming.properties_file import read_properties_file, write_properties_file
from airflow_streaming.redaction import MASK, is_sensitive_key, mask_args
from airflow_streaming.targets.launch_plan import LaunchPlan

__all__ = ["masked_command", "read_properties_file", "spark_submit_argv", "submitted_properties",
           "write_properties_file"]


def spark_submit_argv(plan: LaunchPlan, binary: str = "spark-submit", properties_file: str | None = None) -> list[str]:
    """``spark-submit --master M --deploy-mode D --name N --conf k=v ... LAUNCHER runtime args``."""
    argv = [binary, "--master", plan.master, "--deploy-mode", plan.deploy_mode, "--name", plan.name]
    for key, value in plan.conf.items():
        argv += ["--conf", f"{key}={value}"]
    if properties_file:
        argv += ["--properties-file", properties_file, *([] if plan.properties_file else ["--load-spark-defaults"])]
    elif plan.properties_file:
        argv += ["--properties-file", plan.properties_file]
    if plan.py_files:
        argv += ["--py-files", ",".join(plan.py_files)]
    argv += plan.submit_args
    return [*argv, plan.launcher, *plan.runtime_args]


def masked_command(argv: list[str]) -> str:
    """The command as a string for records and logs. Private conf is never on it (see the module
    docstring); what still looks like a secret is masked all the same: ``k=v`` with a sensitive key,
    ``--password x`` pairs, and any argument holding a secret (:func:`~airflow_streaming.redaction.mask_args`)."""
    shown = []
    for arg in argv:
        key, sep, _ = arg.partition("=")
        shown.append(f"{key}={MASK}" if sep and is_sensitive_key(key) else arg)
    return " ".join(mask_args(shown))


_SEPARATOR = re.compile(r"(?<!\\)[=:\s]")


def submitted_properties(plan: LaunchPlan) -> dict[str, str]:
    """What the 0600 properties file of ``plan`` holds: the entries of the spec's ``properties_file`` (Java
    properties: ``key=value``, ``key: value`` or ``key value``; ``#``/``!`` comments; ``\\`` continuations)
    then the secret conf. :class:`ApplicationNotFoundError` (nothing submitted) if that file cannot be read."""
    entries: dict[str, str] = {}
    if plan.properties_file:
        try:
            with open(plan.properties_file, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ApplicationNotFoundError(f"properties_file {plan.properties_file} cannot be read ({exc}); nothing "
                                           "was submitted") from exc
        logical = re.sub(r"\\\n[ \t]*", "", text)
        for line in logical.splitlines():
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            match = _SEPARATOR.search(line)
            key, value = (line[:match.start()], line[match.end():]) if match else (line, "")
            entries[key.strip()] = value.strip().lstrip("=:").strip()
    return {**entries, **plan.secret_conf}
