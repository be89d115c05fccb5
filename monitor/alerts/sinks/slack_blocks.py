"""Slack Block Kit messages and scrubbed payloads for alert notifications. Pure (no I/O).

An outbox payload is either ``Notification.to_dict()`` or ``GroupedNotification.to_dict()``
(told apart by the ``notifications`` key), optionally with ``"redact_customer_content": false``
at its top level when the rule opted in to customer content (a group carries it at the top
level too, for all its members).

Text contract: every text taken from a payload (summary, description, detail, scope, label
values, group key, exemplars, the scope inside dashboard links) passes through :func:`scrub`
before it leaves the process: secrets are always replaced
(:func:`monitor.core.redact.redact_secrets`); emails, phone numbers and card numbers too
(:func:`monitor.core.redact.redact`) unless the payload opted out. Every Slack mrkdwn text
(blocks, ``text`` and ``attachments.fallback``) is also escaped (``&``, ``<``, ``>``), so
``<!channel>`` or ``<@U123>`` in a value never mentions anyone.

:func:`render_message` returns ``{"text": fallback, "blocks": [...], "attachments": [...]}``
ready for ``chat.postMessage`` or an incoming webhook: ``text`` is the plain-text fallback
(notifications, screen readers), ``blocks`` the Block Kit body, ``attachments`` one colour bar
(severity colour, green when resolved). Block Kit limits are respected (header <= 150 chars,
section text <= 3000, at most 10 members listed in a grouped message). A firing or repeated
alert lists its exemplars (:mod:`monitor.alerts.exemplars`): the conversation, why, a link to the
Conversation dashboard and the command that prints it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from monitor.alerts.exemplars import conversation_command, conversation_link, payload_exemplars
from monitor.alerts.grouping import GroupedNotification
from monitor.alerts.states import Kind, Notification
from monitor.core.redact import redact, redact_secrets

DASHBOARD_PATH = "/d/monitor-calibration"
"""Grafana dashboard the links open by default; the scope is preselected as ``var-<name>``."""
#: The dashboard (uid path) that shows each metric (others: :data:`DASHBOARD_PATH`).
METRIC_DASHBOARDS = {
    "drift": "/d/monitor-drift",
    "escalation_inversion": "/d/monitor-escalation",
    "time_to_escalation_p90_s": "/d/monitor-escalation",
    "judge_failure_rate": "/d/monitor-judges",
    "dlq_rate": "/d/monitor-pipeline",
    "consumer_lag": "/d/monitor-pipeline",
    "ingest_stall_s": "/d/monitor-pipeline",
}
SCOPE_KEYS = ("agent", "domain", "tier")
MAX_GROUP_MEMBERS = 10
_STYLE = {
    "critical": (":rotating_light:", "#E01E5A"),
    "warning": (":warning:", "#ECB22E"),
    "info": (":information_source:", "#36C5F0"),
}
_RESOLVED_STYLE = (":white_check_mark:", "#2EB67D")
_KIND_TITLE = {
    Kind.FIRING: "FIRING",
    Kind.REPEAT: "STILL FIRING",
    Kind.RESOLVED: "RESOLVED",
    Kind.FLAPPING: "FLAPPING",
}

AnyNotification = Notification | GroupedNotification


def parse_payload(payload: Mapping[str, Any]) -> AnyNotification:
    """The notification an outbox payload carries; raises ValueError when malformed."""
    if "notifications" in payload:
        return GroupedNotification.from_dict(payload)
    return Notification.from_dict(payload)


def customer_content_allowed(payload: Mapping[str, Any]) -> bool:
    """True only when the payload says ``"redact_customer_content": false``."""
    return payload.get("redact_customer_content") is False


def scrub(text: str, allow_customer_content: bool = False) -> str:
    """Secrets always redacted; customer content (emails, phones, cards) unless allowed."""
    return redact_secrets(text) if allow_customer_content else redact(text)


KEEP_VERBATIM = frozenset(
    {
        "idempotency_key",
        "fingerprint",
        "kind",
        "fired_at",
        "resolved_at",
        "created_at",
        "runbook_url",
        "redact_customer_content",
    }
)
"""Payload keys whose values are machine identifiers or operator configuration, not content."""


def scrub_payload(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an outbox payload in which every string value, at any depth (summary,
    description, detail, labels, scope, group_key, members...), is scrubbed, except the
    identifiers of :data:`KEEP_VERBATIM`; structure and non-string values unchanged."""
    allow = customer_content_allowed(payload)

    def walk(value: Any, key: str | None) -> Any:
        if isinstance(value, str):
            return value if key in KEEP_VERBATIM else scrub(value, allow)
        if isinstance(value, Mapping):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        return value

    out: dict[str, Any] = walk(payload, None)
    return out


def scrub_scope(scope: Mapping[str, str], allow_customer_content: bool = False) -> dict[str, str]:
    """``scope`` with every value scrubbed (for links and texts built from it)."""
    return {k: scrub(v, allow_customer_content) for k, v in scope.items()}


