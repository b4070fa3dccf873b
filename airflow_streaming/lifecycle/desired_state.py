"""The desired-state file: every managed stream and the version it should run (plain Python).

One YAML file lists each stream, the versions it may run and the one wanted now. The scheduled
"upgrade window" DAG applies :func:`pending_changes` one stream at a time; the manual-operations DAG
lets a user pick a stream and any listed version (:meth:`StreamTarget.spec_for`)::

    defaults:                       # optional: spec fields shared by every stream
      control_location: /data/control
      master: local[2]
    streams:
      device-signals:               # the stream name (StreamSpec.name)
        version: v2                 # the wanted version: a key of `versions`
        allow_warnings: false       # optional: let COMPATIBLE_WITH_WARNINGS upgrades proceed
        probation: {min_batches: 2, window: 5 minutes}   # optional (these are the defaults)
        spec: {checkpoint_location: /data/ckpt/device-signals}   # optional: shared by all versions
        versions:
          v1: {application: device_signals}
          v2: {application: device_signals_v2, spark_conf: {spark.sql.shuffle.partitions: 8}}
          v3:                       # an incompatible change: run side by side, then switch
            transition: parallel    # default: in_place
            name: device-signals-v3 # its own stream name (control dir) ...
            checkpoint_location: /data/ckpt/device-signals-v3   # ... and its own checkpoint

The spec of stream ``S`` at version ``V`` is the deep merge of ``defaults``, ``streams.S.spec``
and ``streams.S.versions.V`` (mappings such as ``spark_conf`` merged key by key, anything else
replaced; ``null`` resets a field to its default) plus ``name=S`` (or the version's ``name``,
parallel versions only) and ``version=V``. Every version's spec is validated at load time.
Errors are :class:`DesiredStateError` whose ``field`` is a dotted path such as
``streams.device-signals.versions.v2.application_args``.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.lifecycle.record import Probation
from airflow_streaming.spec import (
    ROOT_FIELD,
    SpecError,
    StreamSpec,
    _check_location,
    _check_segment,
    locations_overlap,
    parse_duration,
)

__all__ = [
    "DesiredState",
    "DesiredStateError",
    "PendingChange",
    "Probation",
    "StreamTarget",
    "TRANSITIONS",
    "load_desired_state",
    "pending_changes",
]

IN_PLACE = "in_place"
PARALLEL = "parallel"
TRANSITIONS: tuple[str, ...] = (IN_PLACE, PARALLEL)
"""How a version replaces the running one: stop/upgrade/start on the same checkpoint, or side by side."""

_TOP_KEYS = ("defaults", "streams")
_STREAM_KEYS = ("version", "allow_warnings", "warm_start", "probation", "spec", "versions")
_PROBATION_KEYS = ("min_batches", "window")
_SPEC_KEYS = tuple(f.name for f in dataclasses.fields(StreamSpec) if f.init)
_SHARED_KEYS = tuple(k for k in _SPEC_KEYS if k not in ("name", "version"))
"""Spec fields allowed in ``defaults`` and ``streams.S.spec`` (name and version are per version)."""
_VERSION_KEYS = (*_SHARED_KEYS, "transition", "name")


class DesiredStateError(SpecError):
    """The desired-state file is invalid; ``field`` is a dotted path (``streams.x.version``)."""


@dataclass(frozen=True)
class StreamTarget:
    """One managed stream: the wanted version, its full spec and every other listed version."""

    name: str
    """The stream's key in the file (the in-place ``StreamSpec.name``)."""
    version: str
    """The wanted version."""
    allow_warnings: bool
    """Whether an upgrade judged COMPATIBLE_WITH_WARNINGS may proceed."""
    probation: Probation
    """What a new version must show before the change counts as done."""
    transition: str
    """How the wanted version is rolled out: ``"in_place"`` or ``"parallel"``."""
    spec: StreamSpec
    """The full, validated spec of the wanted version."""
    versions: tuple[str, ...]
    """All listed versions, in file order."""
    warm_start: bool = False
    """Prepare the new driver before stopping the old one (shorter downtime; two drivers' worth of memory)."""
    _specs: Mapping[str, StreamSpec] = field(default_factory=dict, repr=False, compare=False, hash=False)
    _transitions: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False, hash=False)

    def _check_version(self, version: str) -> None:
        if version not in self._specs:
            raise DesiredStateError(
                f"streams.{self.name}.versions",
                f"unknown version {version!r} of stream {self.name!r} "
                f"(listed: {', '.join(self.versions)}){_did_you_mean(version, self.versions)}",
            )

    def spec_for(self, version: str) -> StreamSpec:
        """The full spec of any listed ``version``."""
        self._check_version(version)
        return self._specs[version]

    def transition_for(self, version: str) -> str:
        """``"in_place"`` or ``"parallel"``: how ``version`` replaces the running one."""
        self._check_version(version)
        return self._transitions[version]


