"""Operator and sensor parameters read as the spec reads its fields (see ``docs/precedence.md``).

- A time parameter (``startup_timeout``, ``stop_timeout``, ``probation_window``, ``poll_interval``...)
  accepts what the spec accepts (:func:`airflow_streaming.spec.parse_duration`: a number of seconds,
  ``"30s"``, ``"5 minutes"``). It is checked when the DAG is parsed (the operator's ``__init__``), so a
  bad value fails the DAG file, not a run after its driver was submitted. A Jinja template (a string
  holding ``{{``) in a templated parameter is checked once rendered, at execute, before anything is
  submitted.
- ``conn_id`` given to an operator overrides the spec's ``conn_id``: connection -> spec -> operator,
  each later one winning.
- A spec given as a path to a ``.yaml``/``.yml`` file is rendered by Jinja (``template_ext``); an absolute
  path, or one relative to the working directory, is found as before when it is not under the DAG's
  template search path.

Plain Python: no Airflow import here except where Jinja's loader is built (:func:`spec_file_loader`) and where
the rendered specs' private values meet Airflow's masker and the OpenLineage provider's settings
(:meth:`SpecFileTemplates.render_template_fields`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from airflow_streaming.exceptions import SpecError
from airflow_streaming.redaction import mask_spec, spec_secrets
from airflow_streaming.spec import StreamSpec, as_spec, parse_duration

__all__ = ["SPEC_FILE_EXTENSIONS", "OperatorParameterError", "SpecFileTemplates", "checked_duration", "is_template", "seconds_of", "sensor_durations",
           "spec_file_loader", "spec_with_conn_id", "with_conn_id"]

#: What ``template_ext`` names on the operators' spec fields: a spec file Airflow renders with Jinja.
SPEC_FILE_EXTENSIONS = (".yaml", ".yml")


class OperatorParameterError(ValueError):
    """An operator's parameter is invalid; the message names the operator, its task and the parameter.

    A ``ValueError``: the task fails without retries (:mod:`airflow_streaming.task_failures`)."""


def is_template(value: Any) -> bool:
    """Whether ``value`` is a Jinja template string (rendered before execute)."""
    return isinstance(value, str) and "{{" in value


def _owner(operator: Any) -> str:
    """How an error names the operator: ``SparkStreamDeployOperator(task_id='deploy')`` (``operator`` may be
    that label already, for a check made before ``BaseOperator.__init__`` ran)."""
    if isinstance(operator, str):
        return operator
    return f"{type(operator).__name__}(task_id={getattr(operator, 'task_id', None)!r})"


def sensor_durations(sensor: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A sensor's ``**kwargs`` with Airflow's ``poke_interval`` and ``timeout`` given as numbers or duration
    strings (``"30s"``, ``"1 hour"``) checked and turned into seconds, before ``BaseSensorOperator.__init__``
    reads them (it takes numbers or ``timedelta``; a ``timedelta`` is left to it). Not templated fields: a
    template there is an error."""
    label = f"{type(sensor).__name__}(task_id={kwargs.get('task_id')!r})"
    for key in ("poke_interval", "timeout"):
        value = kwargs.get(key)
        if value is not None and not isinstance(value, timedelta):
            kwargs[key] = seconds_of(value, key, label, inclusive=True)
    return kwargs


def seconds_of(value: Any, parameter: str, operator: Any, *, minimum: float = 0.0,
               inclusive: bool = False) -> float | None:
    """``value`` (a number of seconds or a duration string) in seconds; ``None`` stays ``None``.

    :class:`OperatorParameterError` naming the operator and ``parameter`` when it is not a duration, is
    not finite, or is below ``minimum`` (``> minimum``, or ``>=`` when ``inclusive``); also for a template
    left unrendered (a parameter that is not templated)."""
    if value is None:
        return None
    if is_template(value):
        raise OperatorParameterError(
            f"{_owner(operator)}: {parameter}: {value!r} is a Jinja template that was not rendered "
            f"({parameter} is not a templated field there); give a duration such as 300, '30s' or '5 minutes'")
    try:
        seconds = parse_duration(value, parameter)
    except SpecError as exc:
        raise OperatorParameterError(f"{_owner(operator)}: {exc}") from None
    if seconds < minimum or (seconds == minimum and not inclusive):
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise OperatorParameterError(f"{_owner(operator)}: {parameter}: must be {bound} seconds, got {value!r}")
    return seconds