def dashboard_link(dashboard_url: str, scope: Mapping[str, str], metric: str | None = None) -> str:
    """``<dashboard_url>/d/<dashboard>?var-agent=..&var-domain=..&var-tier=..``: the dashboard
    that shows ``metric`` (:data:`METRIC_DASHBOARDS`, else calibration), only the scope keys
    present, values URL-encoded."""
    query = urlencode([(f"var-{k}", scope[k]) for k in SCOPE_KEYS if k in scope])
    path = METRIC_DASHBOARDS.get(metric or "", DASHBOARD_PATH)
    base = dashboard_url.rstrip("/") + path
    return f"{base}?{query}" if query else base


def scope_text(scope: Mapping[str, str]) -> str:
    """``agent=billing, domain=refunds, tier=3`` (scope keys first), or ``all``."""
    keys = [k for k in SCOPE_KEYS if k in scope] + sorted(k for k in scope if k not in SCOPE_KEYS)
    return ", ".join(f"{k}={scope[k]}" for k in keys) or "all"


def value_text(n: Notification) -> str:
    """``0.0734 (> 0.05)``: the value against the comparison and threshold; for a resolution
    ``0.079 (fires when > 0.08)``, so the last value is not read as still breaching."""
    value = "n/a" if n.value is None else f"{n.value:.4g}"
    if n.kind is Kind.RESOLVED:
        return f"{value} (fires when {n.comparison} {n.threshold:g})"
    return f"{value} ({n.comparison} {n.threshold:g})"


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _style(n: AnyNotification) -> tuple[str, str]:
    resolved = n.kind is Kind.RESOLVED if isinstance(n, Notification) else not n.firing
    return _RESOLVED_STYLE if resolved else _STYLE.get(_severity(n), _STYLE["info"])


def _severity(n: AnyNotification) -> str:
    """A group's severity is its most severe *firing* member's (all members when resolved)."""
    if isinstance(n, Notification) or not n.firing:
        return n.severity
    return min(
        (m.severity for m in n.firing), key=lambda s: list(_STYLE).index(s) if s in _STYLE else 9
    )


def _duration(n: Notification) -> str:
    if n.resolved_at is None:
        return ""
    seconds = int((n.resolved_at - n.fired_at).total_seconds())
    hours, rest = divmod(max(seconds, 0), 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def fallback_text(n: AnyNotification, allow_customer_content: bool = False) -> str:
    """One plain-text line (several for a group) for notifications and screen readers."""
    if isinstance(n, GroupedNotification):
        head = f"{len(n.firing)} firing, {len(n.resolved)} resolved ({n.group_key})"
        lines = [fallback_text(m, allow_customer_content) for m in n.notifications]
        return scrub("\n".join([head, *lines]), allow_customer_content)
    line = (
        f"[{_KIND_TITLE[n.kind]}] {n.severity} {n.rule} ({scope_text(n.scope)}): "
        f"value {value_text(n)}, n={n.samples:g}, window {n.window}: {n.summary}"
    )
    return scrub(line, allow_customer_content)


def _links(n: Notification, dashboard_url: str, allow: bool) -> list[tuple[str, str]]:
    links = [("Dashboard", dashboard_link(dashboard_url, scrub_scope(n.scope, allow), n.metric))]
    if n.runbook_url:
        links.append(("Runbook", n.runbook_url))
    return links


def exemplar_lines(
    examples: Sequence[Mapping[str, Any]], dashboard_url: str, allow: bool
) -> list[str]:
    """One mrkdwn line per exemplar: the conversation, why, the Conversation dashboard link
    and the command (every text scrubbed and escaped; the link built from the scrubbed id)."""
    lines = []
    for x in examples:
        reason = _esc(scrub(str(x.get("reason", "")), allow))
        cid = x.get("conversation_id")
        if not isinstance(cid, str) or not cid:
            lines.append(f"• {reason}")
            continue
        shown = scrub(cid, allow)
        link = conversation_link(dashboard_url, shown)
        command = _esc(conversation_command(shown))
        lines.append(f"• `{_esc(shown)}` {reason} · <{link}|Conversation> · `{command}`")
    return lines


def _single_blocks(
    n: Notification, dashboard_url: str, allow: bool, examples: Sequence[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    emoji, _ = _style(n)
    title = f"{emoji} [{_KIND_TITLE[n.kind]}] {n.rule}"
    fields = [
        ("Severity", n.severity),
        ("Scope", scope_text(n.scope)),
        ("Value" if n.kind is not Kind.RESOLVED else "Last value", value_text(n)),
        ("Samples", f"{n.samples:g}"),
        ("Window", n.window),
        ("Firing since", n.fired_at.isoformat(timespec="seconds")),
    ]
    if n.kind is Kind.RESOLVED and n.resolved_at is not None:
        fields.append(("Resolved after", _duration(n)))
    if n.acked_by:
        fields.append(("Acknowledged by", n.acked_by))
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(scrub(title, allow), 150)}},
        {"type": "section", "text": _mrkdwn(f"*{_esc(scrub(n.summary, allow))}*")},
        {
            "type": "section",
            "fields": [_mrkdwn(f"*{k}*\n{_esc(scrub(v, allow))}") for k, v in fields[:10]],
        },
    ]
    for text in (n.description, n.detail):
        if text:
            blocks.append({"type": "section", "text": _mrkdwn(_esc(scrub(text, allow)))})
    if examples:
        lines = exemplar_lines(examples, dashboard_url, allow)
        blocks.append({"type": "section", "text": _mrkdwn("*Examples*\n" + "\n".join(lines))})
    blocks.append(
        {
            "type": "actions",
            "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": label}, "url": url}
                for label, url in _links(n, dashboard_url, allow)
            ],
        }
    )
    blocks.append(
        {
            "type": "context",
            "elements": [_mrkdwn(f"fingerprint `{n.fingerprint}` · {_esc(n.metric)}")],
        }
    )
    return blocks


