"""The sinks the settings configure, by outbox sink name."""

from __future__ import annotations

import time
from collections.abc import Callable

from monitor.alerts.sinks.alertmanager import AlertmanagerSink
from monitor.alerts.sinks.base import Sink
from monitor.alerts.sinks.slack import SlackSink, SlackWebhookSink
from monitor.alerts.sinks.webhook import WebhookSink
from monitor.config import Settings
from monitor.core.errors import ConfigError


def configured_sinks(settings: Settings, clock: Callable[[], float] = time.time) -> dict[str, Sink]:
    """The sinks the settings configure, by outbox sink name: ``slack`` (bot token + channel,
    else the incoming webhook URL), ``webhook``, ``alertmanager``. Empty when none is set.

    Raises ConfigError when ``slack_bot_token`` is set without ``slack_channel``.
    """
    sinks: dict[str, Sink] = {}
    if settings.slack_bot_token:
        if not settings.slack_channel:
            raise ConfigError("slack_channel: required when slack_bot_token is set")
        sinks["slack"] = SlackSink(
            settings.slack_bot_token,
            settings.slack_channel,
            settings.dashboard_url,
            base_url=settings.slack_api_url,
        )
    elif settings.slack_webhook_url:
        sinks["slack"] = SlackWebhookSink(settings.slack_webhook_url, settings.dashboard_url)
    if settings.webhook_url:
        sinks["webhook"] = WebhookSink(
            settings.webhook_url,
            settings.webhook_secret,
            clock=clock,
            dashboard_url=settings.dashboard_url,
        )
    if settings.alertmanager_url:
        sinks["alertmanager"] = AlertmanagerSink(settings.alertmanager_url, settings.dashboard_url)
    return sinks
