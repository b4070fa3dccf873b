"""Which streams the UI shows, and everything it reads about one of them (the I/O half of the UI).

Streams come from the deployment's own knowledge, in this order:

1. the desired-state file (``[airflow_streaming] desired_state_file`` or ``AIRFLOW_STREAMING_DESIRED_STATE``):
   every listed stream, with its wanted version;
2. control locations (``[airflow_streaming] control_locations``, comma separated): every sub-directory
   holding a stream's control files (``status.json``, ``driver.json``, ``deployed.json``,
   ``lifecycle.json`` or ``history.json``) that the file did not list already.

Reading goes through the existing readers (:class:`~airflow_streaming.hooks.streaming_job.StreamingJobHook`,
:func:`~airflow_streaming.lifecycle.runner.read_history`, :func:`~airflow_streaming.supervision.ledger_file.load_ledger`,
:func:`~airflow_streaming.compat.last_report.read_last_report`). Nothing here raises because of a bad
file: each part that cannot be read is recorded in :attr:`StreamSnapshot.errors` with the reader's
own message, and the rest is still shown.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming import config
from airflow_streaming.control.seal import is_sealed_by
from airflow_streaming.sealing import seal_key
from airflow_streaming.spec import BUNDLED_JOBS, StreamSpec

log = logging.getLogger(__name__)

#: Files whose presence makes a directory of a control location a stream's control directory.
CONTROL_FILES = ("status.json", "driver.json", "deployed.json", "lifecycle.json", "history.json")


@dataclass(frozen=True)
class StreamRef:
    """One managed stream as found by :func:`discover`."""

    name: str
    spec: StreamSpec
    """The spec used to read it: the deployed one when known, else the wanted one, else a stand-in."""
    source: str
    """``desired_state`` or ``control_location``."""
    wanted_version: str | None = None
    versions: tuple[str, ...] = ()
    spec_known: bool = True
    """False when no spec could be read and ``spec`` is a stand-in that only locates the control dir."""
    note: str | None = None
    """Why the spec is a stand-in (an unreadable ``deployed.json``, say)."""


@dataclass
class Discovery:
    """The streams found, and what could not be read while looking for them."""

    streams: list[StreamRef] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class StreamSnapshot:
    """Everything read about one stream at one moment (dicts as the files hold them)."""

    ref: StreamRef
    read_at: float
    status: dict[str, Any] | None = None
    health: dict[str, Any] | None = None
    deployed: dict[str, Any] | None = None
    driver: dict[str, Any] | None = None
    lifecycle: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    ledger: dict[str, Any] | None = None
    compat: dict[str, Any] | None = None
    next: dict[str, Any] | None = None
    """What the supervisor's next pass would do (``airflow_streaming.reconcile``): act, reason, event."""
    errors: dict[str, str] = field(default_factory=dict)
    """File (or part) -> the reader's message, for every part that could not be read."""


def configured_sources() -> tuple[str | None, list[str]]:
    """``(desired-state file, control locations)`` from ``[airflow_streaming]`` (airflow.cfg or
    ``AIRFLOW__AIRFLOW_STREAMING__*``) and ``AIRFLOW_STREAMING_DESIRED_STATE``; no file when neither names one."""
    desired = config.get_option("desired_state_file").strip() or os.environ.get(config.DESIRED_STATE_ENV, "").strip()
    return desired or None, config.control_locations()


def _stand_in(name: str, location: str, application: str | None = None, checkpoint: str | None = None) -> StreamSpec:
    """A spec that only locates ``<location>/<name>`` (used when no real spec can be read)."""
    placeholder = sorted(BUNDLED_JOBS)[0]
    for app, ckpt in ((application, checkpoint), (placeholder, None)):
        try:
            return StreamSpec(name=name, application=app or placeholder, control_location=location,
                              checkpoint_location=ckpt or f"/nonexistent-checkpoint/{name}")
        except ValueError:
            continue
    raise AssertionError("unreachable: the stand-in spec is always valid")


def _spec_from_dir(name: str, location: str, read: Callable[[str], bytes | None]) -> tuple[StreamSpec, bool, str | None]:
    """The stream's deployed spec, or a stand-in built from its driver record / status, with why."""
    note = None
    try:
        raw = read("deployed.json")
        if raw is not None:
            stored = json.loads(raw)["spec"]
            if is_sealed_by(stored, seal_key()):
                return StreamSpec.from_dict(stored), True, None
            # Not sealed by this deployment: a driver may have written it. Its cluster settings (where to
            # send credentials, which API server to ask) are not used; the stream is read from its files.
            note = "deployed.json's spec is not sealed by this Airflow deployment: shown without asking its cluster"
            app, ckpt = stored.get("application"), stored.get("checkpoint_location")
            return _stand_in(name, location, app if isinstance(app, str) else None,
                             ckpt if isinstance(ckpt, str) else None), False, note
    except Exception as exc:  # noqa: BLE001 - any garbage: fall back, say why
        note = f"deployed.json unreadable ({type(exc).__name__}: {exc})"
    for fname in ("driver.json", "status.json"):
        try:
            raw = read(fname)
            doc = json.loads(raw) if raw is not None else None
        except Exception:  # noqa: BLE001
            continue
        if isinstance(doc, dict):
            app, ckpt = doc.get("application"), doc.get("checkpoint_location")
            return _stand_in(name, location, app if isinstance(app, str) else None,
                             ckpt if isinstance(ckpt, str) else None), False, note
    return _stand_in(name, location), False, note or "no deployed spec recorded"


