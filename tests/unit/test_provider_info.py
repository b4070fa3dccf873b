"""The provider info is valid by Airflow's own schema, complete, importable, and its config is Airflow's."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest

from airflow_streaming import config
from airflow_streaming.get_provider_info import get_provider_info

REPO = Path(__file__).resolve().parents[2]


def airflow_schema() -> dict:
    """The schema Airflow ships for ``get_provider_info()`` results (airflow-core)."""
    return json.loads((files("airflow") / "provider_info.schema.json").read_text())


def test_provider_info_is_valid_against_airflows_schema():
    jsonschema.validate(get_provider_info(), airflow_schema())


def test_the_schema_check_can_fail():
    broken = get_provider_info()
    broken["config"]["airflow_streaming"]["options"]["health_poll_interval"].pop("default")
    with pytest.raises(jsonschema.ValidationError, match="'default' is a required property"):
        jsonschema.validate(broken, airflow_schema())


def test_provider_info_lists_every_kind_of_component():
    info = get_provider_info()
    for key in ("name", "description", "integrations", "operators", "sensors", "hooks", "triggers", "notifications",
                "connection-types", "plugins", "config"):
        assert key in info, key
    modules = [m for kind in ("operators", "sensors", "hooks", "triggers") for entry in info[kind]
               for m in entry["python-modules"]]
    package = REPO / "airflow_streaming"
    # Every module of these folders that defines an operator, sensor, hook or trigger class must be listed;
    # a helper module beside them (a trigger's poll rounds, the master's REST client) defines none.
    required = {f"airflow_streaming.{kind}.{p.stem}" for kind in ("operators", "sensors", "hooks", "triggers")
                for p in (package / kind).glob("*.py")
                if p.stem != "__init__" and _defines_a_component(f"airflow_streaming.{kind}.{p.stem}")}
    assert {"airflow_streaming.triggers.health", "airflow_streaming.hooks.streaming_job",
            "airflow_streaming.sensors.health", "airflow_streaming.operators.deploy"} <= required  # the check sees them
    assert "airflow_streaming.triggers.poll_rounds" not in required
    assert required <= set(modules), f"not listed: {sorted(required - set(modules))}"


def _defines_a_component(module_name: str) -> bool:
    from airflow.sdk import BaseHook, BaseOperator
    from airflow.triggers.base import BaseTrigger

    module = importlib.import_module(module_name)
    return any(isinstance(value, type) and issubclass(value, (BaseOperator, BaseHook, BaseTrigger))
               and value.__module__ == module_name for value in vars(module).values())


def test_every_listed_module_and_class_imports():
    info = get_provider_info()
    for kind in ("operators", "sensors", "hooks", "triggers"):
        for entry in info[kind]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for path in info["notifications"]:
        module, _, name = path.rpartition(".")
        notifier = getattr(importlib.import_module(module), name)
        assert "notify" in vars(notifier) or any("notify" in vars(base) for base in notifier.__mro__[1:-1])


def test_config_options_are_documented_with_defaults():
    section = get_provider_info()["config"]["airflow_streaming"]
    assert section["description"]
    assert set(section["options"]) == {o.name for o in config.OPTIONS}
    for name, option in section["options"].items():
        assert option["description"] and option["default"] is not None, name
        assert option["type"] in ("string", "float", "boolean"), name
    docs = (REPO / "docs" / "configuration.md").read_text()
    for name, option in section["options"].items():
        assert f"`{name}`" in docs, f"{name} is not in docs/configuration.md"


def test_boolean_options_accept_airflows_spellings_and_name_the_option_otherwise(monkeypatch):
    monkeypatch.delenv("AIRFLOW__AIRFLOW_STREAMING__UI_ACTIONS", raising=False)
    assert config.get_bool("ui_actions") is False
    for raw, expected in (("True", True), ("1", True), ("false", False), ("0", False)):
        monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__UI_ACTIONS", raw)
        assert config.get_bool("ui_actions") is expected
    monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__UI_ACTIONS", "maybe")
    with pytest.raises(ValueError, match=r"\[airflow_streaming\] ui_actions must be true or false"):
        config.get_bool("ui_actions")


def test_the_ui_reads_its_sources_from_the_providers_section(monkeypatch):
    from airflow_streaming.ui.streams import configured_sources

    monkeypatch.delenv("AIRFLOW__AIRFLOW_STREAMING__DESIRED_STATE_FILE", raising=False)
    monkeypatch.delenv(config.DESIRED_STATE_ENV, raising=False)
    monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__CONTROL_LOCATIONS", "/a, ,hdfs://nn:8020/b")
    assert configured_sources() == (None, ["/a", "hdfs://nn:8020/b"])  # no desired-state file guessed
    monkeypatch.setenv(config.DESIRED_STATE_ENV, "/etc/streams.yaml")
    assert configured_sources()[0] == "/etc/streams.yaml"
    monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__DESIRED_STATE_FILE", "/opt/desired.yaml")
    assert configured_sources()[0] == "/opt/desired.yaml"


def test_options_read_airflows_configuration_with_the_documented_default(monkeypatch):
    monkeypatch.delenv("AIRFLOW__AIRFLOW_STREAMING__NOTIFICATION_REPEAT_WINDOW", raising=False)
    assert config.get_float("notification_repeat_window") == 900.0
    monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__NOTIFICATION_REPEAT_WINDOW", "60")
    assert config.get_float("notification_repeat_window") == 60.0
    monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__NOTIFICATION_REPEAT_WINDOW", "soon")
    with pytest.raises(ValueError, match="notification_repeat_window must be a number"):
        config.get_float("notification_repeat_window")
    with pytest.raises(KeyError, match="no option 'nope'"):
        config.get_option("nope")


def test_desired_state_file_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("AIRFLOW__AIRFLOW_STREAMING__DESIRED_STATE_FILE", raising=False)
    monkeypatch.delenv(config.DESIRED_STATE_ENV, raising=False)
    assert config.desired_state_file(tmp_path) == str(tmp_path / "specs" / "desired_state.yaml")
    monkeypatch.setenv(config.DESIRED_STATE_ENV, "/from/env.yaml")
    assert config.desired_state_file(tmp_path) == "/from/env.yaml"
    monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__DESIRED_STATE_FILE", "/from/airflow.yaml")
    assert config.desired_state_file(tmp_path) == "/from/airflow.yaml"
    monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__CONTROL_LOCATIONS", " /a , ,hdfs://nn:8020/c ")
    assert config.control_locations() == ["/a", "hdfs://nn:8020/c"]


def test_airflow_itself_discovers_the_config_section(tmp_path):
    """``airflow config`` shows the provider's defaults: Airflow loaded them from the provider info."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__AIRFLOW_STREAMING__")}
    env.update(AIRFLOW_HOME=str(tmp_path), PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, "-m", "airflow", "config", "get-value", "airflow_streaming",
                          "health_poll_interval"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "10"
