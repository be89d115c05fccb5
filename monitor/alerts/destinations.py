"""Where alert notifications go, read from the settings without building a sink.

:func:`destinations` names the sinks
:func:`monitor.alerts.sinks.registry.configured_sinks` would build
(same names, same order of precedence); :data:`NO_DESTINATION` is what the worker logs at start
and ``monitor alerts list`` prints when the list is empty: alerts are then evaluated and
recorded, but nobody is notified.
"""

from __future__ import annotations

from monitor.config import Settings

NO_DESTINATION = (
    "no destination: alerts are evaluated and recorded but nobody is notified; set "
    "MONITOR_SLACK_BOT_TOKEN + MONITOR_SLACK_CHANNEL, MONITOR_SLACK_WEBHOOK_URL, "
    "MONITOR_WEBHOOK_URL or MONITOR_ALERTMANAGER_URL"
)


def destinations(settings: Settings) -> list[str]:
    """Sink names the settings configure (``slack``, ``webhook``, ``alertmanager``), in that
    order; empty when none is set."""
    names = []
    if settings.slack_bot_token or settings.slack_webhook_url:
        names.append("slack")
    if settings.webhook_url:
        names.append("webhook")
    if settings.alertmanager_url:
        names.append("alertmanager")
    return names