def discover(desired_state: str | None, control_locations: Iterable[str]) -> Discovery:
    """Find the managed streams (see the module docstring). Never raises on a bad file or location."""
    from airflow_streaming.control.locations import storage_for

    found = Discovery()
    seen: set[str] = set()
    if desired_state:
        try:
            from airflow_streaming.lifecycle.desired_state import load_desired_state

            state = load_desired_state(desired_state)
        except Exception as exc:  # noqa: BLE001 - the page shows the error
            found.errors.append(f"desired-state file {desired_state}: {exc}")
        else:
            for name, target in state.streams.items():
                spec, known, note = target.spec, True, None
                try:
                    from airflow_streaming.lifecycle.operations import deployment

                    spec = deployment(target)[1].spec
                except Exception as exc:  # noqa: BLE001 - unreadable deployed.json: read with the wanted spec
                    note = f"deployed spec unreadable: {exc}"
                found.streams.append(StreamRef(name=spec.name, spec=spec, source="desired_state",
                                               wanted_version=target.version, versions=tuple(target.versions),
                                               spec_known=known, note=note))
                seen.update({name, spec.name})
    for location in control_locations:
        try:
            storage, root = storage_for(location)
            names = storage.list_dir(root)
        except Exception as exc:  # noqa: BLE001
            found.errors.append(f"control location {location}: {exc}")
            continue
        for name in names:
            if name in seen or name.startswith("."):
                continue
            base = f"{root.rstrip('/')}/{name}"
            try:
                if not any(storage.exists(f"{base}/{f}") for f in CONTROL_FILES):
                    continue
            except Exception as exc:  # noqa: BLE001
                found.errors.append(f"{base}: {exc}")
                continue
            spec, known, note = _spec_from_dir(name, location, lambda f, b=base, st=storage: st.read_bytes(f"{b}/{f}"))
            found.streams.append(StreamRef(name=name, spec=spec, source="control_location", spec_known=known,
                                           note=note))
            seen.add(name)
    return found


def _part(snapshot: StreamSnapshot, what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - ControlFileError, StorageError, or anything unexpected
        snapshot.errors[what] = str(exc) or type(exc).__name__
        return None


def read_stream(ref: StreamRef, now: float | None = None) -> StreamSnapshot:
    """Read everything the UI shows about ``ref``; every unreadable part lands in ``errors``."""
    import dataclasses

    from airflow_streaming.compat.last_report import read_last_report
    from airflow_streaming.control.contract import StatusDocument
    from airflow_streaming.hooks.streaming_job import StreamingJobHook
    from airflow_streaming.lifecycle.runner import read_history
    from airflow_streaming.reconcile.observe import next_step
    from airflow_streaming.supervision.ledger_file import load_ledger

    snap = StreamSnapshot(ref=ref, read_at=time.time() if now is None else now)
    hook = StreamingJobHook(ref.spec)

    def status() -> dict[str, Any] | None:
        raw = hook.storage.read_bytes(hook.paths.status)
        if raw is None:
            return None
        StatusDocument.from_json(hook.paths.status, raw)  # validates: ControlFileError on garbage
        return json.loads(raw)

    snap.status = _part(snap, "status.json", status)
    snap.health = _part(snap, "health", lambda: hook.health(now=snap.read_at).to_dict())
    snap.deployed = _part(snap, "deployed.json", hook.deployed)
    record = _part(snap, "driver.json", hook.driver_record)
    snap.driver = dataclasses.asdict(record) if record is not None else None
    snap.lifecycle = _part(snap, "lifecycle.json", hook.lifecycle_record)
    snap.history = _part(snap, "history.json", lambda: read_history(hook)) or []
    if _part(snap, "supervisor.json", lambda: hook.storage.exists(f"{hook.paths.root}/supervisor.json")):
        ledger = _part(snap, "supervisor.json", lambda: load_ledger(hook))
        snap.ledger = ledger.to_dict() if ledger is not None else None
    snap.compat = _part(snap, "compat.json", lambda: read_last_report(hook.storage, hook.paths.root))
    snap.next = _part(snap, "next", lambda: next_step(hook))
    if not ref.spec_known and ref.note:
        snap.errors.setdefault("spec", ref.note)
    elif ref.note:
        snap.errors.setdefault("deployed.json", ref.note)
    return snap
