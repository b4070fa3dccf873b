"""The provider's ``[airflow_streaming]`` configuration section: its options, defaults and how they are read.

One table (:data:`OPTIONS`) is the single source of the options: :func:`provider_config` turns it into
the ``config`` entry of the provider info (what ``airflow config list`` shows, with descriptions and
defaults), and :func:`get_option` reads an option through Airflow's configuration (``airflow.cfg`` or
``AIRFLOW__AIRFLOW_STREAMING__<OPTION>``) with the same default as fallback - so a value is the same
whether or not Airflow has loaded the providers' configuration in this process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SECTION = "airflow_streaming"
#: The environment variable the example DAGs read the desired-state file from (kept for compatibility).
DESIRED_STATE_ENV = "AIRFLOW_STREAMING_DESIRED_STATE"


@dataclass(frozen=True)
class Option:
    """One option of the ``[airflow_streaming]`` section.

    :param name: the option's key.
    :param type: ``string``, ``boolean``, ``integer`` or ``float`` (the provider-info schema's types).
    :param default: the default, as Airflow's configuration stores it (a string).
    :param description: what it does, for ``airflow config list`` and the docs.
    :param example: an example value.
    :param version_added: the provider release that added the option (``version_added`` in the provider
        info); ``None`` for the options of the first release. A history fact, not the package's version
        (that is ``airflow_streaming.__version__``): set it to the upcoming release when adding an option.
    """

    name: str
    type: str
    default: str
    description: str
    example: str | None = None
    sensitive: bool = False
    version_added: str | None = None


OPTIONS: tuple[Option, ...] = (
    Option("desired_state_file", "string", "",
           "Path of the desired-state YAML file (streams, versions, wanted version) read by the upgrade-window "
           "and operations DAGs. Empty: the AIRFLOW_STREAMING_DESIRED_STATE environment variable, else "
           "dags/specs/desired_state.yaml beside the example DAGs.",
           "/opt/airflow/dags/specs/desired_state.yaml"),
    Option("control_locations", "string", "",
           "Comma-separated control locations (local paths or hdfs:// / webhdfs:// URLs) whose streams the "
           "Streams UI lists, in addition to those of the desired-state file.",
           "/data/control,hdfs://namenode:8020/streams/control"),
    Option("ui_refresh_seconds", "float", "5",
           "How often (seconds) the Streams UI page refreshes its data while it is open.", "10"),
    Option("ui_actions", "boolean", "False",
           "Offer stop/restart/upgrade/rollback buttons on a stream's page of the Streams UI. Each opens the "
           "operations DAG's trigger form (an audited DAG run); the page itself never changes a stream.", "True"),
    Option("operations_dag_id", "string", "stream_operations",
           "The DAG the Streams UI's action buttons trigger.", "stream_operations"),
    Option("health_poll_interval", "float", "10",
           "Default poke_interval (seconds) of SparkStreamHealthSensor: how often a verdict is computed, in the "
           "worker or, when deferred, in the triggerer.", "30"),
    Option("progress_poll_interval", "float", "2",
           "Default poke_interval (seconds) of SparkStreamProgressSensor.", "5"),
    Option("lifecycle_poll_interval", "float", "2",
           "Default poll_interval (seconds) of the deferrable lifecycle operators (deploy, stop, upgrade, "
           "operation): how often the triggerer checks whether a deferred action's wait is over.", "5"),
    Option("control_seal_key", "string", "",
           "Key that seals the specs the Airflow side stores beside a stream (deployed.json, the lifecycle record, "
           "the history): a stored spec runs only with a valid seal or when it is the caller's own spec, so a "
           "driver that can write its control directory cannot choose what runs. Empty: a random key kept in "
           "$AIRFLOW_HOME/airflow_streaming_seal.key. Set the same value on every Airflow host of a deployment.",
           "a long random string", sensitive=True),
    Option("notification_repeat_window", "float", "900",
           "Default repeat_window_s (seconds) of SparkStreamSupervisorOperator: a repeat of the last message "
           "about a stream within this window is suppressed and counted in the next one.", "3600"),
)
_BY_NAME = {option.name: option for option in OPTIONS}


def provider_config() -> dict[str, Any]:
    """The ``config`` entry of :func:`airflow_streaming.get_provider_info.get_provider_info`."""
    return {
        SECTION: {
            "description": "Defaults of the airflow-streaming provider (Spark Structured Streaming lifecycle).",
            "options": {
                o.name: {"description": o.description, "version_added": o.version_added, "type": o.type,
                         "example": o.example, "default": o.default, **({"sensitive": True} if o.sensitive else {})}
                for o in OPTIONS
            },
        }
    }


def _conf() -> Any:
    """Airflow's configuration: ``airflow.sdk``'s on 3.2+, resolved for older versions by common-compat."""
    from airflow.providers.common.compat.sdk import conf

    return conf


def get_option(name: str) -> str:
    """The value of ``[airflow_streaming] <name>`` (its documented default when unset)."""
    option = _BY_NAME.get(name)
    if option is None:
        raise KeyError(f"[{SECTION}] has no option {name!r} (known: {', '.join(sorted(_BY_NAME))})")
    value = _conf().get(SECTION, name, fallback=option.default)
    return option.default if value is None else str(value)


def get_bool(name: str) -> bool:
    """A boolean option (``true``/``false``, ``1``/``0``, ``yes``/``no``, any case); anything else raises
    :class:`ValueError` naming the option."""
    raw = get_option(name).strip().lower()
    if raw in ("true", "1", "yes", "on"):
        return True
    if raw in ("false", "0", "no", "off", ""):
        return False
    raise ValueError(f"[{SECTION}] {name} must be true or false, got {raw!r}")


def get_float(name: str) -> float:
    """A ``float`` option; a value that is not a number raises :class:`ValueError` naming the option."""
    raw = get_option(name)
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"[{SECTION}] {name} must be a number of seconds, got {raw!r}") from None


def desired_state_file(dags_folder: str | os.PathLike[str] | None = None) -> str:
    """The desired-state file: ``[airflow_streaming] desired_state_file``, else ``$AIRFLOW_STREAMING_DESIRED_STATE``,
    else ``specs/desired_state.yaml`` in ``dags_folder`` (the example DAGs pass their own folder)."""
    configured = get_option("desired_state_file").strip()
    if configured:
        return configured
    from_env = os.environ.get(DESIRED_STATE_ENV, "").strip()
    if from_env:
        return from_env
    base = Path(dags_folder) if dags_folder is not None else Path.cwd()
    return str(base / "specs" / "desired_state.yaml")


def control_locations() -> list[str]:
    """``[airflow_streaming] control_locations`` as a list (empty entries dropped)."""
    return [part.strip() for part in get_option("control_locations").split(",") if part.strip()]
