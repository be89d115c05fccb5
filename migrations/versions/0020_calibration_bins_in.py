"""``calibration_bins_in(lo, hi)``: a range of calibration bins as days, hours and edge minutes

The calibration dashboard's "selected range" panels (ECE, Brier, accuracy, labelled items,
reliability diagram, confidence histogram) summed the 1-minute rows of the whole range up to 2
days, the hourly rows beyond: rows that grow with traffic (a 24 h range at 10 times the 1M
store's density: 4-6 times slower), and for long ranges whole hours at the edges. This
function returns the rows of ``v_calibration_bins`` whose windows start in ``[lo, hi]``
(Grafana's ``$__timeFilter``), read as whole UTC days in the middle, whole hours around them
and minutes only at the edges: the same sums as the minute rows (every resolution holds the
same items), like ``monitor.analytics.repo.bin_pieces``. The downgrade drops it.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26 16:50:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROLE = "monitor_readonly"
# h_lo / h_hi: the whole hours inside [lo, hi]; d_lo / d_hi: the whole days inside those.
# Minutes are read in [lo, h_lo) and [h_hi, hi] (all of [lo, hi] when no whole hour fits),
# hours in [h_lo, d_lo) and [d_hi, h_hi) (all of [h_lo, h_hi) when no whole day fits).
FUNCTION = """
CREATE FUNCTION calibration_bins_in(lo timestamptz, hi timestamptz)
RETURNS SETOF v_calibration_bins LANGUAGE sql STABLE AS $$
  SELECT v.* FROM v_calibration_bins v
  CROSS JOIN LATERAL (SELECT h_lo, h_hi,
      greatest(h_lo, date_trunc('day', lo, 'UTC') + CASE WHEN lo = date_trunc('day', lo, 'UTC')
        THEN interval '0' ELSE interval '1 day' END) AS d_lo,
      least(h_hi, date_trunc('day', hi, 'UTC')) AS d_hi
    FROM (SELECT date_trunc('hour', lo, 'UTC') + CASE WHEN lo = date_trunc('hour', lo, 'UTC')
            THEN interval '0' ELSE interval '1 hour' END AS h_lo,
          date_trunc('hour', hi, 'UTC') AS h_hi) AS h) AS r
  WHERE (v.resolution = '1m' AND ((v.time >= lo AND v.time < least(r.h_lo, r.h_hi))
                                  OR (v.time >= greatest(r.h_hi, lo) AND v.time <= hi)))
     OR (v.resolution = '1h' AND ((v.time >= r.h_lo AND v.time < least(r.d_lo, r.h_hi))
                                  OR (v.time >= greatest(r.d_hi, r.h_lo) AND v.time < r.h_hi)))
     OR (v.resolution = '1d' AND v.time >= r.d_lo AND v.time < r.d_hi)
$$"""


def upgrade() -> None:
    op.execute(FUNCTION)
    op.execute(f"GRANT EXECUTE ON FUNCTION calibration_bins_in(timestamptz, timestamptz)"
               f" TO {ROLE}")


def downgrade() -> None:
    op.execute("DROP FUNCTION calibration_bins_in(timestamptz, timestamptz)")