@dataclass(frozen=True)
class DesiredState:
    """The parsed desired-state file."""

    path: str | None
    """The file it was read from (``None`` if built from a mapping)."""
    streams: dict[str, StreamTarget] = field(hash=False)
    """Every managed stream by name, in file order."""

    def target(self, name: str) -> StreamTarget:
        """The target of stream ``name``; :class:`DesiredStateError` (field ``stream``) if unknown."""
        try:
            return self.streams[name]
        except (KeyError, TypeError):
            known = ", ".join(self.streams)
            raise DesiredStateError(
                "stream",
                f"unknown stream {name!r} (managed streams: {known}){_did_you_mean(name, self.streams)}",
            ) from None


@dataclass(frozen=True)
class PendingChange:
    """A stream whose wanted version differs from the deployed one."""

    stream: str
    from_version: str | None
    """The deployed version, ``None`` if the stream was never deployed."""
    to_version: str
    transition: str
    """``"in_place"`` or ``"parallel"`` (the wanted version's transition)."""

    @property
    def is_deploy(self) -> bool:
        """True for a first deployment (nothing runs yet, so the transition does not matter)."""
        return self.from_version is None


def pending_changes(state: DesiredState, deployed_versions: Mapping[str, str | None]) -> list[PendingChange]:
    """The changes needed to reach ``state``, in file order.

    ``deployed_versions`` maps a stream name to its deployed version; a missing name or ``None``
    means never deployed. Streams not in ``state`` are ignored.
    """
    changes: list[PendingChange] = []
    for name, target in state.streams.items():
        deployed = deployed_versions.get(name)
        if deployed != target.version:
            changes.append(PendingChange(name, deployed, target.version, target.transition))
    return changes


