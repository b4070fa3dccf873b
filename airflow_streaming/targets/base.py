"""Where a stream's driver runs: one small interface, one implementation per deploy target.

Everything above this layer (the hook, the lifecycle runner, the supervisor, health) asks a
:class:`DriverTarget` - never which target it is:

- :meth:`~DriverTarget.submit` starts the driver of one run and returns its :class:`DriverRecord`;
- :meth:`~DriverTarget.find` tells whether a submission of a run id exists (a resumed step must not
  submit twice);
- :meth:`~DriverTarget.state` says ALIVE / GONE / UNKNOWN, with why;
- :meth:`~DriverTarget.kill` hard-kills a driver - only one it can prove is the recorded one;
- :meth:`~DriverTarget.urls` and :meth:`~DriverTarget.log_tail` point people at the driver.

A graceful stop never goes through the target: it is the run marker on the control storage, which
works from any host. The target is for what the marker cannot do (a driver that does not answer).
"""

from __future__ import annotations

import abc
import functools
import hashlib
import logging
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlparse

from airflow_streaming.control import permit
from airflow_streaming.control.contract import ControlPaths, DriverRecord
from airflow_streaming.control.process import flag_value  # noqa: F401 - also importable from here
from airflow_streaming.control.storage import ControlStorage
from airflow_streaming.reconcile.observation import Liveness  # also importable from here
from airflow_streaming.submit_fields import cluster_manager, refuse_unsupported, submit_options
from airflow_streaming.targets.launch_plan import LaunchPlan
from airflow_streaming.targets.submit_command import masked_command, spark_submit_argv

T = TypeVar("T")

log = logging.getLogger(__name__)

STREAM_FLAG = "--stream"
CONTROL_DIR_FLAG = "--control-dir"


@functools.lru_cache(maxsize=4096)
def control_path(location: str) -> str:
    """The path part of a control location (``/abs``, ``file:///abs``, ``hdfs://nn:port/abs``), normalized:
    what a driver's ``--control-dir`` and a target's ``paths.root`` are compared by. Cached: a health poll asks
    it of its stream's control directory (a triggerer: a thousand streams every few seconds)."""
    parsed = urlparse(location)
    path = parsed.path if parsed.scheme else location
    return posixpath.normpath(path) if path else ""


def control_digest(location: str) -> str:
    """A short digest of a control location's path (a YARN tag or Kubernetes label holds it)."""
    return hashlib.sha256(control_path(location).encode()).hexdigest()[:16]




def poll_until(probe: Callable[[], T], done: Callable[[T], bool], timeout: float, poll: float) -> T:
    """Call ``probe`` every ``poll`` seconds until ``done`` holds for what it returns or ``timeout`` seconds
    have passed; the last value probed (there is always one, and the last one is probed at or after the
    timeout). The one wait of the targets: for a driver to be gone after a kill or a stop."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value) or time.monotonic() >= deadline:
            return value
        time.sleep(poll)


@dataclass(frozen=True)
class DriverState:
    """A target's view of one driver."""

    liveness: Liveness
    detail: str
    """Why, in words (the pid and its command, the cluster's state of the application...)."""
    cluster_state: str | None = None
    """The cluster manager's own state word (RUNNING, FINISHED, KILLED, FAILED...), if it has one."""
    exited: bool = False
    """GONE because the cluster manager reports that the driver's process exited (finished, failed or
    was killed, as its node confirmed) - not merely that it lost track of it (a forgotten submission,
    a lost node whose driver may still run). Only this lets a host that cannot check the driver's pid
    disregard the lease the driver left behind (see ``SparkStreamHook.driver_liveness``)."""

    @property
    def alive(self) -> bool:
        return self.liveness == Liveness.ALIVE

    @property
    def gone(self) -> bool:
        return self.liveness == Liveness.GONE


def _for_a_step(method: Callable[..., Any], what: str) -> Callable[..., Any]:
    """``method`` (a target's ``submit`` or ``kill``) refused without an open step permit for the target's
    stream, when the target works on the Airflow side's guarded storage (the hook's)."""
    @functools.wraps(method)
    def acting(self: DriverTarget, *args: Any, **kwargs: Any) -> Any:
        if permit.guards(self.storage):
            permit.require_for_stream(self.paths.root, what)
        return method(self, *args, **kwargs)

    acting.__wrapped_for_a_step__ = True  # type: ignore[attr-defined]
    return acting


