"""Map tau2-bench results files to ``agent-event/v1`` events (pure: no I/O library).

A tau2-bench results file is one JSON object ``{timestamp, info, tasks, simulations}`` as the
tau2 runner writes it. Every simulation becomes one conversation, in this order:

- every ``assistant`` / ``user`` (/ ``system``) message -> a ``message`` event, with its tool
  calls (id, name, arguments) kept; ``confidence`` stays ``None`` (tau2 records none);
- right after a message that calls ``transfer_to_human_agents`` -> an ``escalation`` event
  (trigger ``agent``, reason = the call's ``summary``/``reason`` argument, same ts and turn);
- every ``tool`` message -> a ``tool_result`` event (``ok = not error``; the error text is the
  tool output when ``error`` is true); its ``name`` comes from the call it answers;
- ``reward_info.reward`` -> one ``outcome`` event (source ``ground_truth``, success = reward
  >= 1, reward clipped to [0, 1]) stamped at the simulation's ``end_time`` or, if that is not
  strictly later than the last message, 1 ms after the last message. A simulation without a
  numeric reward gets no outcome.

Identity is deterministic so a replay never double counts: ``conversation_id`` is
``tau2:{simulation id}`` (tau2 ids are uuid4s; a simulation without an id falls back to
``tau2:{file timestamp}:{task_id}:{trial}``) and ``event_id`` is ``{conversation_id}:{n}`` with
``n`` the event's position in the conversation. The agent id is
``{agent_info.implementation}:{agent_info.llm}`` (``llm_agent:...`` vs ``retry_agent:...``).
Timestamps without a zone are UTC; a message without a parseable timestamp inherits the
previous one (the first one inherits ``start_time``).
Context: domain from ``environment_info.domain_name``, ``task_id``, ``trial``, channel ``chat``.
Events are not size-checked here: one over 256 KiB (a huge tool output) would be dead-lettered
by ingest with reason ``oversize``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeGuard

from monitor.contract.events import (
    Agent,
    AgentEvent,
    Context,
    EscalationPayload,
    MessagePayload,
    OutcomePayload,
    ToolCall,
    ToolResultPayload,
)
from monitor.core.errors import ReplayError

TRANSFER_TOOL = "transfer_to_human_agents"
_MESSAGE_ROLES = ("assistant", "user", "system")
_OUTCOME_GAP = timedelta(milliseconds=1)


def is_tau2_results(obj: object) -> TypeGuard[Mapping[str, Any]]:
    """True if ``obj`` (parsed JSON) looks like a tau2-bench results file.

    Requires a dict with an ``info`` object and a ``simulations`` list whose items (if any) are
    objects with a ``messages`` list. ``timestamp`` and ``tasks`` are optional.
    """
    if not isinstance(obj, Mapping):
        return False
    sims = obj.get("simulations")
    if not isinstance(obj.get("info"), Mapping) or not isinstance(sims, list):
        return False
    return all(isinstance(s, Mapping) and isinstance(s.get("messages"), list) for s in sims)


@dataclass(frozen=True)
class Tau2Run:
    """File-level identity shared by every simulation of one results file."""

    agent: Agent
    domain: str | None
    file_timestamp: str | None

    @classmethod
    def from_results(cls, results: Mapping[str, Any]) -> Tau2Run:
        """Read agent and domain from ``results['info']`` (missing parts become defaults)."""
        info = results.get("info") or {}
        agent_info = info.get("agent_info") or {}
        impl = _opt_str(agent_info.get("implementation"))
        llm = _opt_str(agent_info.get("llm"))
        agent_id = ":".join(p for p in (impl, llm) if p) or "tau2-agent"
        commit = _opt_str(info.get("git_commit"))
        env = info.get("environment_info") or {}
        return cls(
            agent=Agent(id=agent_id[:128], model=llm, version=commit[:12] if commit else None),
            domain=_opt_str(env.get("domain_name")),
            file_timestamp=_opt_str(results.get("timestamp")),
        )


def tau2_events(results: object) -> list[AgentEvent]:
    """All events of a parsed results object, simulation by simulation, in file order.

    Raises:
        ReplayError: ``results`` is not tau2 results, or a simulation is malformed (the message
            names the simulation index and message index).
    """
    if not is_tau2_results(results):
        raise ReplayError("not a tau2-bench results object (needs 'info' and 'simulations')")
    run = Tau2Run.from_results(results)
    events: list[AgentEvent] = []
    for index, sim in enumerate(results["simulations"]):
        try:
            events.extend(simulation_events(sim, run))
        except (KeyError, TypeError, ValueError) as exc:
            raise ReplayError(f"simulation #{index}: {exc}") from exc
    return events


def tau2_file_events(path: Path) -> list[AgentEvent]:
    """Read a results file (UTF-8 JSON) and return :func:`tau2_events` of it.

    Raises:
        ReplayError: unreadable file, invalid JSON, not tau2 results, malformed simulation.
    """
    try:
        results = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReplayError(f"{path}: cannot read tau2 results: {exc}") from exc
    try:
        return tau2_events(results)
    except ReplayError as exc:
        raise ReplayError(f"{path}: {exc}") from exc


def conversation_id_for(sim: Mapping[str, Any], run: Tau2Run) -> str:
    """``tau2:{simulation id}``, or ``tau2:{file ts}:{task}:{trial}`` when the id is missing."""
    sim_id = _opt_str(sim.get("id"))
    if sim_id:
        cid = f"tau2:{sim_id}"
    else:
        cid = f"tau2:{run.file_timestamp}:{sim.get('task_id')}:{sim.get('trial')}"
    if len(cid) > 118:  # leave room for ":{n}" in event ids (limit 128)
        raise ValueError(f"conversation id too long ({len(cid)} chars)")
    return cid


@dataclass
class _Builder:
    """Accumulates one conversation's events with sequential ids."""

    cid: str
    run: Tau2Run
    context: Context
    events: list[AgentEvent] = field(default_factory=list)

    def add(self, ts: datetime, turn: int | None, payload: Any, **extra: Any) -> None:
        self.events.append(
            AgentEvent.of(
                payload,
                event_id=f"{self.cid}:{len(self.events)}",
                ts=ts,
                conversation_id=self.cid,
                agent=self.run.agent,
                context=self.context,
                turn=turn,
                **extra,
            )
        )


