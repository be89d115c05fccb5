"""The SQL that keeps ``escalation_bins`` in step with ``conversations``.

``escalation_bins`` (:mod:`monitor.store.tables_rollups`) counts the sampled conversations
(``sample_weight > 0``) per window of their ``first_ts`` and per escalation key (the columns
of :data:`KEY_COLUMNS`). A conversation row *image* (a row of ``conversations`` before or after
a change) maps to one key by :func:`key_select`; a change adds +1 to the key of the after image
and -1 to the key of the before image, at every resolution (:data:`RESOLUTIONS`). So the table
stays equal to ``GROUP BY key`` over the current ``conversations`` whatever the order of the
changes, and an unchanged row (a replayed event) adds nothing.

Maintained in the same two places as ``calibration_bins``' inputs:

- the batch statement (:mod:`monitor.ingest.rollup_sql`): before image = the row read in the
  statement's snapshot, after image = ``RETURNING`` of the upsert. The writer takes the
  conversations' advisory lock (:data:`monitor.ingest.items_sql.LOCK_CONVERSATIONS`) *before*
  the statement, so no other writer changes those rows between the snapshot and the upsert;
- the sampling decision: a new conversation row decided in the batch statement itself
  (:mod:`monitor.ingest.decisions`) has no before image and its after image has its weight;
  one decided afterwards (:data:`monitor.ingest.items_sql.SET_DECISIONS`) has a before image
  without weight (contributes nothing) and an after image that adds the conversation.

Each sampled conversation is counted in two kinds of rows: ``kind`` 0 holds its confidence,
escalated flag, outcome and weight (``turns`` / ``seconds_bucket`` -1); an escalated one has
also a ``kind`` 1 row with its weight, turns and seconds (``conf_milli`` / ``outcome`` -1).
Splitting them keeps the table small: the timing of escalated conversations would otherwise
make nearly every escalated conversation its own key. Nothing reads timing jointly with
confidence or outcome (time to escalation is a quantile over escalated conversations), so the
read pairs them back per (agent, weight) without changing any result
(:mod:`monitor.analytics.repo_escalation`). Kinds 2 and 3 are the two marginals of kind 1
(kind 2: ``turns`` -1, kind 3: ``seconds_bucket`` -1; migration 0021): the dashboards' time
to escalation panels read one quantity at a time, and a marginal's hourly rows stop growing
with traffic once its values are all seen (a few hundred seconds buckets, a few dozen turns),
where kind 1's (turns x seconds) pairs keep growing: at 10 times the benchmark's traffic an
hour held about 850 kind-1 rows per 385 + 24 of the marginals.

Exactness (what a read gets back from a key):

- ``conf_milli`` = ``round(min_confidence * 1000)``: exact for confidences with at most 3
  decimals (the read returns ``conf_milli / 1000``, the same double); otherwise off by at most
  0.0005. -1 = no confidence.
- ``escalated``, ``outcome`` (-1 unknown, 0 failed, 1 success), ``weight`` and ``turns``
  (``escalation_turn - first_turn``, -1 = no turn): exact.
- ``seconds_bucket``: seconds from the first event to the escalation, bucket 0 = [0, 1 ms],
  bucket ``b`` >= 1 = (1 ms * 2^((b-1)/16), 1 ms * 2^(b/16)]; the read returns the upper edge
  (0 for bucket 0), so a value read back is at most 4.4 % (2^(1/16)) above the exact one, or
  1 ms for bucket 0; any weighted quantile of them is then within the same bound. -1 = none.
"""

from __future__ import annotations

from monitor.store.tables_rollups import ESCALATION_KEY, SECONDS_BASE, SECONDS_PER_DOUBLING

#: the kinds of rows: 0 the conversation, 1 its timing (turns and seconds), 2 its seconds
#: alone, 3 its turns alone (module docstring)
KINDS = (0, 1, 2, 3)

#: resolutions kept, as in calibration_bins (name -> date_trunc unit)
RESOLUTIONS = {"1h": "hour", "1d": "day"}

#: the key of an ``escalation_bins`` row within its window
KEY_COLUMNS = ESCALATION_KEY

