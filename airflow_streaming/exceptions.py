"""The provider's own runtime errors (bad configuration raises :class:`ValueError` / ``SpecError``)."""

from __future__ import annotations


class StreamingError(RuntimeError):
    """Base class of airflow-streaming runtime failures."""


class StreamAlreadyRunningError(StreamingError):
    """A live driver already runs this stream; a second one would share its checkpoint."""


class ApplicationNotFoundError(StreamingError):
    """The stream's application file does not exist; nothing was submitted."""


class JavaNotFoundError(StreamingError):
    """No usable Java 17+ was found for spark-submit."""


class DriverStartError(StreamingError):
    """The driver died or failed before its stream reported progress; carries the driver's own error."""


class StreamFailedError(StreamingError):
    """The stream's driver reports a failed query or exited non-zero."""


class StreamStateUnknownError(StreamingError):
    """Whether the stream's driver runs cannot be told right now (unreadable control files, a cluster
    manager that does not answer); nothing was changed. Retry, or check the named storage or cluster."""