class DriverTarget(abc.ABC):
    """A place where drivers run (see the module docstring). One instance serves one stream.

    A target's ``submit`` and ``kill`` start and signal drivers: on the Airflow side (a target over the
    hook's guarded storage) they run only inside a recorded lifecycle step (:mod:`airflow_streaming.control.permit`)."""

    kind: str = "abstract"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, what in (("submit", "submission of a driver of"), ("kill", "kill of a driver of")):
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "__wrapped_for_a_step__", False):
                setattr(cls, name, _for_a_step(method, what))

    def __init__(self, storage: ControlStorage, paths: ControlPaths, settings: dict[str, Any] | None = None):
        self.storage = storage
        self.paths = paths
        self.settings = dict(settings or {})

    # ------------------------------------------------------------------ whose driver
    @property
    def stream(self) -> str:
        """The stream this target serves: the last part of its control directory (``<location>/<name>``)."""
        return posixpath.basename(control_path(self.paths.root))

    def record_problem(self, record: DriverRecord) -> str | None:
        """Why ``record`` cannot be this stream's (it names another stream), ``None`` when it may be. A record
        is a file that anyone who can write the control directory can forge: this is only the first check,
        the driver's own launch (:meth:`launch_problem`) is the proof."""
        if record.stream != self.stream:
            return (f"the driver record of run {record.run_id} names stream {record.stream!r}, not this stream "
                    f"{self.stream!r} (control directory {self.paths.root}): a record copied from another stream")
        return None

    def launch_problem(self, run_id: str, stream: str | None, control_dir: str | None) -> str | None:
        """Why a driver whose own launch (command line, launch command, tags) names ``stream`` and
        ``control_dir`` is not a driver of this stream and control location; ``None`` when it is."""
        if stream != self.stream or control_dir is None or control_path(control_dir) != control_path(self.paths.root):
            return (f"the driver of run {run_id} was launched for stream {stream!r} with control directory "
                    f"{control_dir!r}, not for this stream {self.stream!r} at {self.paths.root}")
        return None

    def refuse(self, message: str) -> str:
        """Log and return a refusal to act on someone else's driver (nothing was signalled)."""
        message = f"refusing to kill: {message}; nothing was signalled"
        log.error("%s", message)
        return message

    def plan(self, spec: Any, run_id: str, launcher: str, runtime_args: list[str], conf: dict[str, str],
             secret_conf: dict[str, str], log_path: str, standby: bool = False) -> LaunchPlan:
        """The :class:`LaunchPlan` of one run (targets add what they need: py-files, images, queues).

        The spec's SparkSubmitOperator fields (:mod:`airflow_streaming.submit_fields`) become spark-submit's
        options (``py_files`` the plan's ``py_files``, ``env_vars`` its ``env``, ``properties_file`` its
        ``properties_file``); a field this target cannot honour is a ``SpecError`` here, before anything is
        submitted. ``keytab`` and ``principal`` settings become spark-submit's ``--keytab`` / ``--principal``
        (a path and a name: no secret on the command line)."""
        master, deploy_mode = spec.master or "local[2]", spec.deploy_mode or "client"
        refuse_unsupported(spec, master, deploy_mode)
        options = submit_options(spec, archives=self.archives(), queue=self.queue(spec))
        return LaunchPlan(run_id=run_id, name=f"{spec.name}:{spec.version}", master=master,
                          deploy_mode=deploy_mode, launcher=launcher, runtime_args=runtime_args,
                          conf=conf, secret_conf=secret_conf, log_path=log_path, standby=standby,
                          py_files=list(getattr(spec, "py_files", None) or ()),
                          env=dict(getattr(spec, "env_vars", None) or {}),
                          properties_file=getattr(spec, "properties_file", None),
                          run_as_user=getattr(spec, "run_as_user", None),
                          submit_args=[*options, *(self.settings.get("submit_args") or []), *self.kerberos_args()])

    def archives(self) -> list[str]:
        """``cluster.archives`` where this target ships them (YARN, Kubernetes), added to the spec's ``archives``."""
        return []

    def queue(self, spec: Any) -> str | None:
        """The YARN queue when the spec's own ``queue`` is unset: ``cluster.queue`` (or the connection's), only
        where the master is YARN (elsewhere a connection's queue means nothing, as in ``SparkSubmitHook``)."""
        if getattr(spec, "queue", None) or cluster_manager(spec.master) != "yarn":
            return None
        return self.settings.get("queue")

    def kerberos_args(self) -> list[str]:
        """``--keytab K --principal P`` from the ``keytab`` / ``principal`` settings, as ``SparkSubmitHook``
        passes them."""
        args: list[str] = []
        if self.settings.get("keytab"):
            args += ["--keytab", str(self.settings["keytab"])]
        if self.settings.get("principal"):
            args += ["--principal", str(self.settings["principal"])]
        return args

    def binary(self, plan: LaunchPlan) -> str:
        """The spark-submit of ``plan``: its runtime's, else the ``spark_binary`` setting, else ``spark-submit``."""
        return plan.spark_binary or self.settings.get("spark_binary", "spark-submit")

    def describe_command(self, plan: LaunchPlan) -> str:
        """The submission as one line for records and logs (never a secret)."""
        return masked_command(spark_submit_argv(plan, self.binary(plan),
                                                "<0600 properties file>" if plan.secret_conf else None))

    @abc.abstractmethod
    def submit(self, plan: LaunchPlan) -> dict[str, Any]:
        """Start the driver of ``plan.run_id``; return the target's handle (JSON-safe ids of the driver).

        Raises :class:`~airflow_streaming.exceptions.StreamingError` subclasses naming what is missing
        when nothing could be submitted."""

    @abc.abstractmethod
    def find(self, run_id: str, record: DriverRecord | None = None) -> list[str]:
        """Descriptions of drivers (processes, applications, pods) of ``run_id`` that exist now."""

    @abc.abstractmethod
    def state(self, record: DriverRecord) -> DriverState:
        """ALIVE, GONE or UNKNOWN for the recorded driver, with the reason."""

    @abc.abstractmethod
    def kill(self, record: DriverRecord, grace: float) -> str:
        """Hard-kill the recorded driver (SIGTERM then SIGKILL, or the cluster's kill) and wait up to
        ``grace`` seconds per step; return what was done. Never raises; never signals a process or
        kills an application it cannot prove is the recorded one."""

    def adopt(self, run_id: str) -> dict[str, Any] | None:
        """The handle of the one driver of ``run_id`` that exists now although no record names it (its
        submitter was killed between the submission and the record), so that its record can be written
        after all. ``None`` when there is no such driver, more than one, or this target cannot prove
        which it is: then nothing may act as if it were recorded."""
        return None

    def urls(self, record: DriverRecord) -> dict[str, str]:
        """Links for people: the driver's log or cluster UI pages."""
        return {}

    def log_tail(self, record: DriverRecord, lines: int) -> str:
        """The last lines of the driver's output, as far as the submitting side can see them."""
        data = self.storage.read_text(record.log_path) if record.log_path else None
        return "\n".join((data or "").splitlines()[-lines:])

    def poll_gone(self, record: DriverRecord, timeout: float, poll: float = 0.5) -> DriverState:
        """Poll :meth:`state` every ``poll`` seconds until it says GONE, for up to ``timeout`` seconds; the
        last state seen (GONE, or the one at the timeout)."""
        return poll_until(lambda: self.state(record), lambda now: now.gone, timeout, poll)

    def wait_gone(self, record: DriverRecord, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until :meth:`state` says GONE; return whether it did."""
        return self.poll_gone(record, timeout).gone

    def await_gone(self, record: DriverRecord, sent: str, what: str, timeout: float, poll: float = 0.5,
                   waited: float | None = None) -> str:
        """After a kill was sent (``sent`` says how): wait up to ``timeout`` seconds for the driver of
        ``record`` to be gone (:meth:`poll_gone`); what happened, in words - ``"<sent>; <what> <its cluster
        state>"``, or ``"<sent>; still <its state>"`` (with ``" after <waited>s"`` when ``waited`` is given)."""
        now = self.poll_gone(record, timeout, poll)
        if now.gone:
            return f"{sent}; {what} {now.cluster_state}"
        return f"{sent}; still {now.detail}" + (f" after {waited:.0f}s" if waited is not None else "")

    def reap(self) -> None:  # noqa: B027 - only the local target has children
        """Collect exited child processes (local target)."""
