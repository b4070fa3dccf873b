"""One prefix for every public operator, sensor, trigger and hook (SparkStream...); the old names still
import, as the same class, with a deprecation warning - and a trigger stored under its old classpath by a
task deferred before the rename still loads."""

from __future__ import annotations

import importlib

import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_streaming.deprecated_names import RENAMED
from airflow_streaming.get_provider_info import get_provider_info

OLD_HOMES = {
    "StreamingJobHook": "airflow_streaming.hooks.streaming_job",
    "StreamingHealthSensor": "airflow_streaming.sensors.health",
    "StreamingHealthTrigger": "airflow_streaming.triggers.health",
    "LifecycleWaitTrigger": "airflow_streaming.triggers.lifecycle",
}


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_an_old_name_is_the_new_class_with_a_warning(old):
    module = importlib.import_module(OLD_HOMES[old])
    with pytest.warns(AirflowProviderDeprecationWarning, match=RENAMED[old]):
        cls = getattr(module, old)
    assert cls is getattr(module, RENAMED[old])
    with pytest.raises(AttributeError):
        module.NoSuchName  # noqa: B018


def test_every_public_operator_sensor_trigger_and_hook_has_the_one_prefix():
    info = get_provider_info()
    classes = []
    for group in ("operators", "sensors", "triggers", "hooks"):
        for entry in info[group]:
            for module_name in entry.get("python-modules", []):
                module = importlib.import_module(module_name)
                classes += [n for n, v in vars(module).items() if isinstance(v, type) and v.__module__ == module_name
                            and not n.startswith("_") and n.endswith(("Operator", "Sensor", "Trigger", "Hook"))]
    assert len(classes) >= 10, classes
    assert [n for n in classes if not n.startswith("SparkStream")] == []


def test_a_trigger_stored_under_its_old_classpath_loads_and_saves_itself_under_the_new_one():
    from airflow._shared.module_loading import import_string  # what the triggerer loads classpaths with

    with pytest.warns(AirflowProviderDeprecationWarning):
        cls = import_string("airflow_streaming.triggers.lifecycle.LifecycleWaitTrigger")
    assert cls.__name__ == "SparkStreamLifecycleTrigger"
    classpath, kwargs = cls(wait={"kind": "ready"}, holders={}).serialize()
    assert classpath == "airflow_streaming.triggers.lifecycle.SparkStreamLifecycleTrigger"
    assert import_string(classpath)(**kwargs).serialize() == (classpath, kwargs)
