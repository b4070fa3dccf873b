"""Which streams the UI shows, and everything it reads about one of them (the I/O half of the UI).

Streams come from the deployment's own knowledge, in this order:

1. the desired-state file (``[airflow_streaming] desired_state_file`` or ``AIRFLOW_STREAMING_DESIRED_STATE``):
   every listed stream, with its wanted version;
2. control locations (``[airflow_streaming] control_locations``, comma separated): every sub-directory
   holding a stream's control files (``status.json``, ``driver.json``, ``deployed.json``,
   ``lifecycle.json`` or ``history.json``) that the file did not list already.

The page reads **files only**: its handlers run on every refresh of every open page, so they never ask
a cluster manager (a standalone master, a YARN ResourceManager, a Kubernetes API server), least of all
one that a control file names (``driver.json``'s handle is written beside the driver). A driver on a
cluster is judged from its control files - the lease it renews and its status heartbeat - through
:class:`PageHook`; the supervisor and the operators, which act, ask the cluster (with the endpoints
from the spec and Airflow's connections).

Reading goes through the existing readers (:class:`~airflow_streaming.hooks.streaming_job.SparkStreamHook`,
:func:`~airflow_streaming.lifecycle.runner.read_history`, :func:`~airflow_streaming.lifecycle.ledger_file.load_ledger`,
:func:`~airflow_streaming.compat.last_report.read_last_report`). Nothing here raises because of a bad
file: each part that cannot be read is recorded in :attr:`StreamSnapshot.errors` with the reader's
own message, and the rest is still shown.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming import config
from airflow_streaming.control.contract import json_object_or_none, parse_json_object
from airflow_streaming.control.seal import is_sealed_by
from airflow_streaming.sealing import deployer_of, seal_key
from airflow_streaming.spec import BUNDLED_JOBS, StreamSpec, _check_segment
from airflow_streaming.targets.base import DriverState, DriverTarget, Liveness

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
    deployed_by: str | None = None
    """The lifecycle owner (``<dag_id>.<task_id> run <run_id> try <n>``) of the task that deployed the
    stream, from ``deployed.json``'s sealed ``deployed_by``; ``None`` when unknown (see ``ui.access``)."""


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


def _deployer_in(raw: bytes | None, name: str, control: str, key: bytes | None = None) -> str | None:
    """Who deployed stream ``name`` (control directory ``control``): only the ``deployed_by`` bound by the
    seal of ``deployed.json``'s spec for this stream and directory, never a field beside it."""
    try:
        return deployer_of(json_object_or_none(raw), name, control, key)
    except ValueError:
        return None


def _spec_from_dir(name: str, location: str, read: Callable[[str], bytes | None],
                   key: bytes | None = None) -> tuple[StreamSpec, bool, str | None]:
    """The stream's deployed spec, or a stand-in built from its driver record / status, with why.
    ``key``: the seal key (:func:`seal_key`), read once by a caller that looks at many streams."""
    note = None
    try:
        raw = read("deployed.json")
        if raw is not None:
            stored = parse_json_object("deployed.json", raw)["spec"]
            if is_sealed_by(stored, key or seal_key(), stream=name, control=_stand_in(name, location).control_dir):
                return StreamSpec.from_dict(stored), True, None
            # Not sealed by this deployment: a driver may have written it. Its cluster settings (where to
            # send credentials, which API server to ask) are not used; the stream is read from its files.
            note = ("deployed.json's spec is not sealed by this Airflow deployment for this stream: shown without "
                    "asking its cluster")
            app, ckpt = stored.get("application"), stored.get("checkpoint_location")
            return _stand_in(name, location, app if isinstance(app, str) else None,
                             ckpt if isinstance(ckpt, str) else None), False, note
    except Exception as exc:  # noqa: BLE001 - any garbage: fall back, say why
        note = f"deployed.json unreadable ({type(exc).__name__}: {exc})"
    for fname in ("driver.json", "status.json"):
        try:
            doc = json_object_or_none(read(fname))
        except Exception:  # noqa: BLE001
            continue
        if doc is not None:
            app, ckpt = doc.get("application"), doc.get("checkpoint_location")
            return _stand_in(name, location, app if isinstance(app, str) else None,
                             ckpt if isinstance(ckpt, str) else None), False, note
    return _stand_in(name, location), False, note or "no deployed spec recorded"


def _read_once(read: Callable[[str], bytes | None]) -> Callable[[str], bytes | None]:
    """``read`` remembering each file's bytes (deployed.json is read for the spec and for its deployer)."""
    cache: dict[str, bytes | None] = {}

    def cached(name: str) -> bytes | None:
        if name not in cache:
            cache[name] = read(name)
        return cache[name]

    return cached


def _quietly(read: Callable[[str], bytes | None], name: str) -> bytes | None:
    try:
        return read(name)
    except Exception:  # noqa: BLE001 - the spec reader already reported it
        return None


