"""What a target needs to start one run of a stream's driver (plain data, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a target needs to start one run of a stream's driver.

    ``conf`` holds the Spark conf without secrets; ``secret_conf`` the sensitive entries, which a
    target must never put on a command line (``ps`` shows it): a 0600 properties file, the
    environment or a request body instead.
    """

    run_id: str
    name: str
    master: str
    deploy_mode: str
    launcher: str
    """The driver entry point (``spark_jobs/launch.py``) as the driver's host sees it."""
    runtime_args: list[str]
    conf: dict[str, str]
    secret_conf: dict[str, str] = field(default_factory=dict)
    py_files: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of the driver (besides the submitting process's own)."""
    log_path: str = ""
    standby: bool = False
    submit_args: list[str] = field(default_factory=list)
    """Extra spark-submit options from the Spark connection (``--queue``, ``--principal``...)."""
    spark_binary: str | None = None
    """The ``spark-submit`` of the stream version's own Spark runtime (``airflow_streaming.spark_runtime``);
    ``None``: the target's ``spark_binary`` setting (default ``spark-submit`` on PATH)."""
    run_as_user: str | None = None
    """The Unix user the driver runs as (the spec's ``run_as_user``; local target only): see
    :mod:`airflow_streaming.run_as`."""
    properties_file: str | None = None
    """The spec's ``properties_file`` (spark-submit's ``--properties-file``: read instead of
    ``spark-defaults.conf``)."""