#: columns of ``conversations`` a key is computed from (the upsert returns them; also what
#: monitor.ingest.conversation_minutes_sql reads of the same images)
IMAGE_COLUMNS = (
    "conversation_id",
    "first_ts",
    "agent_id",
    "agent_version",
    "domain",
    "tier",
    "min_confidence",
    "escalated",
    "outcome_success",
    "sample_weight",
    "escalation_turn",
    "first_turn",
    "escalated_at",
    "tool_errors",
    "tool_results",
)


def seconds_bucket_sql(seconds: str) -> str:
    """SQL for the ``seconds_bucket`` of ``seconds`` (float8 >= 0), see the module docstring."""
    return (
        f"(CASE WHEN {seconds} <= {SECONDS_BASE} THEN 0 ELSE "
        f"ceil({SECONDS_PER_DOUBLING} * ln({seconds} / {SECONDS_BASE}) / ln(2))::int END)"
    )


def key_select(x: str, kind: int) -> str:
    """The escalation key of the row image ``x`` (a table alias) for row ``kind`` (see
    :data:`KINDS`; 1-3 only for escalated ones), in :data:`KEY_COLUMNS` order."""
    secs = f"greatest(0, extract(epoch FROM {x}.escalated_at - {x}.first_ts))::float8"
    segment = [
        f"{x}.agent_id",
        f"coalesce({x}.agent_version, '')",
        f"coalesce({x}.domain, '')",
        f"coalesce({x}.tier, 0)::smallint",
    ]
    if kind == 0:
        return ", ".join(
            [
                "0::smallint",
                *segment,
                f"coalesce(round({x}.min_confidence * 1000)::smallint, -1::smallint)",
                f"{x}.escalated",
                f"(CASE WHEN {x}.outcome_success IS NULL THEN -1 "
                f"WHEN {x}.outcome_success THEN 1 ELSE 0 END)::smallint",
                f"{x}.sample_weight",
                "-1",
                "-1::smallint",
            ]
        )
    turns = f"coalesce({x}.escalation_turn - coalesce({x}.first_turn, 0), -1)"
    bucket = (
        f"(CASE WHEN {x}.escalated_at IS NOT NULL "
        f"THEN {seconds_bucket_sql(secs)} ELSE -1 END)::smallint"
    )
    return ", ".join(
        [
            f"{kind}::smallint",
            *segment,
            "-1::smallint",
            "true",
            "-1::smallint",
            f"{x}.sample_weight",
            turns if kind != 2 else "-1",
            bucket if kind != 3 else "-1::smallint",
        ]
    )


def image_rows(rel: str, x: str, sign: int) -> str:
    """``SELECT sign, first_ts, key...`` for both kinds of rows of every sampled row of
    ``rel`` (aliased ``x``), as a UNION ALL."""
    return " UNION ALL ".join(
        f"SELECT {sign}, {x}.first_ts, {key_select(x, kind)} FROM {rel} {x} "
        f"WHERE {x}.sample_weight > 0" + (f" AND {x}.escalated" if kind else "")
        for kind in KINDS
    )


_KEY = ", ".join(KEY_COLUMNS)
_RES = ", ".join(f"('{name}', '{unit}')" for name, unit in RESOLUTIONS.items())
_N = ", ".join(str(i) for i in range(1, len(KEY_COLUMNS) + 3))


def upsert_deltas(after: str, before: str | None) -> str:
    """``INSERT ... ON CONFLICT`` adding +1 per key of every sampled row of the relation
    ``after`` and -1 per key of ``before`` (None: no before image) to ``escalation_bins``, at
    every resolution, in key order; keys whose changes cancel are not written. Ends in
    ``RETURNING 1`` so it can be a CTE."""
    changes = image_rows(after, "a", 1)
    if before is not None:
        changes += " UNION ALL " + image_rows(before, "o", -1)
    return f"""INSERT INTO escalation_bins AS eb (resolution, window_start, {_KEY}, conversations)
  SELECT r.resolution, date_trunc(r.unit, k.first_ts, 'UTC'), {
        ", ".join(f"k.{c}" for c in KEY_COLUMNS)
    }, sum(k.sign)
  FROM ({changes}) AS k(sign, first_ts, {_KEY})
  CROSS JOIN (VALUES {_RES}) AS r(resolution, unit)
  GROUP BY {_N} HAVING sum(k.sign) <> 0
  ORDER BY {_N}
  ON CONFLICT (resolution, window_start, {_KEY}) DO UPDATE SET
    conversations = eb.conversations + EXCLUDED.conversations
  RETURNING 1"""