def simulation_events(sim: Mapping[str, Any], run: Tau2Run) -> list[AgentEvent]:
    """The events of one simulation (see the module docstring for the mapping).

    Raises:
        ValueError: an unknown message role, or a missing start timestamp on the first message.
        KeyError / TypeError: structurally malformed simulation.
    """
    cid = conversation_id_for(sim, run)
    trial = sim.get("trial")
    task_id = sim.get("task_id")
    context = Context(
        domain=run.domain,
        task_id=None if task_id is None else str(task_id),
        trial=trial if isinstance(trial, int) and not isinstance(trial, bool) else None,
        channel="chat",
    )
    b = _Builder(cid, run, context)
    call_names: dict[str, str] = {}
    ts = _parse_ts(sim.get("start_time"))
    for pos, msg in enumerate(sim["messages"]):
        ts = _parse_ts(msg.get("timestamp")) or ts
        if ts is None:
            raise ValueError(f"message #{pos}: no timestamp and no simulation start_time")
        turn = msg.get("turn_idx")
        turn = turn if isinstance(turn, int) and turn >= 0 else pos
        role = msg.get("role")
        if role == "tool":
            call_id = _opt_str(msg.get("id")) or f"call-{turn}"
            error = bool(msg.get("error"))
            content = _opt_str(msg.get("content"))
            b.add(
                ts,
                turn,
                ToolResultPayload(
                    call_id=call_id,
                    name=call_names.get(call_id, "unknown"),
                    ok=not error,
                    content=content,
                    error=(content or "tool error") if error else None,
                ),
            )
            continue
        if role not in _MESSAGE_ROLES:
            raise ValueError(f"message #{pos}: unknown role {role!r}")
        calls = [_tool_call(c, turn, j) for j, c in enumerate(msg.get("tool_calls") or [])]
        call_names.update((c.id, c.name) for c in calls)
        b.add(
            ts,
            turn,
            MessagePayload(role=role, content=_opt_str(msg.get("content")), tool_calls=calls),
            attributes=_message_attributes(msg),
        )
        for call in calls:
            if call.name == TRANSFER_TOOL:
                b.add(ts, turn, EscalationPayload(trigger="agent", reason=_reason(call.arguments)))
    outcome = _outcome(sim)
    if outcome is not None and ts is not None:
        end = _parse_ts(sim.get("end_time"))
        b.add(
            end if end is not None and end > ts else ts + _OUTCOME_GAP,
            None,
            outcome,
            attributes=_outcome_attributes(sim),
        )
    return b.events


def _tool_call(raw: Mapping[str, Any], turn: int, j: int) -> ToolCall:
    args = raw.get("arguments")
    if isinstance(args, str):  # some providers serialise arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            args = {"raw": args}
    if not isinstance(args, dict):
        args = {} if args is None else {"value": args}
    return ToolCall(
        id=_opt_str(raw.get("id")) or f"call-{turn}-{j}",
        name=_opt_str(raw.get("name")) or "unknown",
        arguments=args,
    )


def _reason(arguments: Mapping[str, Any]) -> str | None:
    for key in ("summary", "reason"):
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return value
    return json.dumps(arguments, sort_keys=True) if arguments else None


def _outcome(sim: Mapping[str, Any]) -> OutcomePayload | None:
    reward = (sim.get("reward_info") or {}).get("reward")
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        return None
    clipped = min(1.0, max(0.0, float(reward)))
    return OutcomePayload(success=reward >= 1.0, reward=clipped, source="ground_truth")


def _message_attributes(msg: Mapping[str, Any]) -> dict[str, Any] | None:
    attrs = {k: msg[k] for k in ("cost", "usage") if msg.get(k) is not None}
    return attrs or None


def _outcome_attributes(sim: Mapping[str, Any]) -> dict[str, Any]:
    info = sim.get("reward_info") or {}
    attrs = {
        "termination_reason": sim.get("termination_reason"),
        "reward_raw": info.get("reward"),
        "reward_breakdown": info.get("reward_breakdown"),
        "duration_s": sim.get("duration"),
        "agent_cost": sim.get("agent_cost"),
        "user_cost": sim.get("user_cost"),
    }
    return {k: v for k, v in attrs.items() if v is not None}


def _parse_ts(value: object) -> datetime | None:
    """ISO 8601 string -> aware datetime (naive means UTC); anything else -> ``None``."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _opt_str(value: object) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)