def checked_duration(value: Any, parameter: str, operator: Any, *, templated: bool, minimum: float = 0.0,
                     inclusive: bool = False) -> Any:
    """Check a time parameter when the DAG is parsed; returns what the operator keeps.

    A template in a ``templated`` parameter is kept as is (:func:`seconds_of` checks it at execute, once
    rendered); anything else is checked now and kept as given (a number or the duration string, so the
    task's rendered fields show what the DAG author wrote)."""
    if templated and is_template(value):
        return value
    seconds_of(value, parameter, operator, minimum=minimum, inclusive=inclusive)
    return value


def with_conn_id(spec: StreamSpec, conn_id: str | None) -> StreamSpec:
    """``spec`` with the operator's ``conn_id`` (the operator wins over the spec); unchanged for ``None``/""."""
    if not conn_id or conn_id == spec.conn_id:
        return spec
    return dataclasses.replace(spec, conn_id=conn_id)


def spec_with_conn_id(value: StreamSpec | Mapping[str, Any] | str | os.PathLike[str],
                      conn_id: str | None) -> StreamSpec:
    """:func:`~airflow_streaming.spec.as_spec` of an operator's ``spec`` argument, with its ``conn_id``."""
    return with_conn_id(as_spec(value), conn_id)


def spec_file_loader(loader: Any) -> Any:
    """A Jinja loader that tries ``loader`` (the DAG folder and ``template_search_path``) first, then the
    spec file's path as given: absolute, or relative to the working directory, as an operator read a YAML
    spec path before it was a template. ``loader`` may be ``None`` (no DAG)."""
    import jinja2

    class _PathAsGiven(jinja2.BaseLoader):
        def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Any]:
            if not template.endswith(SPEC_FILE_EXTENSIONS) or not os.path.isfile(template):
                raise jinja2.TemplateNotFound(template)
            path = os.path.abspath(template)
            mtime = os.path.getmtime(path)
            with open(path, encoding="utf-8") as fh:
                source = fh.read()
            return source, path, lambda: os.path.isfile(path) and os.path.getmtime(path) == mtime

    return jinja2.ChoiceLoader([loader, _PathAsGiven()]) if loader is not None else _PathAsGiven()


def _spec_dict(value: Any) -> dict[str, Any]:
    """A templated field's value as a spec dict if it is one (a dict, a spec, a spec's YAML text), else ``{}``."""
    if isinstance(value, StreamSpec):
        return value.to_dict()
    if isinstance(value, str) and "\n" in value.strip():
        import yaml

        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError:
            return {}
    return dict(value) if isinstance(value, Mapping) else {}


def _lineage_copies_operators() -> bool:
    """Whether the OpenLineage provider is installed, emits, and copies operators whole into its events."""
    try:
        from airflow.providers.openlineage import conf as lineage_conf
    except ImportError:
        return False
    return lineage_conf.include_full_task_info() and not lineage_conf.is_disabled()