def _member_line(
    n: Notification, dashboard_url: str, allow: bool, examples: Sequence[Mapping[str, Any]] = ()
) -> str:
    emoji, _ = _style(n)
    links = " · ".join(f"<{url}|{label}>" for label, url in _links(n, dashboard_url, allow))
    text = (
        f"{emoji} *{_KIND_TITLE[n.kind]}* {_esc(n.rule)} · {_esc(scope_text(n.scope))}\n"
        f"{_esc(n.summary)}\nvalue {_esc(value_text(n))} · n={n.samples:g} · window {n.window}"
    )
    extra = "".join("\n" + line for line in exemplar_lines(examples, dashboard_url, allow))
    return _cut(scrub(text, allow) + f"\n{links}" + extra, 3000)


def _group_blocks(
    g: GroupedNotification, dashboard_url: str, allow: bool, payload: Mapping[str, Any]
) -> list[dict[str, Any]]:
    emoji, _ = _style(g)
    title = f"{emoji} {len(g.firing)} firing, {len(g.resolved)} resolved · {_severity(g)}"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(title, 150)}},
        {"type": "context", "elements": [_mrkdwn(_esc(scrub(g.group_key, allow)) or "all")]},
    ]
    members = g.notifications[:MAX_GROUP_MEMBERS]
    for m in members:
        line = _member_line(m, dashboard_url, allow, examples_of(payload, m))
        blocks.append({"type": "section", "text": _mrkdwn(line)})
    if len(g.notifications) > len(members):
        more = len(g.notifications) - len(members)
        blocks.append({"type": "context", "elements": [_mrkdwn(f"…and {more} more")]})
    return blocks


def examples_of(payload: Mapping[str, Any], n: Notification) -> list[dict[str, Any]]:
    """The exemplars ``payload`` carries for ``n``'s episode (none for a resolution)."""
    return [] if n.kind is Kind.RESOLVED else payload_exemplars(payload, n.episode)


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": _cut(text, 3000)}


_INCIDENT_TEXT = {
    "open": "New incident `{id}`: alerts that join it follow in this thread",
    "repage": "Incident `{id}` raised to {severity}",
    "update": "Update to incident `{id}`",
    "close": "Incident `{id}` resolved: its last alert resolved",
}


def incident_text(n: AnyNotification) -> str | None:
    """One line on the incident a notification (or batch) belongs to and what it is to it,
    e.g. ``Update to incident `inc-...```, and the command that shows the incident; None
    without an incident."""
    if n.incident_id is None:
        return None
    role = n.incident_role or "update"
    template = _INCIDENT_TEXT.get(role, _INCIDENT_TEXT["update"])
    text = template.format(id=_esc(n.incident_id), severity=_esc(_severity(n)))
    return f"{text} · `monitor alerts show {_esc(n.incident_id)}`"


def render_message(payload: Mapping[str, Any], dashboard_url: str) -> dict[str, Any]:
    """The Slack message for an outbox payload (see the module docstring for its shape; a
    notification of an incident ends with a context line saying which and what it is to it,
    :func:`incident_text`).

    Raises ValueError when the payload is not a (grouped) notification.
    """
    n = parse_payload(payload)
    allow = customer_content_allowed(payload)
    blocks = (
        _single_blocks(n, dashboard_url, allow, examples_of(payload, n))
        if isinstance(n, Notification)
        else _group_blocks(n, dashboard_url, allow, payload)
    )
    incident = incident_text(n)
    if incident is not None:
        blocks.append({"type": "context", "elements": [_mrkdwn(incident)]})
    text = _cut(_esc(fallback_text(n, allow)), 3000)
    _, colour = _style(n)
    return {"text": text, "blocks": blocks, "attachments": [{"color": colour, "fallback": text}]}


def episodes(payload: Mapping[str, Any], kinds: tuple[Kind, ...]) -> list[str]:
    """Episode keys (``<fingerprint>:<fired_at>``) of the payload's notifications of ``kinds``,
    in order, without duplicates: the keys a resolved message threads under."""
    n = parse_payload(payload)
    members = n.notifications if isinstance(n, GroupedNotification) else (n,)
    out: list[str] = []
    for m in members:
        if m.kind in kinds and m.episode not in out:
            out.append(m.episode)
    return out
