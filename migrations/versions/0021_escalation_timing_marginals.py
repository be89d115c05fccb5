"""escalation roll-up: the marginals of the timing rows (kinds 2 and 3 of ``escalation_bins``)

Kind 1 rows count escalated conversations per (segment, weight, turns, seconds bucket): pairs
that keep growing with traffic, so the dashboards' time-to-escalation panels, which read one
quantity at a time, grew with it (3-5x from the 1M store to 10 times its density). Kind 2 is
kind 1 with ``turns`` -1 (seconds alone), kind 3 kind 1 with ``seconds_bucket`` -1 (turns
alone); the ingest path keeps them from the same row images
(:mod:`monitor.ingest.escalation_sql`). The upgrade back-fills both from the stored kind 1
rows, at both resolutions; the downgrade deletes them. No column or view changes.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26 18:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEGMENT = "agent_id, agent_version, domain, tier"
KEY_COLUMNS = ("kind", "agent_id", "agent_version", "domain", "tier", "conf_milli", "escalated",
               "outcome", "weight", "turns", "seconds_bucket")
# kind -> (turns, seconds_bucket) of its rows, from a kind 1 row, and the column kept
MARGINALS = {2: ("-1", "seconds_bucket", "seconds_bucket"), 3: ("turns", "-1::smallint", "turns")}


def backfill(kind: int) -> str:
    """The kind ``kind`` rows as sums of the stored kind 1 rows (also the tests' reference)."""
    turns, seconds, kept = MARGINALS[kind]
    return f"""
INSERT INTO escalation_bins (resolution, window_start, {", ".join(KEY_COLUMNS)}, conversations)
SELECT resolution, window_start, {kind}::smallint, {SEGMENT}, -1::smallint, true, -1::smallint,
  weight, {turns}, {seconds}, sum(conversations)
FROM escalation_bins WHERE kind = 1
GROUP BY resolution, window_start, {SEGMENT}, weight, {kept}
HAVING sum(conversations) <> 0"""


def upgrade() -> None:
    for kind in MARGINALS:
        op.execute(backfill(kind))


def downgrade() -> None:
    op.execute(f"DELETE FROM escalation_bins WHERE kind IN ({', '.join(map(str, MARGINALS))})")