def load_desired_state(source: str | os.PathLike[str] | Mapping[str, Any]) -> DesiredState:
    """Load and validate a desired-state file (a path) or an already parsed mapping.

    Raises :class:`DesiredStateError` on the first problem found.
    """
    if isinstance(source, Mapping):
        return _parse(source, None)
    if not isinstance(source, (str, os.PathLike)):
        raise DesiredStateError(ROOT_FIELD, f"expected a path or a mapping, got {type(source).__name__}")
    path = os.fspath(source)
    if isinstance(path, str) and "\n" in path:
        raise DesiredStateError(ROOT_FIELD, "expected the path of a YAML file, not YAML text")
    import yaml  # local import, as in spec.py

    from airflow_streaming.spec import strict_yaml_load

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise DesiredStateError(ROOT_FIELD, f"desired-state file {path!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DesiredStateError(ROOT_FIELD, f"cannot read desired-state file {path!r}: {exc}") from exc
    try:
        data = strict_yaml_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise DesiredStateError(ROOT_FIELD, f"invalid YAML in {path!r}{where}: {problem}") from exc
    if not isinstance(data, Mapping):
        got = "an empty document" if data is None else type(data).__name__
        raise DesiredStateError(ROOT_FIELD, f"top level of {path!r} must be a mapping, got {got}")
    return _parse(data, path)


# --------------------------------------------------------------------------- parsing


def _did_you_mean(key: Any, allowed: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(key), list(allowed), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _check_keys(data: Mapping[Any, Any], allowed: tuple[str, ...], prefix: str) -> None:
    """Reject non-string and unknown keys; the error names ``prefix.key``."""
    for key in data:
        if not isinstance(key, str):
            raise DesiredStateError(
                prefix or ROOT_FIELD, f"keys must be strings, got {type(key).__name__} {key!r}"
            )
        if key not in allowed:
            raise DesiredStateError(
                _join(prefix, key),
                f"unknown key {key!r} (allowed: {', '.join(allowed)}){_did_you_mean(key, allowed)}",
            )


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _mapping(value: Any, field_: str, *, required: bool = False) -> Mapping[Any, Any]:
    """``value`` as a mapping (``None`` -> empty unless required)."""
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        got = "nothing" if value is None else type(value).__name__
        raise DesiredStateError(field_, f"must be a mapping, got {got}")
    return value


def _prefixed(exc: SpecError, prefix: str) -> DesiredStateError:
    """Re-raise a spec error with its field under ``prefix``, keeping the message."""
    if exc.field == ROOT_FIELD:
        return DesiredStateError(prefix, exc.message)
    sep = "" if exc.field.startswith("[") else "."
    return DesiredStateError(f"{prefix}{sep}{exc.field}", exc.message)


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge: mappings merged key by key, anything else (lists too) replaced by ``override``."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = _merge(result[key], value)
        else:
            result[key] = value
    return result


def _overlaps(a: str, b: str) -> bool:
    """True if two (valid) locations are equal or one is nested in the other (compared normalised)."""
    return locations_overlap(a, b)


def _parse(data: Mapping[Any, Any], path: str | None) -> DesiredState:
    _check_keys(data, _TOP_KEYS, "")
    defaults = _mapping(data.get("defaults"), "defaults")
    _check_keys(defaults, _SHARED_KEYS, "defaults")
    if data.get("streams") is None:
        raise DesiredStateError(
            "streams", "is required: a mapping of stream name -> {version, versions, ...}"
        )
    streams = _mapping(data["streams"], "streams", required=True)
    if not streams:
        raise DesiredStateError("streams", "must list at least one stream")
    targets: dict[str, StreamTarget] = {}
    for name, entry in streams.items():
        if not isinstance(name, str):
            raise DesiredStateError(
                "streams", f"stream names must be strings, got {type(name).__name__} {name!r}"
            )
        targets[name] = _parse_stream(name, entry, defaults)
    return DesiredState(path=path, streams=targets)


def _parse_stream(name: str, entry: Any, defaults: Mapping[str, Any]) -> StreamTarget:
    prefix = f"streams.{name}"
    try:
        _check_segment(name, prefix)
    except SpecError as exc:
        raise DesiredStateError(exc.field, f"stream name {exc.message}") from None
    entry = _mapping(entry, prefix, required=True)
    _check_keys(entry, _STREAM_KEYS, prefix)

    shared = _mapping(entry.get("spec"), f"{prefix}.spec")
    _check_keys(shared, _SHARED_KEYS, f"{prefix}.spec")
    base = _merge(defaults, shared)

    versions = _mapping(entry.get("versions"), f"{prefix}.versions", required=True)
    if not versions:
        raise DesiredStateError(f"{prefix}.versions", "must list at least one version")
    specs: dict[str, StreamSpec] = {}
    transitions: dict[str, str] = {}
    for version, overrides in versions.items():
        if not isinstance(version, str):
            raise DesiredStateError(
                f"{prefix}.versions",
                f"version names must be strings, got {type(version).__name__} {version!r} (quote it)",
            )
        vfield = f"{prefix}.versions.{version}"
        transitions[version], specs[version] = _parse_version(name, version, overrides, base, vfield)
    _check_parallel_versions(name, specs, transitions, base)

    wanted = entry.get("version")
    if wanted is None:
        raise DesiredStateError(f"{prefix}.version", f"is required: one of {', '.join(versions)}")
    if not isinstance(wanted, str):
        raise DesiredStateError(
            f"{prefix}.version", f"must be a string, got {type(wanted).__name__} {wanted!r} (quote it)"
        )
    if wanted not in specs:
        raise DesiredStateError(
            f"{prefix}.version",
            f"{wanted!r} is not a listed version (listed: {', '.join(versions)})"
            f"{_did_you_mean(wanted, versions)}",
        )

    flags = {}
    for key in ("allow_warnings", "warm_start"):
        value = entry.get(key, False)
        value = False if value is None else value
        if not isinstance(value, bool):
            raise DesiredStateError(f"{prefix}.{key}", f"must be true or false, got {value!r}")
        flags[key] = value

    return StreamTarget(
        name=name,
        version=wanted,
        allow_warnings=flags["allow_warnings"],
        warm_start=flags["warm_start"],
        probation=_parse_probation(entry.get("probation"), f"{prefix}.probation"),
        transition=transitions[wanted],
        spec=specs[wanted],
        versions=tuple(specs),
        _specs=specs,
        _transitions=transitions,
    )


def _parse_version(
    stream: str, version: str, overrides: Any, base: Mapping[str, Any], vfield: str
) -> tuple[str, StreamSpec]:
    """Validate one entry of ``versions``; return its transition and full spec."""
    overrides = _mapping(overrides, vfield)
    _check_keys(overrides, _VERSION_KEYS, vfield)
    transition = overrides.get("transition")
    if transition is None:
        transition = IN_PLACE
    if transition not in TRANSITIONS:
        raise DesiredStateError(
            f"{vfield}.transition", f"must be one of {', '.join(TRANSITIONS)}, got {transition!r}"
        )
    spec_name = overrides.get("name", stream)
    if "name" in overrides and transition != PARALLEL:
        raise DesiredStateError(
            f"{vfield}.name",
            "a version may set its own stream name only with 'transition: parallel' "
            f"(an in-place version always runs as {stream!r})",
        )
    if transition == PARALLEL and spec_name == stream:
        raise DesiredStateError(
            f"{vfield}.name",
            f"a parallel version runs side by side with the current one, so it needs its own stream "
            f"name (its own control dir), different from {stream!r}",
        )
    fields = {k: v for k, v in overrides.items() if k not in ("transition", "name")}
    merged = {**_merge(base, fields), "name": spec_name, "version": version}
    try:
        spec = StreamSpec.from_dict(merged)
    except SpecError as exc:
        raise _prefixed(exc, vfield) from None
    return transition, spec


def _check_parallel_versions(
    stream: str, specs: Mapping[str, StreamSpec], transitions: Mapping[str, str], base: Mapping[str, Any]
) -> None:
    """A parallel version's checkpoint must not be (or nest with) the in-place one."""
    in_place: list[tuple[str, str]] = [
        (f"version {v!r}", specs[v].checkpoint_location) for v in specs if transitions[v] == IN_PLACE
    ]
    shared = base.get("checkpoint_location")
    if isinstance(shared, str):
        try:
            _check_location(shared, "checkpoint_location")
            in_place.append(("the stream's shared spec", shared))
        except SpecError:
            pass  # only used by versions that override it (and were validated)
    for version, spec in specs.items():
        if transitions[version] != PARALLEL:
            continue
        for origin, location in in_place:
            if _overlaps(spec.checkpoint_location, location):
                raise DesiredStateError(
                    f"streams.{stream}.versions.{version}.checkpoint_location",
                    f"a parallel version needs its own checkpoint, but {spec.checkpoint_location!r} "
                    f"is equal to or nested with the in-place checkpoint {location!r} ({origin})",
                )


def _parse_probation(value: Any, pfield: str) -> Probation:
    data = _mapping(value, pfield)
    _check_keys(data, _PROBATION_KEYS, pfield)
    default = Probation()
    min_batches = data.get("min_batches")
    if min_batches is None:
        min_batches = default.min_batches
    if isinstance(min_batches, bool) or not isinstance(min_batches, int) or min_batches < 1:
        raise DesiredStateError(
            f"{pfield}.min_batches", f"must be a positive integer (batches), got {min_batches!r}"
        )
    window = data.get("window")
    if window is None:
        window_s = default.window_s
    else:
        try:
            window_s = parse_duration(window, f"{pfield}.window")
        except SpecError as exc:
            raise DesiredStateError(exc.field, exc.message) from None
        if window_s <= 0:
            raise DesiredStateError(f"{pfield}.window", f"must be a positive duration, got {window!r}")
    return Probation(min_batches=min_batches, window_s=window_s)
