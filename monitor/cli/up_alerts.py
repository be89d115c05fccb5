"""The alerting part of what ``monitor up`` prints: the run's simulated hour replayed through
the default alert rules, the outbox and the notifier, delivered to a local signed-webhook
receiver (and to Slack / a webhook / Alertmanager when configured) and printed as it arrives.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.markup import escape

from monitor.alerts.exemplars import payload_exemplars
from monitor.alerts.rules import load_alert_rules
from monitor.alerts.sinks.registry import configured_sinks
from monitor.alerts.timeline import flush_delay
from monitor.config import load_settings
from monitor.stack.demo import TrafficPlan
from monitor.stack.demo_alerts import run_demo_alerts

STEP = timedelta(minutes=5)
# a one-minute demo holds ~80 minutes of traffic: shorter drift windows and a lower sample
# floor than the worker's defaults (1 h windows, 100 effective items)
DRIFT_RECENT = timedelta(minutes=30)
DRIFT_MIN_SAMPLES = 50
_STYLE = {"firing": "red bold", "repeat": "yellow", "resolved": "green bold"}


def _line(n: dict[str, Any]) -> str:
    at = datetime.fromisoformat(n["created_at"])
    scope = " ".join(f"{k}={v}" for k, v in sorted(n.get("scope", {}).items()))
    kind = str(n["kind"])
    style = _STYLE.get(kind, "bold")
    role = n.get("incident_role")
    incident = (
        f" [dim]({'page' if role in ('open', 'repage') else role}, {escape(n['incident_id'])})[/]"
        if n.get("incident_id")
        else ""
    )
    return (
        f"  [dim]{at:%H:%M}[/] [{style}]{kind.upper():<8}[/] {escape(n['severity']):<8} "
        f"[bold]{escape(n['rule'])}[/] {escape(scope)}: {escape(n.get('summary', ''))}" + incident
    )


def print_alerts(console: Console, database_url: str, plan: TrafficPlan) -> list[dict[str, Any]]:
    """Replay, print each delivered notification, then a one-line tally; returns them."""
    settings = load_settings()
    rules, source = load_alert_rules(settings)
    extra = configured_sinks(settings)
    wall = datetime.now(UTC)
    # the last tick flushes grouped notifications flush_delay after the end: end that much
    # earlier, so no tick (and no alert row) is later than the wall clock
    end = wall - flush_delay(rules)
    start = min(plan.simulator.start + DRIFT_RECENT, end)  # a short run: from its start
    where = ", ".join(["a local webhook receiver", *sorted(extra)])
    console.print()
    console.print(
        f"[bold]Alerts[/] over the run's simulated timeline ({start:%H:%M} to "
        f"{wall:%H:%M} UTC, every {STEP.seconds // 60} min; rules: {source}), "
        f"delivered to {where}:",
        soft_wrap=True,
    )
    delivered: list[dict[str, Any]] = []

    def on_message(message: dict[str, Any]) -> None:
        for n in message.get("notifications", []):
            delivered.append(n)
            console.print(_line(n), soft_wrap=True, highlight=False)
            episode = f"{n['fingerprint']}:{n['fired_at']}"
            for x in payload_exemplars(message, episode) if n["kind"] == "firing" else []:
                how = x.get("command") or ""
                console.print(
                    f"      [dim]e.g.[/] {escape(how)}  [dim]{escape(x['reason'])}[/]",
                    soft_wrap=True,
                    highlight=False,
                )

    asyncio.run(
        run_demo_alerts(
            database_url,
            rules,
            start,
            end,
            step=STEP,
            drift_recent=DRIFT_RECENT,
            drift_min_samples=DRIFT_MIN_SAMPLES,
            extra_sinks=dict(extra),
            on_message=on_message,
            clock=lambda: wall,
            dashboard_url=settings.dashboard_url,
        )
    )
    if not delivered:
        console.print(
            "  none (too little traffic for the rules' minimum sample sizes; try a "
            "longer --duration)",
            soft_wrap=True,
        )
    tally = Counter((n["rule"], n["kind"]) for n in delivered)
    if tally:
        pages = sum(1 for n in delivered if n.get("incident_role") in ("open", "repage"))
        incidents = {n["incident_id"] for n in delivered if n.get("incident_id")}
        console.print(
            "  [dim]->[/] "
            + ", ".join(f"{r} {k} x{c}" for (r, k), c in sorted(tally.items()))
            + f"; {pages} pages in {len(incidents)} incidents (monitor alerts list)",
            soft_wrap=True,
        )
    return delivered
