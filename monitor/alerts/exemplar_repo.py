"""Exemplars in Postgres: the candidates of each pick rule, their storage and promotion.

:func:`record` runs in the evaluator's write transaction (:mod:`monitor.alerts.evaluate`) for
the alerts that fired in it: per alert it reads the candidates of the rule of its metric
(:func:`choose`, one or two indexed queries over the rule's window ending at ``now``, scoped
to the alert's agent, domain and tier; rules in :mod:`monitor.alerts.exemplars`), then, for all
of them at once, takes the ingest writer's per-conversation locks and promotes every unkept
event of the exemplar conversations into the kept sample, and inserts the ``alert_exemplars``
rows. Everything commits with the alert's state change or not at all. The lock makes the
promotion race-free against a batch in flight: a batch that wrote an unkept event of the
conversation before committed (the promotion sees it), and one that commits after finds the
exemplar row (the writer keeps an exemplar conversation's events, :data:`monitor.ingest.
decision_sql.KEPT_STORED`).

:func:`attach` adds to outbox payloads the stored exemplars of their members' episodes; it runs
in the same transaction, so a notification flushed in the evaluation its alert fired carries
them. Every function takes an open ``AsyncConnection`` and never commits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from monitor.alerts import exemplars as ex
from monitor.alerts.exemplars import Exemplar, Pick
from monitor.alerts.observation_repo import GATE_FAIL_OPEN
from monitor.alerts.observations import category_matches
from monitor.alerts.rule_models import Rule
from monitor.alerts.states import AlertState
from monitor.analytics.bins import DEFAULT_BINS
from monitor.analytics.repo import Segment, bin_sums
from monitor.store.tables_alerts import alert_exemplars

log = logging.getLogger(__name__)

#: the ingest writer's per-conversation transaction locks, in the same order
#: (:data:`monitor.ingest.items_sql.LOCK_CONVERSATIONS`, key 7301): taken once for every
#: conversation promoted in a transaction, so two lockers never wait on each other in a circle
LOCK_CONVERSATIONS = text(
    "SELECT count(pg_advisory_xact_lock(7301, h)) FROM ("
    " SELECT DISTINCT hashtext(c) AS h FROM unnest(CAST(:ids AS text[])) AS c ORDER BY 1"
    ") AS keys"
)
PROMOTE = text(
    "UPDATE events SET kept = true"
    " WHERE kept = false AND conversation_id = ANY(CAST(:ids AS text[]))"
)
_DRIFT_SLACK = timedelta(minutes=1)  # drift windows end on the minute (as the observations)
_DEAD_LETTER_BYTES = 65536  # of a dead letter's raw bytes, parsed for its conversation id

# the alert's segment on the analytics tables (sentinels) and on conversations / events (NULLs)
_SEG_ITEMS = "agent_id = :agent AND domain = :domain AND tier = :tier"
_SEG_ROWS = "agent_id = :agent AND coalesce(domain, '') = :domain AND coalesce(tier, 0) = :tier"

# Every read takes its window's latest rows in the order of an index (time only, so the scan
# stops at its limit instead of sorting the window), then ranks those precisely.
#
# the message of an item, read for the few rows kept (after the limit)
_ITEM_ROWS = """
SELECT d.conversation_id, d.event_id, d.ts, d.confidence, d.label, d.label_source,
       e.body->'message'->>'content'
FROM ({inner}) d
LEFT JOIN LATERAL (
  SELECT body FROM events
  WHERE conversation_id = d.conversation_id AND ts = d.ts AND event_id = d.event_id LIMIT 1
) e ON TRUE
ORDER BY {order}
"""
# among the latest :k failed items, one per conversation (its most confident); then the most
# confident first
_FAILED_ITEMS = f"""
SELECT * FROM (
  SELECT DISTINCT ON (conversation_id) * FROM (
    SELECT conversation_id, event_id, ts, confidence, label, label_source
    FROM items WHERE {_SEG_ITEMS} AND ts >= :lo AND ts < :hi AND label = 0 {{extra}}
    ORDER BY ts DESC LIMIT :k
  ) latest
  ORDER BY conversation_id, confidence DESC, ts DESC, event_id
) f ORDER BY confidence DESC, ts DESC, conversation_id LIMIT :n
"""
_RECENT_ITEMS = f"""
SELECT conversation_id, event_id, ts, confidence, label, label_source
FROM items WHERE {_SEG_ITEMS} AND ts >= :lo AND ts < :hi {{extra}}
ORDER BY ts DESC LIMIT :n
"""
_BIN_FILTER = (
    " AND agent_version = :version AND confidence >= :c_lo AND (confidence < :c_hi OR :last)"
)
_DRIFT_CHECK = text(f"""
SELECT agent_version, baseline_from, baseline_to, recent_from, recent_to, fired_tests, reason
FROM drift_checks
WHERE {_SEG_ITEMS} AND fired AND recent_to > :lo AND recent_to <= :hi
  AND (CAST(:test AS text) IS NULL
       OR CAST(:test AS text) = ANY(string_to_array(fired_tests, ',')))
