"""``monitor simulate``: deterministic synthetic traffic to a JSON Lines file or to Kafka.

The agents' true behaviour is known by construction (see :mod:`monitor.sim.traffic`), so what the
monitor reports can be checked against it. Exit codes: 0 done, 1 delivery failed, 2 bad
options or no Kafka bootstrap configured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import typer
from rich.console import Console

from monitor.cli.replay import fail, kafka_target, print_summary, replay_items
from monitor.contract.events import AgentEvent
from monitor.core.clock import SystemClock
from monitor.core.errors import MonitorError
from monitor.replay.send import ReplayReport, run_replay
from monitor.sim.traffic import Simulator, default_agents

DEFAULT_CONVERSATIONS = 200


def _parse_start(value: str | None) -> datetime:
    if value is None:
        return SystemClock().now().replace(microsecond=0)
    try:
        start = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        fail(f"--start {value!r} is not an ISO 8601 timestamp", 2)
    if start.tzinfo is None:
        fail("--start needs a time zone (e.g. 2025-01-01T00:00:00Z)", 2)
    return start


async def _write_jsonl(
    events: Iterator[AgentEvent], output: Path, rate: float | None
) -> ReplayReport:
    """Write one compact JSON event per line (UTF-8, ``\n``) through the replay flow."""
    with output.open("wb") as fh:

        async def send(event: AgentEvent) -> None:
            fh.write(event.to_json() + b"\n")

        return await run_replay(events, send, rate=rate)


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    def simulate(
        seed: int = typer.Option(7, "--seed", help="Random seed; same seed + start = same events."),
        conversations: int | None = typer.Option(
            None,
            "--conversations",
            "-n",
            min=1,
            help=f"Number of conversations (default {DEFAULT_CONVERSATIONS}).",
        ),
        duration: float | None = typer.Option(
            None,
            "--duration",
            min=0.001,
            help="Simulated seconds of traffic instead of --conversations.",
        ),
        interval: float = typer.Option(
            5.0, "--interval", min=0.001, help="Simulated seconds between conversation starts."
        ),
        start: str | None = typer.Option(
            None, "--start", help="Simulated start time, ISO 8601 with zone (default: now)."
        ),
        change_point_minutes: float | None = typer.Option(
            None,
            "--change-point-minutes",
            help="When the drifting agent turns overconfident, in simulated minutes after "
            "--start (default: the middle of the simulated span).",
        ),
        rate: float | None = typer.Option(
            None, "--rate", min=0.001, help="Emit at most this many events per second."
        ),
        output: Path | None = typer.Option(
            None, "--output", "-o", help="Write JSON Lines here instead of sending to Kafka."
        ),
        bootstrap: str | None = typer.Option(
            None, "--bootstrap", help="Kafka HOST:PORT (default: MONITOR_KAFKA_BOOTSTRAP)."
        ),
        topic: str | None = typer.Option(
            None, "--topic", help="Events topic (default: MONITOR_TOPIC_EVENTS, agent-events)."
        ),
    ) -> None:
        """Generate synthetic agent traffic with known calibration, drift and escalation.

        Agents: calibrated, overconfident, drifting (turns overconfident at the change point)
        and inverted (escalates more when more confident). Events are in time order; each
        conversation's outcome arrives 30-600 simulated seconds after its last message.
        """
        if conversations is not None and duration is not None:
            fail("give --conversations or --duration, not both", 2)
        begin = _parse_start(start)
        step = timedelta(seconds=interval)
        if duration is not None:
            span = timedelta(seconds=duration)
            count = -(-span // step)
        else:
            count = conversations or DEFAULT_CONVERSATIONS
            span = count * step
        offset = (
            span / 2 if change_point_minutes is None else timedelta(minutes=change_point_minutes)
        )
        sim = Simulator(seed, begin, default_agents(begin + offset), interval=step)
        events = sim.events(count)
        console = Console()
        try:
            if output is not None:
                report = asyncio.run(_write_jsonl(events, output, rate))
                where = f"wrote {report.sent} events to {output}"
            else:
                target = kafka_target(bootstrap, topic)
                report = asyncio.run(
                    replay_items(
                        events,
                        total=None,
                        target=target,
                        rate=rate,
                        strict=True,
                        label=f"simulating {count} conversations",
                    )
                )
                where = f"sent {report.sent} events to {target[1]}@{target[0]}"
        except (MonitorError, OSError) as exc:
            fail(f"simulate failed: {exc}", 1)
        print_summary(
            console,
            report,
            f"{count} conversations (seed {seed}, start {begin.isoformat()}, drift at "
            f"{(begin + offset).isoformat()}): {where}",
        )
