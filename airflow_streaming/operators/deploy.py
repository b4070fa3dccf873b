"""Deploy a managed stream and return once it reports progress."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_streaming.operators.asset_lineage import declare_spec_assets, describe_asset_events
from airflow_streaming.operators.deferral import DeferrableLifecycleMixin
from airflow_streaming.operators.lineage import StreamLineage
from airflow_streaming.operators.parameters import SpecFileTemplates, checked_duration, seconds_of, spec_with_conn_id
from airflow_streaming.task_owner import task_owner
from airflow_streaming.spec import StreamSpec
from airflow_streaming.ui.links import STREAM_LINKS


class SparkStreamDeployOperator(SpecFileTemplates, DeferrableLifecycleMixin, StreamLineage, BaseOperator):
    """Submit a stream's driver (detached) through the Spark provider and wait for its first progress.

    Refuses before submitting when the stream already runs, the application file is missing or Java
    is not usable. Fails with the driver's own error when the driver dies while starting. Those
    failures, an invalid spec and a driver that fails deterministically at start (bad code,
    configuration or checkpoint) fail the task without Airflow retries; a transient failure (storage,
    cluster, a driver lost for another reason, a start that timed out) is retried per ``retries``. A try
    that died mid-deploy is resumed from the stream's lifecycle record by the next try.
    Returns (XCom) the run's identity: stream, version, run_id, submit_pid, driver_pid, app_id,
    spark_ui, control_dir, log_path.

    :param spec: the stream: a :class:`StreamSpec`, a dict (templated) or a path to a YAML spec (a ``.yaml``
        / ``.yml`` file is rendered with Jinja). The spec's ``assets`` become the task's ``inlets`` (sources)
        and ``outlets`` (sinks) - added after any ``inlets=``/``outlets=`` given, one already listed by URI
        is not added again - when the spec is known as the DAG is parsed (a ``StreamSpec``, or a dict whose
        ``assets`` hold no template; not a path nor a template string: then they stay as passed). On
        success Airflow records an asset event for each sink, its ``extra`` naming the stream, version and
        run (:mod:`airflow_streaming.operators.asset_lineage`); OpenLineage sees them as the run's inputs and
        outputs (:mod:`airflow_streaming.operators.lineage`).
    :param wait_for_progress: wait until the query reports progress (default) or return after submit.
    :param startup_timeout: how long to wait for progress (seconds or a duration string such as
        ``"5 minutes"``, checked when the DAG is parsed; templated); default: the spec's ``startup_timeout``.
    :param conn_id: the Spark connection; overrides the spec's ``conn_id`` (see ``docs/precedence.md``).
    :param deferrable: wait for the progress in the triggerer (no worker slot held meanwhile); default
        ``[operators] default_deferrable``. A deferrable task that sets no ``retries`` gets two, 15 s apart
        (:mod:`airflow_streaming.defer_race`: Airflow 3.3 can fail a task whose trigger fired early).
    :param poll_interval: deferred: seconds between the trigger's checks; default ``[airflow_streaming]
        lifecycle_poll_interval``.
    """

    template_fields: Sequence[str] = ("spec", "startup_timeout")
    operator_extra_links = STREAM_LINKS
    ui_color = "#d4f1c5"

    def __init__(
        self,
        *,
        spec: StreamSpec | Mapping[str, Any] | str,
        wait_for_progress: bool = True,
        startup_timeout: float | str | None = None,
        deferrable: bool | None = None,
        poll_interval: float | str | None = None,
        conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        declare_spec_assets(self, spec)
        self.wait_for_progress = wait_for_progress
        self.startup_timeout = checked_duration(startup_timeout, "startup_timeout", self, templated=True)
        self.conn_id = conn_id
        self._set_deferrable(deferrable, poll_interval, kwargs)

    def _act(self, context: Context, resume: dict[str, str] | None = None) -> dict[str, Any]:
        from airflow_streaming.lifecycle.operations import deploy_stream
        from airflow_streaming.lifecycle.runner import LifecycleOptions

        options = LifecycleOptions(owner=task_owner(context["ti"]), await_progress=self.wait_for_progress,
                                   startup_timeout=seconds_of(self.startup_timeout, "startup_timeout", self),
                                   defer=self.deferrable)
        spec = spec_with_conn_id(self.spec, self.conn_id)
        self._spec = spec
        identity = deploy_stream(spec, options, resume, started=self._started)
        describe_asset_events(self, context, spec, identity)
        self._note_lineage(spec, run_id=identity.get("run_id"), app_id=identity.get("app_id"))
        self.log.info("stream %s %s is running: run %s, app %s, Spark UI %s, log %s", spec.name, spec.version,
                      identity.get("run_id"), identity.get("app_id"), identity.get("spark_ui"), identity.get("log_path"))
        return identity

    def _started(self, runner: Any) -> None:
        self._runner = runner

    def on_kill(self) -> None:
        # Killed while waiting for the start: the deploy's runner records it and asks the half-started driver
        # to stop (never raises). The deploy's record stays unfinished; a retry resumes it, a stop supersedes
        # it. Not when deferrable: its waits run in the triggerer, so a kill of its worker is a kill of a short
        # step - e.g. Airflow's defer race (airflow_streaming/defer_race.py) failing a resumed try, whose retry
        # must find the stream still starting.
        runner = getattr(self, "_runner", None)
        if runner is not None and not self.deferrable:
            runner.abandon_start(f"the task {self.task_id} was killed while the stream started")
