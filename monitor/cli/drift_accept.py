"""``monitor drift-accept``: accept a deliberate change as a segment's new normal.

The worker's drift checks compare each segment with a pinned reference that freezes while a
change is flagged (docs/analytics.md, "Drift: guards"), so a deliberate change (a new prompt
shipped under the same agent version) keeps the drift alert firing. This command re-pins the
reference of the selected segments to the stretch since the change
(:func:`monitor.analytics.drift_policy.accept`); the alert resolves at the next quiet check.
Segments that are not flagged are left alone unless ``--from`` is given.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import typer
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.drift_policy import Reference, accept, accepted_since
from monitor.analytics.drift_state import load_references, matching, save_references
from monitor.analytics.repo import Segment
from monitor.analytics.write import SegmentKey
from monitor.cli import analytics_common as ac


def plan(
    states: dict[SegmentKey, Reference],
    since: datetime | None,
    recent: timedelta,
    now: datetime,
) -> tuple[dict[SegmentKey, Reference], list[SegmentKey]]:
    """The new state of every segment to re-pin, and the segments skipped (not flagged and no
    ``since`` given, or a change that starts after ``now``)."""
    new: dict[SegmentKey, Reference] = {}
    skipped: list[SegmentKey] = []
    for key in sorted(states):
        start = since or accepted_since(states[key], recent)
        if start is None or start >= now:
            skipped.append(key)
            continue
        new[key] = accept(states[key], start, now)
    return new, skipped


def _name(key: SegmentKey) -> str:
    return f"{key[0]} version={key[1] or '-'} domain={key[2] or '-'} tier={key[3] or '-'}"


def register(app: typer.Typer) -> None:
    @app.command("drift-accept")
    def drift_accept(
        agent: str = typer.Option(
            ...,
            "--agent",
            "-a",
            help="Agent id (wildcards * and ? allowed; '*' accepts every flagged segment).",
        ),
        domain: str | None = ac.DOMAIN,
        tier: int | None = ac.TIER,
        version: str | None = ac.VERSION,
        start: str | None = typer.Option(
            None,
            "--from",
            help="Start of the new normal, ISO "
            "8601 (default: the start of the recent window of "
            "the first check that fired in the current episode).",
        ),
        recent: str = typer.Option(
            "1h",
            "--recent",
            help="The worker's recent window "
            "(MONITOR_DRIFT_RECENT_S), used for the default --from.",
        ),
        at: str | None = typer.Option(
            None,
            "--at",
            help="Time of the acceptance, ISO 8601 "
            "(default: now; the end of the accepted stretch).",
        ),
        dry_run: bool = typer.Option(False, "--dry-run", help="Show what would change only."),
        as_json: bool = ac.JSON,
    ) -> None:
        """Accept a deliberate change: re-pin the drift reference of the selected segments to
        the stretch since the change, so their drift alerts resolve at the next quiet check."""
        console = ac.console()
        now = ac.when(at, "--at") if at else datetime.now(UTC)
        since = ac.when(start, "--from") if start else None
        length = ac.duration(recent, "--recent")
        segment = Segment(agent, version, domain, tier)

        async def go(engine: AsyncEngine) -> tuple[dict[SegmentKey, Reference], list[SegmentKey]]:
            states = matching(await load_references(engine), segment)
            new, skipped = plan(states, since, length, now)
            if not dry_run:
                await save_references(engine, new)
            return new, skipped

        new, skipped = ac.run_with_engine(console, go)
        if as_json:
            ac.print_json(
                {
                    "dry_run": dry_run,
                    "accepted": [
                        {
                            "agent_id": k[0],
                            "agent_version": k[1],
                            "domain": k[2],
                            "tier": k[3],
                            "reference_from": r.ref_from,
                            "reference_to": r.ref_to,
                        }
                        for k, r in new.items()
                    ],
                    "skipped": [
                        {"agent_id": k[0], "agent_version": k[1], "domain": k[2], "tier": k[3]}
                        for k in skipped
                    ],
                }
            )
            return
        if not new and not skipped:
            console.print(
                f"no drift state matches --agent {agent!r} (the worker has not "
                "checked such a segment yet)",
                soft_wrap=True,
            )
            raise typer.Exit(1)
        verb = "would re-pin" if dry_run else "re-pinned"
        for key, ref in new.items():
            console.print(
                f"{verb} {_name(key)}: reference from {ref.ref_from:%Y-%m-%d %H:%M} "
                "UTC (the new normal)",
                soft_wrap=True,
            )
        for key in skipped:
            console.print(
                f"left {_name(key)}: not flagged (give --from to re-pin anyway)", soft_wrap=True
            )
