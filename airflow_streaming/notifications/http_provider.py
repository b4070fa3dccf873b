"""Stream events through the HTTP provider's notifier (``pip install airflow-streaming[http]``).

:class:`StreamHttpNotifier` is ``airflow.providers.http.notifications.HttpNotifier`` - the HTTP
provider's ``http`` connection (base URL, auth type, headers and TLS options in its extras) and its
``requests`` session - whose JSON body defaults to the stream event (:func:`render_json`, schema
``airflow-streaming.event/v1``).
"""

from __future__ import annotations

from typing import Any

from airflow.providers.http.notifications.http import HttpNotifier

from airflow_streaming.notifications.events import SUBJECT_PREFIX, event_template_context


class StreamHttpNotifier(HttpNotifier):
    """POST a stream event as JSON with the HTTP provider's notifier.

    A task or DAG callback (a FAILED event from the failure context) or an operator's ``notifiers=``
    entry (``context["stream_event"]``). Templated fields (``endpoint``, ``json``, ``data``, ``headers``,
    ``http_conn_id``, ``extra_options``) are rendered with the task context plus ``stream_event``,
    ``stream_event_subject``, ``stream_event_text``, ``stream_event_html`` and ``stream_event_json``.

    :param json: the JSON body (templated); default: the event as :func:`render_json` renders it.
    :param subject_prefix: prefix of the subject in the default body (``None``: none).
    :param kwargs: everything else ``HttpNotifier`` takes (``http_conn_id``, ``endpoint``, ``method``, ``headers``...).
    """

    def __init__(self, *, json: dict[str, Any] | str | None = None, subject_prefix: str | None = SUBJECT_PREFIX,
                 **kwargs: Any) -> None:
        super().__init__(json=json, **kwargs)
        self.subject_prefix = subject_prefix
        self._default_json = json is None and kwargs.get("data") is None

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Add the event to ``context``, render the templated fields, then fill the event's default body."""
        event_context = event_template_context(context, self.subject_prefix)
        context.update(event_context)
        super().render_template_fields(context, jinja_env)
        if self._default_json:
            self.json = event_context["stream_event_json"]