def discover(desired_state: str | None, control_locations: Iterable[str]) -> Discovery:
    """Find the managed streams (see the module docstring). Never raises on a bad file or location."""
    from airflow_streaming.control.locations import storage_for

    found = Discovery()
    seen: set[str] = set()
    try:
        key: bytes | None = seal_key()  # once, not once per stream (a thousand streams: 0.3 s)
    except Exception:  # noqa: BLE001 - each stream's check raises it again and says so
        key = None
    if desired_state:
        try:
            from airflow_streaming.lifecycle.desired_state import load_desired_state

            state = load_desired_state(desired_state)
        except Exception as exc:  # noqa: BLE001 - the page shows the error
            found.errors.append(f"desired-state file {desired_state}: {exc}")
        else:
            for name, target in state.streams.items():
                spec, known, note, deployer = target.spec, True, None, None
                try:
                    from airflow_streaming.lifecycle.operations import deployment

                    hook = deployment(target)[1]
                    spec = hook.spec
                    deployer = _deployer_in(hook.storage.read_bytes(hook.deployed_path), spec.name, spec.control_dir,
                                            key)
                except Exception as exc:  # noqa: BLE001 - unreadable deployed.json: read with the wanted spec
                    note = f"deployed spec unreadable: {exc}"
                found.streams.append(StreamRef(name=spec.name, spec=spec, source="desired_state",
                                               wanted_version=target.version, versions=tuple(target.versions),
                                               spec_known=known, note=note, deployed_by=deployer))
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
            try:
                _check_segment(name, "name")
            except ValueError:
                if len(found.errors) < 50:
                    found.errors.append(f"{base[:300]}: not a stream's control directory (its name is not a valid "
                                        "stream name); skipped")
                continue
            read = _read_once(lambda f, b=base, st=storage: st.read_bytes(f"{b}/{f}"))
            spec, known, note = _spec_from_dir(name, location, read, key)
            found.streams.append(StreamRef(name=name, spec=spec, source="control_location", spec_known=known,
                                           note=note, deployed_by=_deployer_in(
                                               _quietly(read, "deployed.json"), name,
                                               _stand_in(name, location).control_dir, key)))
            seen.add(name)
    return found


def _part(snapshot: StreamSnapshot, what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - ControlFileError, StorageError, or anything unexpected
        snapshot.errors[what] = str(exc) or type(exc).__name__
        return None


class NotAskedTarget(DriverTarget):
    """A cluster target the Streams page does not ask: its drivers are UNKNOWN to the target (never GONE),
    so liveness and health come from the control files (lease, heartbeat, the run's exit)."""

    def __init__(self, storage: Any, paths: Any, kind: str):
        super().__init__(storage, paths, {})
        self.kind = kind

    def submit(self, plan: Any) -> dict[str, Any]:
        raise RuntimeError("the Streams page never submits a driver")

    def find(self, run_id: str, record: Any = None) -> list[str]:
        return []

    def state(self, record: Any) -> DriverState:
        return DriverState(Liveness.UNKNOWN, f"the {record.target} cluster manager is not asked by the Streams "
                                             "page (it reads control files only: lease and heartbeat)")

    def kill(self, record: Any, grace: float) -> str:
        return "the Streams page never kills a driver"


def page_hook(spec: StreamSpec) -> Any:
    """The hook the page reads a stream with: a :class:`SparkStreamHook` that makes no network call
    beyond the control storage (see the module docstring). A driver on this host (local and client
    mode) is still checked by its process, which needs no network."""
    from airflow_streaming.hooks.streaming_job import SparkStreamHook

    class PageHook(SparkStreamHook):
        @property
        def target(self) -> DriverTarget:
            if self._target is None:
                from airflow_streaming.targets import target_kind

                try:
                    kind = target_kind(self.spec.master, self.spec.deploy_mode)
                except ValueError:
                    kind = "unknown"
                self._target = (super().target if kind == "local" and self.spec.master is not None
                                else NotAskedTarget(self.storage, self.paths, kind))
            return self._target

        def target_of(self, record: Any) -> DriverTarget:
            if record.target == "local":
                from airflow_streaming.targets.local import LocalTarget

                return LocalTarget(self.storage, self.paths, {})
            return NotAskedTarget(self.storage, self.paths, record.target)

        def cluster_app_state(self, app_id: str | None) -> Any:
            return None  # the standalone master's JSON: a network call, not made by the page

    return PageHook(spec)


def read_stream(ref: StreamRef, now: float | None = None) -> StreamSnapshot:
    """Read everything the UI shows about ``ref``; every unreadable part lands in ``errors``."""
    import dataclasses

    from airflow_streaming.compat.last_report import read_last_report
    from airflow_streaming.control.contract import StatusDocument
    from airflow_streaming.lifecycle.runner import read_history
    from airflow_streaming.lifecycle.observe import next_step
    from airflow_streaming.lifecycle.ledger_file import load_ledger

    snap = StreamSnapshot(ref=ref, read_at=time.time() if now is None else now)
    hook = page_hook(ref.spec)

    def status() -> dict[str, Any] | None:
        raw = hook.storage.read_bytes(hook.paths.status)
        if raw is None:
            return None
        doc = parse_json_object(hook.paths.status, raw)
        StatusDocument.from_dict(hook.paths.status, doc)  # validates: ControlFileError on garbage
        return doc

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