ORDER BY recent_to DESC, checked_at DESC LIMIT 1
""")
# each kind among its latest :k conversations of the window
_INVERSION_KIND = f"""
(SELECT conversation_id, min_confidence, escalated, outcome_success, escalation_trigger
 FROM (
   SELECT conversation_id, min_confidence, escalated, outcome_success, escalation_trigger,
          first_ts
   FROM conversations
   WHERE {_SEG_ROWS} AND first_ts >= :lo AND first_ts < :hi AND min_confidence IS NOT NULL
     AND {{kind}}
   ORDER BY first_ts DESC LIMIT :k
 ) latest
 ORDER BY min_confidence {{order}}, first_ts DESC, conversation_id LIMIT :n)"""
_INVERSION = text(
    _INVERSION_KIND.format(kind="escalated", order="DESC")
    + " UNION ALL "
    + _INVERSION_KIND.format(kind="NOT escalated AND outcome_success = false", order="ASC")
)
_SLOWEST = text(f"""
SELECT s.conversation_id, s.seconds, s.turns, s.escalation_trigger,
       (SELECT e.body->'escalation'->>'reason' FROM events e
        WHERE e.conversation_id = s.conversation_id AND e.type = 'escalation'
        ORDER BY e.ts LIMIT 1)
FROM (
  SELECT conversation_id, extract(epoch FROM escalated_at - first_ts)::float8 AS seconds,
         escalation_turn - coalesce(first_turn, 0) AS turns, escalation_trigger
  FROM (
    SELECT * FROM conversations
    WHERE {_SEG_ROWS} AND first_ts >= :lo AND first_ts < :hi AND escalated
      AND escalated_at IS NOT NULL
    ORDER BY first_ts DESC LIMIT :k
  ) latest
  ORDER BY seconds DESC, conversation_id LIMIT :n
) s ORDER BY s.seconds DESC, s.conversation_id
""")
_FLAGGED = text("""
SELECT * FROM (
  SELECT v.id, v.conversation_id, v.judge, v.judge_version, v.item_id, v.categories,
         v.evidence, v.rationale, v.created_at
  FROM verdicts v LEFT JOIN conversations c ON c.conversation_id = v.conversation_id
  WHERE v.agent_id = :agent AND coalesce(c.domain, '') = :domain
    AND coalesce(c.tier, 0) = :tier AND v.status = 'ok'
    AND v.created_at >= :lo AND v.created_at < :hi AND v.categories <> '[]'::jsonb
  ORDER BY v.created_at DESC LIMIT :k
) f ORDER BY created_at DESC, id DESC
""")
_GATE = f"""
SELECT * FROM (
  SELECT conversation_id, ts, event_id, body->'gate' FROM events
  WHERE type = 'gate' AND ts >= :lo AND ts < :hi AND {_SEG_ROWS} AND ({{cond}})
  ORDER BY ts DESC LIMIT :k
) g ORDER BY ts DESC, event_id DESC LIMIT :n
"""
_GATE_CONDITIONS = {
    Pick.GATE_ESCALATED: "body->'gate'->>'decision' = 'escalate'",
    Pick.GATE_DEGRADED: "body->'gate'->>'degraded' IS NOT NULL",
    Pick.GATE_FAIL_OPEN: GATE_FAIL_OPEN,
}
_GATE_PROCEEDED_FAILED = text(f"""
WITH latest AS (
  SELECT conversation_id, ts, event_id, body->'gate' AS gate
  FROM events WHERE type = 'gate' AND ts >= :lo AND ts < :hi AND {_SEG_ROWS}
  ORDER BY ts DESC LIMIT :k
), last AS (
  SELECT DISTINCT ON (conversation_id) * FROM latest
  ORDER BY conversation_id, ts DESC, event_id DESC)
