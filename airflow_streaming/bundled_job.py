"""A bundled job's query as the runtime runs it: what the job knows of its stream and its writer.

Shared by the driver (:mod:`spark_jobs.runtime.launcher`, which starts the query) and the
compatibility check (:mod:`airflow_streaming.compat.candidate`, which only plans it): a pure module of
the ground floor (the standard library only; the job's module is loaded by name), which both import, so
neither imports the other.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["JobContext", "bundled_writer", "query_name"]


@dataclass(frozen=True)
class JobContext:
    """What a bundled job's ``build(spark, args, ctx)`` gets to know about its stream."""

    stream: str
    version: str
    checkpoint_location: str
    trigger_seconds: float


def query_name(stream: str) -> str:
    """The query name of a stream's bundled query (a SQL-safe identifier)."""
    return stream.replace("-", "_").replace(".", "_")


def bundled_writer(spark: Any, job: str, args: list[str], ctx: JobContext) -> Any:
    """The bundled job's DataStreamWriter with the runtime's checkpoint, trigger and query name applied.

    Shared by the driver (which starts it) and the compatibility check (which only plans it).
    """
    module = importlib.import_module(f"spark_jobs.jobs.{job}")
    return (
        module.build(spark, args, ctx)
        .option("checkpointLocation", ctx.checkpoint_location)
        .trigger(processingTime=f"{ctx.trigger_seconds} seconds")
        .queryName(query_name(ctx.stream))
    )
