"""The provider's own runtime errors (bad configuration raises :class:`ValueError` / ``SpecError``)."""

from __future__ import annotations

from typing import Any


class StreamingError(RuntimeError):
    """Base class of airflow-streaming runtime failures."""


class StreamAlreadyRunningError(StreamingError):
    """A live driver already runs this stream; a second one would share its checkpoint."""


class ApplicationNotFoundError(StreamingError):
    """The stream's application file does not exist; nothing was submitted."""


class JavaNotFoundError(StreamingError):
    """No usable Java 17+ was found for spark-submit."""


class DriverStartError(StreamingError):
    """The driver died or failed before its stream reported progress; carries the driver's own error.

    :param message: what happened, with the driver's error and the tail of its output.
    :param error_class: Spark's error class (or the exception type) the driver reported, if any.
    :param exit_code: the driver's exit code, if it exited.
    :param timed_out: the driver did not report progress in time (it was stopped): not a crash.
    """

    def __init__(self, message: str, *, error_class: str | None = None, exit_code: int | None = None,
                 timed_out: bool = False) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.exit_code = exit_code
        self.timed_out = timed_out

    def is_deterministic(self) -> bool:
        """Whether starting the same driver again would fail the same way (bad application, configuration
        or checkpoint), by the supervisor's own classification; a start that merely timed out is not."""
        if self.timed_out:
            return False
        from airflow_streaming.supervision.classification import FailureKind, classify

        head = str(self).split("\n", 1)[0]
        return classify(self.error_class, head, self.exit_code).kind == FailureKind.DETERMINISTIC


class StreamFailedError(StreamingError):
    """The stream's driver reports a failed query or exited non-zero."""


class StreamStateUnknownError(StreamingError):
    """Whether the stream's driver runs cannot be told right now (unreadable control files, a cluster
    manager that does not answer); nothing was changed. Retry, or check the named storage or cluster."""


class LifecycleError(StreamingError):
    """A lifecycle action cannot go on (the message says why and what to do)."""


class SealError(ValueError):
    """A stored spec's seal does not vouch for what it is used as: not sealed by this Airflow deployment,
    changed since, sealed for another stream or control location, sealed before seals bound their stream
    (an earlier version of the provider), or sealed only as an upgrade's candidate that never passed its
    compatibility gate. Nothing was submitted, stopped or deleted; the message names the file and the fix."""


class SparkBinaryNotAllowedError(ValueError):
    """A Spark connection's ``spark-binary`` extra names a program the Spark provider does not allow.

    Whoever may edit a connection must not choose which program Airflow's workers run: like the Spark
    provider's ``SparkSubmitHook``, only ``spark-submit``, ``spark2-submit`` and ``spark3-submit``
    (found on ``PATH``) are accepted from a connection. A DAG's own spec may still name another program
    (``cluster.spark_binary``), as the provider's ``spark_binary`` argument may."""


class RunAsUserError(ValueError):
    """A driver cannot be started as the spec's ``run_as_user``: no such user, the user could read the Airflow
    side's secrets, cannot run the driver's Python or Spark, or the control directory cannot be shared with it
    (see :mod:`airflow_streaming.run_as`). Nothing was started. A ``ValueError``: a retry cannot fix it.

    :param user: the user name.
    :param reason: what is wrong, with the fix.
    """

    def __init__(self, user: str, reason: str) -> None:
        super().__init__(f"run_as_user {user!r}: {reason}")
        self.user, self.reason = user, reason


class UnsafeDirectoryError(ValueError):
    """A private directory of this provider (secrets, runtime zip, driver logs) exists but is not private:
    a symlink, not a directory, another user's, or open to group/others. Nothing was written into it or
    read from it (see :mod:`airflow_streaming.private_dir`). A ``ValueError``: a retry cannot fix it.

    :param path: the directory.
    :param reason: what is wrong with it.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(
            f"{path} is not a private directory of this user: {reason}. Another user of this host could read or "
            f"replace what the provider keeps there (secrets, the driver runtime, driver logs), so it is not used. "
            f"Remove it (rm -rf {path}) if it is not yours, or make it yours (chown, chmod 700), or set TMPDIR to "
            "a directory only this user can write")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.reason))


class SpecError(ValueError):
    """A stream spec is invalid.

    ``field`` is the dotted name of the offending field (for example
    ``'trigger_interval'``, ``'spark_conf.spark.x'``, ``'application_args[2]'``
    or ``'<root>'`` for the document as a whole); ``message`` is the reason.
    ``str(error)`` is ``"<field>: <message>"``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field: str = field
        self.message: str = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, self.message))
