"""Pydantic helpers of the Airflow-side models (lifecycle record, supervisor ledger, snapshot manifest...).

Never imported by the driver runtime (``spark_jobs`` and the modules it needs stay plain Python, see
:mod:`airflow_streaming.targets.runtime_bundle`).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

T = TypeVar("T")


def describe(exc: ValidationError, limit: int = 3) -> str:
    """A one-line account of what is wrong, naming each field by its path (``probation.min_batches``)."""
    missing = [_loc(e["loc"]) for e in exc.errors() if e["type"] == "missing"]
    parts = [f"lacks {', '.join(missing)}"] if missing else []
    for error in exc.errors():
        if error["type"] == "missing":
            continue
        where = f"field {_loc(error['loc'])!r}" if error["loc"] else "the document"
        if error["type"] == "value_error":  # raised by a validator of ours: its message says it all
            parts.append(f"{where}: {error['ctx']['error']}")
        else:
            parts.append(f"{where}: {error['msg'][0].lower()}{error['msg'][1:]}, got {_shown(error['input'])}")
    more = len(parts) - limit
    return "; ".join(parts[:limit]) + (f" (and {more} more)" if more > 0 else "")


def _loc(loc: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def parse(kind: type[T], data: Any, error: type[Exception] = ValueError) -> T:
    """``data`` (parsed JSON) validated as ``kind``; ``error`` with :func:`describe`'s message if it is not."""
    try:
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind.model_validate(data)  # type: ignore[return-value]
        return _adapter(kind).validate_python(data)
    except ValidationError as exc:
        raise error(describe(exc)) from exc


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(kind: type[T]) -> TypeAdapter[T]:
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


class Model(BaseModel):
    """A control file's model: fields checked strictly (no ``"1"`` for 1, no ``1`` for true), unknown keys
    (written by a newer version) ignored; ``to_dict``/``from_dict`` as the dataclasses they replace had."""

    model_config = ConfigDict(strict=True, extra="ignore")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls: type[T], d: Any) -> T:
        """Parse; ``ValueError`` naming the field(s) if ``d`` is not such a document."""
        return parse(cls, d)
