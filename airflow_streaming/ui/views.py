"""Shape what was read about a stream into the JSON the UI shows (pure functions, no I/O, no Airflow).

Every value that leaves here went through :func:`mask`: private ``spark_conf`` entries (every key not
known as a public Spark setting, :mod:`airflow_streaming.public_conf`) and keys that name secrets are replaced by
``***``, and every string is scrubbed of the spec's secret values and of ``key=value`` secrets, URL
user info and bearer tokens (:func:`airflow_streaming.notifications.events.redact`). Specs are shown
as a summary (:func:`spec_view`), never as the raw deployed document.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from airflow_streaming.notifications.events import redact
from airflow_streaming.redaction import (
    MASK,
    is_sensitive_key,
    mask_args,
    mask_conf,
    scrub,
    secret_arguments,
    secret_values,
)
from airflow_streaming.spark_runtime import describe
from airflow_streaming.task_owner import parse_task_owner
from airflow_streaming.ui.streams import StreamSnapshot

#: Health states by how much attention they need (higher first when sorting).
SEVERITY = {"FAILED": 3, "STALLED": 2, "FALLING_BEHIND": 2, "UNKNOWN": 1, "HEALTHY": 0, "IDLE": 0, "STOPPED": 0}
#: Lifecycle outcomes that need a person.
ALARMING_STEPS = frozenset({"ROLLBACK_FAILED", "FAILED"})
#: Window in which supervisor restarts are counted (the default restart policy's validity interval).
RESTART_WINDOW_S = 3600.0


# ------------------------------------------------------------------ secrets
def spec_secrets(spec: Mapping[str, Any] | None) -> list[str]:
    """Secret values of a spec dict: private ``spark_conf`` values (the same rule as the command line:
    :func:`~airflow_streaming.redaction.is_secret_conf_entry`) and application arguments that hold a secret."""
    if not isinstance(spec, Mapping):
        return []
    conf = spec.get("spark_conf") or {}
    found = secret_values(conf) if isinstance(conf, Mapping) else []
    args = [str(a) for a in spec.get("application_args") or []]
    for i in secret_arguments(args):
        key, eq, value = args[i].partition("=")
        found.append(value if eq and key.startswith("-") else args[i])
    return [s for s in found if s and s != MASK]


def mask(value: Any, secrets: Iterable[str] = ()) -> Any:
    """``value`` with secrets removed: sensitive keys' values -> ``***``, strings scrubbed (recursively)."""
    secrets = list(secrets)

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return redact(scrub(v, secrets))
        if isinstance(v, Mapping):
            return {k: MASK if isinstance(k, str) and is_sensitive_key(k) and val not in (None, "") else walk(val)
                    for k, val in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        return v

    return walk(value)


def spec_view(spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The parts of a spec a person watching the stream needs, secrets masked."""
    if not isinstance(spec, Mapping):
        return None
    secrets = spec_secrets(spec)
    keys = ("name", "version", "application", "master", "deploy_mode", "trigger_interval", "heartbeat_interval",
            "stop_timeout", "startup_timeout", "checkpoint_location", "control_location", "conn_id", "health",
            # what travels with the job (SparkSubmitOperator's names: docs/job-dependencies.md)
            "py_files", "files", "archives", "jars", "packages", "exclude_packages", "repositories", "driver_memory",
            "executor_memory", "executor_cores", "num_executors", "total_executor_cores", "queue", "properties_file")
    view = {k: spec.get(k) for k in keys if spec.get(k) not in (None, "", {}, [])}
    env_vars = spec.get("env_vars")
    if isinstance(env_vars, Mapping) and env_vars:  # names only: a value may be a secret
        view["env_vars"] = ", ".join(sorted(str(k) for k in env_vars)) + " (values not shown)"
    view["application_args"] = mask_args(spec.get("application_args") or [])
    conf = spec.get("spark_conf")
    view["spark_conf"] = mask_conf(conf) if isinstance(conf, Mapping) else {}  # private unless known public
    if spec.get("cluster"):
        view["cluster"] = spec.get("cluster")
    view["spark_runtime"] = describe(spec.get("spark_runtime"))
    return mask(view, secrets)


def assets_view(spec: Mapping[str, Any] | None) -> dict[str, list[dict[str, Any]]] | None:
    """The Airflow Assets a spec declares (``assets``: :mod:`airflow_streaming.stream_assets`), as
    ``{"sources": [{"uri": ...}], "sinks": [...]}``; ``None`` when it declares none. The API adds each one's
    ``url`` (Airflow's own asset page) when Airflow knows the Asset."""
    assets = spec.get("assets") if isinstance(spec, Mapping) else None
    if not isinstance(assets, Mapping):
        return None
    view = {kind: [{"uri": uri} for uri in assets.get(kind) or [] if isinstance(uri, str)]
            for kind in ("sources", "sinks")}
    return view if any(view.values()) else None


def asset_uris(detail: Mapping[str, Any]) -> list[str]:
    """Every Asset URI a stream's detail (:func:`stream_detail`) shows."""
    assets = detail.get("assets") or {}
    return sorted({a["uri"] for kind in ("sources", "sinks") for a in assets.get(kind) or []})


def link_assets(detail: dict[str, Any], pages: Mapping[str, str]) -> None:
    """Give each Asset of ``detail`` the ``url`` of its Airflow page, from ``pages`` (URI -> URL)."""
    for kind in ("sources", "sinks"):
        for asset in (detail.get("assets") or {}).get(kind) or []:
            asset["url"] = pages.get(asset["uri"])


# ------------------------------------------------------------------ links
def http_url(value: Any) -> str | None:
    """``value`` if it is an absolute ``http://`` or ``https://`` URL with a host (and no whitespace or
    control character), else ``None``. Only such URLs from status documents and XComs become links: a
    ``javascript:`` or ``data:`` URL written by a driver would run in the viewer's Airflow session."""
    if not isinstance(value, str) or len(value) > 2048 or any(ord(c) <= 32 or ord(c) == 127 for c in value):
        return None
    try:
        parsed = urlsplit(value)
    except ValueError:
        return None
    return value if parsed.scheme.lower() in ("http", "https") and parsed.hostname else None


# ------------------------------------------------------------------ progress
def ts_ms(value: Any) -> float | None:
    """Epoch milliseconds of an ISO timestamp (Spark's ``2026-11-22T02:51:34.123Z``); ``None`` if absent,
    unparsable or the epoch itself (Spark's "no watermark yet")."""
    if not isinstance(value, str) or not value:
        return None
    try:
        ms = datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000
    except ValueError:
        return None
    return ms if ms > 0 else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def progress_point(progress: Mapping[str, Any], query: str | None) -> dict[str, Any] | None:
    """One chart point from a ``StreamingQueryProgress`` JSON object (``None`` without a timestamp)."""
    t = ts_ms(progress.get("timestamp"))
    if t is None:
        return None
    durations = {k: _num(v) for k, v in (progress.get("durationMs") or {}).items() if _num(v) is not None}
    event_time = progress.get("eventTime") or {}
    watermark = ts_ms(event_time.get("watermark"))
    event_max = ts_ms(event_time.get("max"))
    behind = [_num((s.get("metrics") or {}).get("maxOffsetsBehindLatest")) for s in progress.get("sources") or []
              if isinstance(s, Mapping)]
    behind = [b for b in behind if b is not None]
    state = []
    for i, op in enumerate(progress.get("stateOperators") or []):
        if isinstance(op, Mapping):
            state.append({"op": f"{i}:{op.get('operatorName') or 'state'}", "rows": _num(op.get("numRowsTotal")),
                          "memory": _num(op.get("memoryUsedBytes")),
                          "dropped": _num(op.get("numRowsDroppedByWatermark"))})
    return {
        "t": t, "query": query, "batch": progress.get("batchId"), "rows": _num(progress.get("numInputRows")),
        "input_rps": _num(progress.get("inputRowsPerSecond")),
        "processed_rps": _num(progress.get("processedRowsPerSecond")),
        "duration_ms": durations.get("triggerExecution"), "durations": durations,
        "watermark": watermark, "event_max": event_max,
        "watermark_lag_s": round((t - watermark) / 1000, 3) if watermark else None,
        "event_lag_s": round((t - event_max) / 1000, 3) if event_max else None,
        "offsets_behind": max(behind) if behind else None,
        "output_rows": out if (out := _num((progress.get("sink") or {}).get("numOutputRows"))) is None or out >= 0
        else None,  # Spark reports -1 when the sink cannot count (foreachBatch)
        "state": state,
    }


def progress_points(status: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Every query's ``recent_progress`` as chart points, oldest first."""
    points = []
    for query in (status or {}).get("queries") or []:
        if not isinstance(query, Mapping):
            continue
        name = query.get("name") or query.get("id")
        for progress in query.get("recent_progress") or []:
            if isinstance(progress, Mapping) and (point := progress_point(progress, name)) is not None:
                points.append(point)
    return sorted(points, key=lambda p: (p["t"], p["batch"] if isinstance(p["batch"], int) else -1))


def current_lag(points: list[dict[str, Any]], live: bool = True) -> dict[str, Any] | None:
    """How far behind the stream is, from its last batch: Kafka offsets behind latest when a source
    reports them, else event-time lag (batch time - newest event time), else watermark lag.

    ``None`` when the stream does not run (``live`` false): the last batch of a stopped run says how far
    behind it was then, not now (a stopped stream's watermark lag only grows with the calendar). A
    negative time lag - events stamped after the batch started, as a rate source or a producer whose clock
    runs ahead does - is shown as 0 with a ``note``, never as "-2.9s"."""
    if not points or not live:
        return None
    last = points[-1]
    if last.get("offsets_behind") is not None:
        return {"kind": "offsets", "value": last["offsets_behind"], "label": f"{last['offsets_behind']:.0f} offsets"}
    for key, kind in (("event_lag_s", "event_time"), ("watermark_lag_s", "watermark")):
        if last.get(key) is not None:
            value = max(0.0, last[key])
            lag = {"kind": kind, "value": value, "label": f"{value:.1f}s ({kind.replace('_', ' ')})"}
            if last[key] < 0:
                lag["note"] = (f"the newest {kind.replace('_', ' ')} is {-last[key]:.1f}s after the batch started "
                               "(events stamped ahead of the driver's clock): caught up, shown as 0")
            return lag
    return None


# ------------------------------------------------------------------ lifecycle and supervision
def parse_owner(owner: Any) -> dict[str, Any] | None:
    """``{"dag_task", "run_id", "try", "map_index", "candidates": [(dag_id, task_id), ...]}`` from a lifecycle
    owner (``<dag_id>.<task_id>[<map index>] run <run_id> try <n>``, the map index only for a mapped task);
    ``None`` for other owners (a supervisor pid, say). Dag and task ids may contain dots, so every split is a
    candidate: the API keeps the one whose DAG run exists."""
    if (parsed := parse_task_owner(owner)) is None:
        return None
    dag_task = parsed.dag_task
    candidates = [(dag_task[:i], dag_task[i + 1:]) for i, c in enumerate(dag_task) if c == "." and 0 < i < len(dag_task) - 1]
    if not candidates:
        return None
    return {"dag_task": dag_task, "run_id": parsed.run_id, "try": parsed.try_number, "map_index": parsed.map_index,
            "candidates": candidates}


def owners_of(snap: StreamSnapshot) -> list[str]:
    """Every lifecycle owner recorded for the stream (newest first, unique)."""
    owners = [(snap.lifecycle or {}).get("owner"), (snap.compat or {}).get("owner")]
    owners += [h.get("owner") for h in reversed(snap.history)]
    seen: list[str] = []
    for o in owners:
        if isinstance(o, str) and o not in seen:
            seen.append(o)
    return seen


def _action(entry: Mapping[str, Any], secrets: list[str], steps: list[Mapping[str, Any]] | None = None,
            running: bool = False) -> dict[str, Any]:
    error = entry.get("error")
    return mask({
        "id": entry.get("id"), "action": entry.get("action"), "outcome": entry.get("outcome") or entry.get("step"),
        "from_version": entry.get("from_version"), "to_version": entry.get("to_version"),
        "from_runtime": entry.get("from_runtime"), "to_runtime": entry.get("to_runtime"),
        "start": (_num(entry.get("started_at") or entry.get("created_at")) or 0) * 1000 or None,
        "end": None if running else (_num(entry.get("ended_at") or entry.get("updated_at")) or 0) * 1000 or None,
        "verdict": entry.get("verdict"), "error": str(error)[:2000] if error else None,
        "owner": entry.get("owner"), "running": running,
        "last_batch_before": entry.get("last_batch_before", entry.get("stop_batch")),
        "first_batch_after": entry.get("first_batch_after", entry.get("first_new_batch")),
        "steps": [{"step": s.get("step"), "at": (_num(s.get("at")) or 0) * 1000 or None, "detail": s.get("detail")}
                  for s in steps or [] if isinstance(s, Mapping)],
    }, secrets)


def lifecycle_actions(history: list[Mapping[str, Any]], record: Mapping[str, Any] | None,
                      secrets: list[str]) -> list[dict[str, Any]]:
    """Finished actions from ``history.json`` plus the current/last record (with its steps), oldest first."""
    actions = {}
    for entry in history:
        if isinstance(entry, Mapping):
            actions[entry.get("id")] = _action(entry, secrets)
    if isinstance(record, Mapping) and record.get("id"):
        to_spec, from_spec = record.get("to_spec") or {}, record.get("from_spec") or {}
        running = record.get("step") not in {"SUCCEEDED", "REFUSED", "ROLLED_BACK", "FAILED", "ROLLBACK_FAILED"}
        flat = {**record, "outcome": record.get("step"), "to_version": to_spec.get("version"),
                "from_version": from_spec.get("version"), "to_runtime": describe(to_spec.get("spark_runtime")),
                "from_runtime": describe(from_spec.get("spark_runtime")) if from_spec else None}
        actions[record["id"]] = _action(flat, secrets, record.get("steps"), running)
    return sorted(actions.values(), key=lambda a: a["start"] or 0)


def supervisor_view(ledger: Mapping[str, Any] | None, now: float, window_s: float = RESTART_WINDOW_S) -> dict[str, Any] | None:
    """Restarts in the window, gave-up state and the last error class from the restart ledger."""
    if not isinstance(ledger, Mapping):
        return None
    failures = [f for f in (_num(x) for x in ledger.get("failures") or []) if f is not None]
    classes = [c for c in ledger.get("error_classes") or [] if c]
    return {"restarts_in_window": sum(1 for f in failures if now - f <= window_s), "window_s": window_s,
            "restarts_total": len(failures), "gave_up": bool(ledger.get("gave_up")),
            "last_failure": max(failures) * 1000 if failures else None,
            "last_error_class": classes[-1] if classes else None,
            "healthy_since": (_num(ledger.get("healthy_since")) or 0) * 1000 or None}


def compat_view(doc: Mapping[str, Any] | None, secrets: list[str]) -> dict[str, Any] | None:
    """The last compatibility report: verdict, findings (rule, severity, message, both sides), dry run."""
    if not isinstance(doc, Mapping):
        return None
    report = doc.get("report") or {}
    return mask({"at": (_num(doc.get("at")) or 0) * 1000 or None, "action_id": doc.get("action_id"),
                 "owner": doc.get("owner"), "candidate_version": doc.get("candidate_version"),
                 "candidate_application": doc.get("candidate_application"), "verdict": report.get("verdict"),
                 "findings": report.get("findings") or [], "dry_run": report.get("dry_run"),
                 "checkpoint": report.get("checkpoint_location") or report.get("checkpoint")}, secrets)


# ------------------------------------------------------------------ the two pages
def _secrets_of(snap: StreamSnapshot) -> list[str]:
    specs = [(snap.deployed or {}).get("spec"), snap.ref.spec.to_dict(), (snap.lifecycle or {}).get("to_spec"),
             (snap.lifecycle or {}).get("from_spec")] + [h.get("from_spec") for h in snap.history]
    return sorted({s for spec in specs for s in spec_secrets(spec)})


def overview_row(snap: StreamSnapshot) -> dict[str, Any]:
    """One row of the streams overview (see ``docs/ui.md`` for the fields)."""
    secrets = _secrets_of(snap)
    status = snap.status or {}
    health = snap.health or {"state": "UNKNOWN", "reasons": [{"message": snap.errors.get("health", "not readable")}]}
    points = progress_points(status)
    last = points[-1] if points else None
    deployed_version = ((snap.deployed or {}).get("spec") or {}).get("version")
    version = status.get("version") if status.get("state") in ("RUNNING", "STARTING", "STOPPING") else None
    version = version or deployed_version or status.get("version")
    record = snap.lifecycle
    actions = lifecycle_actions([], record, secrets) if record else []
    last_action = actions[-1] if actions else (lifecycle_actions(snap.history[-1:], None, secrets) or [None])[-1]
    supervisor = supervisor_view(snap.ledger, snap.read_at)
    state = health.get("state", "UNKNOWN")
    severity = SEVERITY.get(state, 1)
    if (last_action or {}).get("outcome") in ALARMING_STEPS or (supervisor or {}).get("gave_up"):
        severity = max(severity, 2)  # a person must look, whatever the driver does now
    # The status document keeps the last state a driver wrote: a killed driver's says RUNNING forever.
    live = status.get("state") in ("RUNNING", "STARTING", "STOPPING") and state not in ("FAILED", "STOPPED")
    driver_state = status.get("state")
    if driver_state in ("RUNNING", "STARTING", "STOPPING") and state == "FAILED":
        driver_state = "GONE"
    reasons = [r.get("message") for r in health.get("reasons") or [] if isinstance(r, Mapping)]
    return mask({
        "name": snap.ref.name, "source": snap.ref.source, "control_dir": snap.ref.spec.control_dir,
        "version": version, "wanted_version": snap.ref.wanted_version,
        "pending": bool(snap.ref.wanted_version and version and snap.ref.wanted_version != version),
        "state": driver_state, "reported_state": status.get("state"), "live": live, "run_id": status.get("run_id"),
        "app_id": status.get("app_id"),
        "health": {"state": state, "reason": reasons[0] if reasons else None, "reasons": reasons,
                   "warnings": [w.get("message") for w in health.get("warnings") or [] if isinstance(w, Mapping)],
                   "metrics": health.get("metrics") or {}},
        "severity": severity,
        "last_batch": {"id": last["batch"], "at": last["t"], "age_s": round(snap.read_at - last["t"] / 1000, 1),
                       "rows": last["rows"]} if last else None,
        "input_rps": last["input_rps"] if last else None, "processed_rps": last["processed_rps"] if last else None,
        "lag": current_lag(points, live),
        "totals": status.get("totals"),
        "last_action": last_action,
        "supervisor": supervisor,
        "next": snap.next,
        "spark_ui": http_url(status.get("spark_ui")) if live else None,
        "heartbeat_age_s": round(snap.read_at - _num(status.get("heartbeat_at")), 1)
        if _num(status.get("heartbeat_at")) else None,
        "errors": dict(snap.errors),
    }, secrets)


def stream_detail(snap: StreamSnapshot) -> dict[str, Any]:
    """The one-stream page: the overview row plus series, lifecycle timeline, compatibility report, spec."""
    secrets = _secrets_of(snap)
    status = snap.status or {}
    spec = (snap.deployed or {}).get("spec") or (snap.ref.spec.to_dict() if snap.ref.spec_known else None)
    points = progress_points(status)
    operators = sorted({s["op"] for p in points for s in p["state"]})
    queries = [{"id": q.get("id"), "name": q.get("name"), "active": q.get("active"),
                "message": (q.get("status") or {}).get("message"), "last_batch_id": q.get("last_batch_id")}
               for q in status.get("queries") or [] if isinstance(q, Mapping)]
    trigger = _num((spec or {}).get("trigger_interval"))
    return {
        **overview_row(snap),
        "trigger_interval_s": trigger,
        "spec": spec_view(spec),
        "assets": mask(assets_view(spec), secrets),
        "versions": list(snap.ref.versions),
        "queries": mask(queries, secrets),
        "points": mask(points, secrets),
        "state_operators": operators,
        "last_exception": mask(status.get("last_exception"), secrets),
        "exit": mask(status.get("exit"), secrets),
        "started_at": (_num(status.get("started_at")) or 0) * 1000 or None,
        "actions": lifecycle_actions(snap.history, snap.lifecycle, secrets),
        "compat": compat_view(snap.compat, secrets),
        "driver": mask({k: (snap.driver or {}).get(k) for k in ("run_id", "target", "host", "log_path", "submitted_at",
                                                                "command")}, secrets) if snap.driver else None,
    }