class SpecFileTemplates:
    """Mixin for an operator whose templated ``spec`` (or ``specs``) may be a YAML file: Airflow reads the
    file and renders it with Jinja (``template_ext``), so ``{{ ds }}`` or ``{{ params.x }}`` in a spec file
    are filled in before the spec is parsed.

    Only a field's own value (or an item of a field's list) is a file: a string ending in ``.yaml`` inside a
    spec given as a dict (an ``application_args`` item ``/etc/app.yaml``, a conf value) is rendered as a
    string, never replaced by a file's content; so is YAML text (several lines) whose last line ends in
    ``.yaml``. A path that is not under the DAG folder or ``template_searchpath`` is read where it is
    (absolute, or relative to the working directory), as before it was a template."""

    template_ext = SPEC_FILE_EXTENSIONS
    _spec_file_depth = 0

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render as Airflow does, then keep the rendered specs' private values out of what Airflow shows.

        Right after this, Airflow stores the rendered fields (the UI's "Rendered Templates"), through a masker
        that hides only values it knows and keys named like secrets: a private conf entry named
        ``spark.myapp.opaque``, rendered from ``{{ conn.x.password }}``, would show there. What is private is
        what the control files mask (:func:`~airflow_streaming.redaction.spec_secrets`), not a list of key
        words: those values are handed to the masker here.

        And with OpenLineage's ``include_full_task_info`` on, the provider's listener would send the operator
        whole in its events, specs included: its redaction changes the copied operator's attributes, not the
        copy it serializes (seen with apache-airflow-providers-openlineage here: a ``spark.password`` went out
        in clear). A task whose specs hold a private value then fails here, before the listener's first event,
        naming the value's field, with the specs masked in place (what its failure event copies)."""
        super().render_template_fields(context, jinja_env)  # type: ignore[misc]
        from airflow_streaming.log_masking import register_secrets

        found: dict[str, list[tuple[str, str]]] = {}
        for name in self.template_fields:  # type: ignore[attr-defined]
            value = getattr(self, name, None)
            if isinstance(value, (list, tuple)):
                secrets = [(f"[{i}].{field}", secret) for i, item in enumerate(value)
                           for field, secret in spec_secrets(_spec_dict(item))]
            else:
                secrets = [(f".{field}", secret) for field, secret in spec_secrets(_spec_dict(value))]
            if secrets:
                found[name] = secrets
        register_secrets(value for secrets in found.values() for _, value in secrets)
        if found and _lineage_copies_operators():
            for name in found:
                value = getattr(self, name)
                masked = [mask_spec(_spec_dict(item)) or item for item in value] if isinstance(value, (list, tuple)) \
                    else mask_spec(_spec_dict(value))
                setattr(self, name, masked)
            name, secrets = next(iter(found.items()))
            raise SpecError(f"{name}{secrets[0][0]}", "a private value, and [openlineage] include_full_task_info is on: "
                            "the OpenLineage provider would send this operator's specs, private values included, in "
                            "its events (its redaction does not reach them). Turn include_full_task_info off; the "
                            "operators' own lineage facets carry only public fields (docs/assets.md)")

    def get_template_env(self, dag: Any = None) -> Any:
        env = super().get_template_env(dag=dag)  # type: ignore[misc]
        env.loader = spec_file_loader(env.loader)
        return env

    def render_template(self, content: Any, context: Any, jinja_env: Any = None,
                        seen_oids: set[int] | None = None) -> Any:
        if isinstance(content, str):
            if content.endswith(SPEC_FILE_EXTENSIONS) and (self._spec_file_depth > 1 or "\n" in content.strip()):
                jinja_env = jinja_env or self.get_template_env()
                return self._render(jinja_env.from_string(content), context)  # type: ignore[attr-defined]
            from jinja2.exceptions import TemplateNotFound

            try:
                return super().render_template(content, context, jinja_env, seen_oids)  # type: ignore[misc]
            except TemplateNotFound:
                if not content.endswith(SPEC_FILE_EXTENSIONS):
                    raise
                # A spec file that is not there: the operator reports it by name when it reads the spec (the
                # supervisor supervises the other streams), not the renderer for the whole task.
                return content
        step = 1 if isinstance(content, list) else 2
        self._spec_file_depth += step
        try:
            return super().render_template(content, context, jinja_env, seen_oids)  # type: ignore[misc]
        finally:
            self._spec_file_depth -= step