SELECT l.conversation_id, l.ts, l.event_id, l.gate, c.outcome_source
FROM last l JOIN conversations c ON c.conversation_id = l.conversation_id
WHERE l.gate->>'decision' = 'proceed' AND c.outcome_success = false
ORDER BY (l.gate->>'calibrated')::float8 DESC NULLS LAST, l.ts DESC, l.conversation_id
LIMIT :n
""")
_DEAD_LETTERS = text(f"""
SELECT id, reason, field, detail, received_at, substring(raw FROM 1 FOR {_DEAD_LETTER_BYTES})
FROM (
  SELECT id, reason, field, detail, received_at, raw FROM dead_letters
  WHERE received_at >= :lo AND received_at < :hi
  ORDER BY received_at DESC LIMIT :k
) d ORDER BY received_at DESC, id DESC LIMIT :n
""")


def _segment(scope: Mapping[str, str]) -> dict[str, Any] | None:
    """The alert scope as query parameters (None for a scope without an agent)."""
    agent = scope.get("agent")
    if agent is None:
        return None
    return {"agent": agent, "domain": scope.get("domain", ""), "tier": int(scope.get("tier", 0))}


async def _rows(conn: AsyncConnection, sql: Any, params: Mapping[str, Any]) -> list[Any]:
    return list((await conn.execute(sql, dict(params))).all())


async def choose(
    conn: AsyncConnection, rule: Rule, scope: Mapping[str, str], now: datetime, limit: int
) -> list[Exemplar]:
    """Up to ``limit`` exemplars of ``rule``'s alert on ``scope`` at ``now`` (aware), ranked,
    by the pick rule of its metric (:func:`monitor.alerts.exemplars.pick_for`) over the rule's
    window ``[now - window, now)``. Reads only."""
    pick = ex.pick_for(rule.metric)
    if limit <= 0 or pick is Pick.NONE:
        return []
    window = {"lo": now - rule.window, "hi": now, "n": limit, "k": ex.CANDIDATES}
    if pick is Pick.DEAD_LETTERS:
        return ex.ranked(await _dead_letters(conn, window), limit)
    seg = _segment(scope)
    if seg is None:
        return []
    params = {**window, **seg}
    if pick is Pick.FAILED_CONFIDENT:
        found = await _failed_items(conn, params, "")
        return ex.ranked((_failed_confident(r) for r in found), limit)
    if pick is Pick.DRIFT_BINS:
        return ex.ranked(await _drift(conn, rule, params, limit), limit)
    if pick is Pick.INVERSION:
        return ex.ranked(await _inversion(conn, params), limit)
    if pick is Pick.SLOWEST:
        rows = await _rows(conn, _SLOWEST, params)
        return ex.ranked((_slow(r) for r in rows), limit)
    if pick is Pick.JUDGE_FLAGGED:
        rows = await _rows(conn, _FLAGGED, params)
        pattern = rule.category or ""
        return ex.ranked((_flagged(r, pattern) for r in rows if _matches(r, pattern)), limit)
    if pick is Pick.GATE_PROCEEDED_FAILED:
        rows = await _rows(conn, _GATE_PROCEEDED_FAILED, params)
        return ex.ranked((_gate(r, success=False) for r in rows), limit)
    # a conversation may hold several such decisions: read enough for ``limit`` distinct ones
    sql = text(_GATE.format(cond=_GATE_CONDITIONS[pick]))
    rows = await _rows(conn, sql, {**params, "n": limit * 10})
    return ex.ranked((_gate(r) for r in rows), limit)


async def _failed_items(conn: AsyncConnection, params: Mapping[str, Any], extra: str) -> list[Any]:
    inner = _FAILED_ITEMS.format(extra=extra)
    order = "d.confidence DESC, d.ts DESC, d.conversation_id"
    return await _rows(conn, text(_ITEM_ROWS.format(inner=inner, order=order)), params)


def _item_detail(r: Any) -> dict[str, Any]:
    _cid, event_id, ts, conf, label, source, _content = r
    return {
        "event_id": event_id,
        "ts": ts.isoformat(),
        "confidence": conf,
        "label": label,
        "label_source": source,
    }


def _failed_confident(r: Any) -> Exemplar:
    reason = ex.failed_confident_reason(float(r[3]), r[5], r[6])
    return Exemplar(str(r[0]), reason, _item_detail(r))


async def _drift(
    conn: AsyncConnection, rule: Rule, params: Mapping[str, Any], limit: int
) -> list[Exemplar]:
    """The moved bins' items of the latest fired check (:data:`monitor.alerts.exemplars.
    PICK_RULES`); none when no check of the window fired."""
    now = params["hi"]
    found = await _rows(conn, _DRIFT_CHECK, {**params, "hi": now + _DRIFT_SLACK, "test": rule.test})
    if not found:
        return []
    version, b_from, b_to, r_from, r_to, fired_tests, _why = found[0]
    seg = Segment(params["agent"], version, params["domain"], params["tier"])
    sums = {}
    for name, lo, hi in (("reference", b_from, b_to), ("recent", r_from, r_to)):
        by = await bin_sums(conn.engine, seg, lo, hi, group_by=())
        sums[name] = by.get(())
    if sums["reference"] is None or sums["recent"] is None:
        return []
    bins, by_accuracy = ex.moved_bins(ex.bin_moves(sums["reference"], sums["recent"]))
    check = {
        "baseline_from": b_from.isoformat(),
        "baseline_to": b_to.isoformat(),
        "recent_from": r_from.isoformat(),
        "recent_to": r_to.isoformat(),
        "fired_tests": [t for t in str(fired_tests).split(",") if t],
        "agent_version": version,
    }
    out: list[Exemplar] = []
    for move in bins:
        if len({e.conversation_id for e in out}) >= limit:
            break
        p = {
            **params,
            "lo": r_from,
            "hi": r_to,
            "version": version,
            "c_lo": move.lower,
            "c_hi": move.upper,
            "last": move.bin == DEFAULT_BINS - 1,
        }
        if by_accuracy:
            rows = await _failed_items(conn, p, _BIN_FILTER)
        else:
            inner = _RECENT_ITEMS.format(extra=_BIN_FILTER)
            order = "d.ts DESC, d.event_id DESC"
            sql = text(_ITEM_ROWS.format(inner=inner, order=order))
            rows = await _rows(conn, sql, {**p, "n": limit * 10})  # several per conversation
        for r in rows:
            detail = {
                **_item_detail(r),
                "bin": move.label(),
                "accuracy_recent": move.accuracy_recent,
                "accuracy_reference": move.accuracy_reference,
                "share_recent": move.share_recent,
                "share_reference": move.share_reference,
                "z": move.z,
                "check": check,
            }
            failed = r[4] == 0
            reason = ex.drift_reason(move, by_accuracy, float(r[3]), failed, r[6])
            out.append(Exemplar(str(r[0]), reason, detail))
    return out


async def _inversion(conn: AsyncConnection, params: Mapping[str, Any]) -> list[Exemplar]:
    rows = await _rows(conn, _INVERSION, params)
    escalated: list[Exemplar] = []
    missed: list[Exemplar] = []
    for cid, conf, esc, ok, trigger in rows:
        detail = {
            "min_confidence": conf,
            "escalated": esc,
            "success": ok,
            "escalation_trigger": trigger,
        }
        e = Exemplar(str(cid), ex.inversion_reason(float(conf), bool(esc), ok, trigger), detail)
        (escalated if esc else missed).append(e)
    return ex.alternate(escalated, missed)


def _slow(r: Any) -> Exemplar:
    cid, seconds, turns, trigger, why = r
    detail = {"seconds": seconds, "turns": turns, "escalation_trigger": trigger, "reason": why}
    return Exemplar(str(cid), ex.slow_reason(float(seconds), turns, trigger, why), detail)


def _matches(r: Any, pattern: str) -> bool:
    return any(category_matches(pattern, str(c)) for c in r[5] or [])


def _flagged(r: Any, pattern: str) -> Exemplar:
    vid, cid, judge, version, item, cats, evidence, rationale, created = r
    detail = {
        "verdict_id": vid,
        "judge": judge,
        "judge_version": version,
        "item_id": item,
        "categories": [str(c) for c in cats or []],
        "rationale": rationale,
        "evidence": ex.bounded_evidence(evidence),
        "created_at": created.isoformat(),
    }
    return Exemplar(str(cid), ex.judge_reason(judge, rationale, evidence), detail)


def _gate(r: Any, success: bool | None = None) -> Exemplar:
    cid, ts, event_id = r[0], r[1], r[2]
    gate: Mapping[str, Any] = r[3] if isinstance(r[3], Mapping) else {}
    detail = {"event_id": event_id, "ts": ts.isoformat(), "gate": dict(gate)}
    if success is not None:
        detail["success"] = success
        detail["outcome_source"] = r[4]
    return Exemplar(str(cid), ex.gate_reason(gate, success), detail)


async def _dead_letters(conn: AsyncConnection, params: Mapping[str, Any]) -> list[Exemplar]:
    out = []
    for lid, reason, where, detail, received, raw in await _rows(conn, _DEAD_LETTERS, params):
        facts = {
            "dead_letter_id": lid,
            "reason": reason,
            "field": where,
            "detail": detail,
            "received_at": received.isoformat(),
        }
        why = ex.dead_letter_reason(int(lid), str(reason), where, str(detail))
        out.append(Exemplar(_named_conversation(bytes(raw or b"")), why, facts))
    return out


def _named_conversation(raw: bytes) -> str | None:
    """The ``conversation_id`` a dead letter's bytes name, when they parse as a JSON object."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    cid = data.get("conversation_id") if isinstance(data, dict) else None
    return cid if isinstance(cid, str) and cid else None


async def record(
    conn: AsyncConnection,
    rules: Mapping[str, Rule],
    fired: Sequence[AlertState],
    now: datetime,
    limit: int,
) -> int:
    """Choose, promote and store the exemplars of the alerts ``fired`` at ``now`` (module
    docstring); returns the rows stored. A state whose rule is unknown gets none.

    Runs in a savepoint: when choosing fails (a query error, a bug), it is logged and undone,
    and the alerts page without exemplars (0 is returned): an exemplar never costs a page."""
    if not fired or limit <= 0:
        return 0
    try:
        async with conn.begin_nested():
            return await _record(conn, rules, fired, now, limit)
    except Exception:  # the page matters more than its examples
        log.exception("alert exemplars not stored; the alerts page without them")
        return 0


async def _record(
    conn: AsyncConnection,
    rules: Mapping[str, Rule],
    fired: Sequence[AlertState],
    now: datetime,
    limit: int,
) -> int:
    chosen: list[tuple[AlertState, list[Exemplar]]] = []
    for state in fired:
        rule = rules.get(state.rule)
        if rule is not None and state.fired_at is not None:
            found = await choose(conn, rule, state.scope, now, limit)
            chosen.append((state, [e.without_secrets() for e in found]))
    ids = sorted({e.conversation_id for _, found in chosen for e in found if e.conversation_id})
    if ids:
        await conn.execute(LOCK_CONVERSATIONS, {"ids": ids})
        await conn.execute(PROMOTE, {"ids": ids})
    rows = [
        {
            "fingerprint": state.fingerprint,
            "fired_at": state.fired_at,
            "rank": e.rank,
            "rule": state.rule,
            "conversation_id": e.conversation_id,
            "reason": e.reason,
            "detail": json.loads(json.dumps(dict(e.detail), default=str)),
        }
        for state, found in chosen
        for e in found
    ]
    if not rows:
        return 0
    stmt = (
        insert(alert_exemplars)
        .values(rows)
        .on_conflict_do_nothing(index_elements=["fingerprint", "fired_at", "rank"])
    )
    return int((await conn.execute(stmt)).rowcount)


async def load(
    conn: AsyncConnection, fingerprints: Sequence[str]
) -> dict[tuple[str, datetime], list[Exemplar]]:
    """The stored exemplars of ``fingerprints``, by (fingerprint, fired_at), ranked."""
    if not fingerprints:
        return {}
    t = alert_exemplars.c
    q = (
        select(t.fingerprint, t.fired_at, t.rank, t.conversation_id, t.reason, t.detail)
        .where(t.fingerprint.in_(bindparam("fps", expanding=True)))
        .order_by(t.fingerprint, t.fired_at, t.rank)
    )
    out: dict[tuple[str, datetime], list[Exemplar]] = {}
    for fp, at, rank, cid, reason, detail in await _rows(
        conn, q, {"fps": sorted(set(fingerprints))}
    ):
        out.setdefault((fp, at), []).append(Exemplar(cid, reason, detail or {}, int(rank)))
    return out


async def attach(conn: AsyncConnection, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``payloads`` with ``"exemplars"`` added where a member's episode has stored exemplars
    (:mod:`monitor.alerts.exemplars`, module docstring; resolved members get none). Payloads
    are changed in place and returned; when the read fails (in a savepoint) it is logged and
    they go out without exemplars."""
    wanted: dict[str, list[tuple[dict[str, Any], str, datetime]]] = {}
    for payload in payloads:
        members = payload.get("notifications", [payload])
        for m in members:
            if m.get("kind") == "resolved":
                continue
            fired = datetime.fromisoformat(str(m["fired_at"]))
            episode = f"{m['fingerprint']}:{m['fired_at']}"
            wanted.setdefault(str(m["fingerprint"]), []).append((payload, episode, fired))
    if not wanted:
        return payloads
    try:
        async with conn.begin_nested():
            stored = await load(conn, list(wanted))
    except Exception:  # the page matters more than its examples
        log.exception("alert exemplars not read; the notifications go without them")
        return payloads
    for fp, uses in wanted.items():
        for payload, episode, fired in uses:
            found = stored.get((fp, fired))
            if found:
                payload.setdefault("exemplars", {})[episode] = [e.brief() for e in found]
    return payloads
