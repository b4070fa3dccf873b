"""Stream events through the Slack provider's webhook notifier (``pip install airflow-streaming[slack]``).

:class:`StreamSlackWebhookNotifier` is ``airflow.providers.slack.notifications.slack_webhook.SlackWebhookNotifier``
- the Slack provider's ``slackwebhook`` connection (webhook token as password, optional host, proxy,
timeout, retry handlers) and its ``slack_sdk`` client - whose message defaults to the stream event's
Block Kit rendering (:func:`render_slack`).
"""

from __future__ import annotations

from typing import Any

from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

from airflow_streaming.notifications.events import SUBJECT_PREFIX, event_template_context, render_slack


class StreamSlackWebhookNotifier(SlackWebhookNotifier):
    """Post a stream event to a Slack incoming webhook with the Slack provider's notifier.

    A task or DAG callback (a FAILED event from the failure context) or an operator's ``notifiers=``
    entry (``context["stream_event"]``). Templated fields (``text``, ``blocks``, ``attachments``,
    ``slack_webhook_conn_id``...) are rendered with the task context plus ``stream_event``,
    ``stream_event_subject``, ``stream_event_text``, ``stream_event_html`` and ``stream_event_json``.

    :param text: the message's fallback text (templated); default: the event's subject.
    :param blocks: Block Kit blocks (templated); default: the event's blocks (facts, error, health, links).
    :param subject_prefix: prefix of the default text (``None``: none).
    :param kwargs: everything else ``SlackWebhookNotifier`` takes (``slack_webhook_conn_id``, ``proxy``, ...).
    """

    def __init__(self, *, text: str | None = None, blocks: list[Any] | None = None,
                 subject_prefix: str | None = SUBJECT_PREFIX, **kwargs: Any) -> None:
        super().__init__(text=text or "", blocks=blocks, **kwargs)
        self.subject_prefix = subject_prefix
        self._default_text = text is None
        self._default_blocks = blocks is None

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Add the event to ``context``, render the templated fields, then fill the event's defaults."""
        event_context = event_template_context(context, self.subject_prefix)
        context.update(event_context)
        super().render_template_fields(context, jinja_env)
        payload = render_slack(event_context["stream_event"], self.subject_prefix)
        if self._default_text:
            self.text = payload["text"]
        if self._default_blocks:
            self.blocks = payload["blocks"]
