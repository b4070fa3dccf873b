"""Which PySpark this environment has: the full one (Spark's jars, spark-submit) or only pyspark-client.

The package depends on ``pyspark-client`` (PySpark's Python code, ~11 MB), which is all the scheduler,
triggerer, dag-processor, api-server and the hooks' I/O need. What starts Spark on this host needs the full
``pyspark`` (~480 MB), the ``pyspark`` extra: spark-submit for local, client-mode and YARN/Kubernetes
submissions, and Spark's jars for the compatibility gate's child and the class-data-sharing archive
(docs/dependencies.md). Both packages install into ``site-packages/pyspark``: they must be the same version.

Pure: no Airflow import.
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["PYSPARK_EXTRA", "full_pyspark_missing", "install_hint", "spark_submit_missing"]

#: The extra of airflow-streaming that installs the full PySpark (same name as the Spark provider's).
PYSPARK_EXTRA = "pyspark"


def install_hint() -> str:
    """The command that installs the full PySpark here, at the version of the installed pyspark-client."""
    try:
        pin = f' "pyspark=={version("pyspark-client")}"'
    except PackageNotFoundError:
        pin = ""
    return f'pip install "airflow-streaming[{PYSPARK_EXTRA}]"{pin}'


def full_pyspark_missing() -> str | None:
    """``None`` when this environment's PySpark can start Spark (jars and py4j present), else what is missing."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return "PySpark is not installed"
    root = Path(next(iter(spec.submodule_search_locations)))
    if not any((root / "jars").glob("spark-core_*.jar")):
        return f"{root} has no Spark jars (only pyspark-client is installed, not the full pyspark)"
    if importlib.util.find_spec("py4j") is None:
        return "py4j (a dependency of the full pyspark) is not installed"
    return None


def needs_full_pyspark(what: str, missing: str) -> str:
    """The message for ``what`` (e.g. "the compatibility check") that cannot run because of ``missing``."""
    return (f"{what} starts Spark on this host and needs the full PySpark (Spark's jars and spark-submit), "
            f"but {missing}. Install the `{PYSPARK_EXTRA}` extra here: {install_hint()} "
            "(pyspark and pyspark-client share site-packages/pyspark: keep them at the same version)")


def spark_submit_missing(binary: str) -> str:
    """The message for a ``binary`` (spark-submit) that is not on PATH; nothing was submitted."""
    return (f"{binary} is not on PATH. Submitting drivers from this host needs the full PySpark: install the "
            f"`{PYSPARK_EXTRA}` extra ({install_hint()}), or put a Spark distribution's bin directory on PATH")
