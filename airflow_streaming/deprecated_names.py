"""Old public names kept as aliases that warn (Airflow side).

Every public operator, sensor, trigger and hook is named ``SparkStream...``. The names before that
(``StreamingJobHook``, ``StreamingHealthSensor``, ``StreamingHealthTrigger``, ``LifecycleWaitTrigger``) still
import from their modules, with an ``AirflowProviderDeprecationWarning``; a trigger stored under its old
classpath by a task deferred before an upgrade of the provider still loads (the triggerer imports the
classpath) and serializes itself under the new one.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["RENAMED", "module_getattr"]

#: old name -> new name, for every renamed public class.
RENAMED = {
    "StreamingJobHook": "SparkStreamHook",
    "StreamingHealthSensor": "SparkStreamHealthSensor",
    "StreamingHealthTrigger": "SparkStreamHealthTrigger",
    "LifecycleWaitTrigger": "SparkStreamLifecycleTrigger",
}


def module_getattr(module: str, *old_names: str) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``module`` that answers each of ``old_names`` with its new class
    and a deprecation warning."""

    def __getattr__(name: str) -> Any:
        if name in old_names:
            from airflow.exceptions import AirflowProviderDeprecationWarning

            new = RENAMED[name]
            warnings.warn(f"{module}.{name} is deprecated and will be removed in a future release: use "
                          f"{module}.{new} (same class)", AirflowProviderDeprecationWarning, stacklevel=2)
            return getattr(sys.modules[module], new)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
