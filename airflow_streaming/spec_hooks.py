"""One hook per watched spec in the triggerer, reused across polls and across triggers of the same stream.

A triggerer may watch a thousand streams, each polled every few seconds. Building a
:class:`~airflow_streaming.hooks.streaming_job.SparkStreamHook` validates the whole spec and resolves its
storage on every call; a poll then costs more than the file reads it exists for. :func:`hook_for` keeps
the hook of each spec (keyed by the spec's canonical JSON, so two triggers of the same stream share it)
for :data:`REUSE_SECONDS`: a Spark connection changed in Airflow (read when a spec sets no master) is
picked up within that time. A hook holds no open file or connection, and its reads are thread-safe (each
poll runs in a worker thread of the triggerer's loop).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

#: How long a hook is reused for the same spec.
REUSE_SECONDS = 300.0
#: At most this many hooks are kept (oldest dropped first); far above one triggerer's capacity.
MAX_HOOKS = 4096

_hooks: dict[str, tuple[float, Any]] = {}
#: ``id(spec dict)`` -> ``(that dict, its key)``: a trigger hands the same dict at every poll, so its canonical
#: JSON (~50 us) is made once. The dict itself is kept (its id cannot be reused while it is) and compared by
#: identity; a spec dict must not be changed once handed here (the triggers never change theirs).
_keys: dict[int, tuple[dict[str, Any], str]] = {}
_mutex = threading.Lock()


def _key(spec: dict[str, Any]) -> str:
    known = _keys.get(id(spec))
    if known is not None and known[0] is spec:
        return known[1]
    key = json.dumps(spec, sort_keys=True, default=str)
    with _mutex:
        if len(_keys) >= 2 * MAX_HOOKS:
            _keys.clear()
        _keys[id(spec)] = (spec, key)
    return key


def hook_for(spec: dict[str, Any]) -> Any:
    """The :class:`SparkStreamHook` of ``spec`` (a stream spec as a JSON-safe dict), built at most once per
    :data:`REUSE_SECONDS`. Raises what ``StreamSpec.from_dict`` raises for a bad spec (never cached)."""
    key = _key(spec)
    now = time.monotonic()
    with _mutex:
        entry = _hooks.get(key)
    if entry is not None and now - entry[0] < REUSE_SECONDS:
        return entry[1]
    # Imported on a miss only: an import statement in a function costs ~1 us at every call (a triggerer polls a
    # thousand streams every few seconds), and these modules are Airflow's side of the package.
    from airflow_streaming.hooks.streaming_job import SparkStreamHook
    from airflow_streaming.spec import StreamSpec

    hook = SparkStreamHook(StreamSpec.from_dict(spec))
    with _mutex:
        _hooks.pop(key, None)
        while len(_hooks) >= MAX_HOOKS:
            del _hooks[next(iter(_hooks))]  # insertion order: the oldest first
        _hooks[key] = (now, hook)
    return hook


def forget_all() -> None:
    """Drop every kept hook (tests)."""
    with _mutex:
        _hooks.clear()
        _keys.clear()
