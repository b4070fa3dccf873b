"""What the compatibility rules compare (plain data, no Spark, no Airflow)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Verdict(str, Enum):
    COMPATIBLE = "COMPATIBLE"
    COMPATIBLE_WITH_WARNINGS = "COMPATIBLE_WITH_WARNINGS"
    INCOMPATIBLE = "INCOMPATIBLE"


class Severity(str, Enum):
    INFO = "INFO"
    WARNING = "WARNING"
    INCOMPATIBLE = "INCOMPATIBLE"


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    """The Spark type as JSON text (``"string"``, ``"long"``, a struct's JSON...)."""


@dataclass(frozen=True)
class OperatorFacts:
    """One stateful operator: Spark's operator id and short name, and its state schemas."""

    operator_id: int
    name: str
    key_fields: tuple[Field, ...] | None
    value_fields: tuple[Field, ...] | None
    num_partitions: int | None = None
    key_expressions: tuple[str, ...] = ()
    """The key expressions from the plan (candidate side only: a checkpoint does not record them)."""


@dataclass(frozen=True)
class SourceFacts:
    index: int
    kind: str | None
    """Source kind: file / kafka / rate / memory / text / json ... (None when unknown)."""
    path: str | None


@dataclass(frozen=True)
class SinkFacts:
    format: str | None
    path: str | None
    output_mode: str
    committed_batch: int | None = None
    """For a file sink: the last batch in ``<path>/_spark_metadata`` (None if absent)."""


@dataclass(frozen=True)
class CheckpointFacts:
    """What a checkpoint says about the query that wrote it."""

    location: str
    query_id: str | None
    sources: tuple[SourceFacts, ...]
    conf: dict[str, str]
    operators: tuple[OperatorFacts, ...]
    last_committed: int | None
    last_planned: int | None
    offsets_log_version: int | None = None
    commit_log_version: int | None = None
    operator_metadata_versions: tuple[int, ...] = ()
    """Versions of ``state/<op>/_metadata`` files: written by Spark 4.0+ only (empty before, or stateless)."""


@dataclass(frozen=True)
class CandidateFacts:
    """What the candidate job version would run."""

    application: str
    sources: tuple[SourceFacts, ...]
    sink: SinkFacts
    conf: dict[str, str | None]
    operators: tuple[OperatorFacts, ...]
    trigger: dict[str, Any] = field(default_factory=dict)
    spark_version: str | None = None
    """The Spark version the candidate was planned with (its runtime)."""


@dataclass(frozen=True)
class Finding:
    """One rule's conclusion, with both sides shown."""

    rule: str
    severity: Severity
    message: str
    checkpoint: Any = None
    candidate: Any = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["severity"] = self.severity.value
        return d


@dataclass(frozen=True)
class DryRunResult:
    """Spark's own restart checks run against a scratch copy of the checkpoint's metadata."""

    status: str
    """passed | rejected | partial (planned without error, but this Spark checks no state while planning:
    3.5) | unsupported | error"""
    error_class: str | None = None
    message: str | None = None
    seconds: float | None = None
    spark_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
