"""The LLM-judge rubric: versioned prompt, conversation rendering, strict output parsing (pure).

``build_messages`` turns a :class:`~monitor.judges.base.Conversation` into chat-completions
messages; ``parse_output`` validates the model's reply into :class:`Verdict` values or raises
:class:`MalformedOutput`; ``repair_messages`` builds the single repair request. Changing the
prompt, the rendering or the output shape means bumping :data:`PROMPT_VERSION` (it is stored with
every verdict, so verdicts from different prompts are never mixed up silently).

The model must answer with exactly one JSON object::

    {"items": [{"item_id": "<event_id of an assistant message>",
                "correctness": 0.0-1.0, "informativeness": 0.0-1.0, "consistency": 0.0-1.0,
                "label": 0 | 1,
                "categories": ["wrong_information", ...],   # from FAILURE_CATEGORIES
                "fabrication_type": "pricing" | ... | null,  # from FABRICATION_TYPES
                "rationale": "one or two sentences"}]}

with one entry per assistant message, no more and no fewer. Extra keys are ignored.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from monitor.contract.events import AgentEvent
from monitor.core.errors import MalformedOutput
from monitor.judges.base import (
    FABRICATION_TYPES,
    Conversation,
    FabricationType,
    FailureCategory,
    Verdict,
)

PROMPT_VERSION = "rubric-v1"
MAX_CONTENT_CHARS = 2000  # per rendered message / tool result / arguments
MAX_RATIONALE_CHARS = 1000
REPAIR_INSTRUCTION = "Your previous reply could not be used"

SYSTEM_PROMPT = f"""\
You are a strict reviewer of customer-service AI agents. You read one conversation between a \
user and an assistant, including the assistant's tool calls and the tool results, and you grade \
every assistant message marked with an item id like [item a1].

For each assistant message give, as numbers between 0 and 1:
- correctness: are its statements and actions right given the user's request, the tool results \
and the policies the conversation shows? (1 = fully correct)
- informativeness: does it give the user what they need to make progress? (1 = fully)
- consistency: is it consistent with the earlier conversation and the tool results? (1 = fully)
Then label it 1 if the message is right overall and 0 if it is wrong, and list its failure \
categories (empty when label is 1 and nothing is wrong):
- wrong_action: it called the wrong tool, or acted when it should not have (or did not act)
- wrong_arguments: right tool, wrong arguments
- wrong_information: it told the user something false
- policy_violation: it broke a stated policy
- partial_resolution: it resolved only part of the request
- fabrication: it asserted something no tool result or user message supports; then set \
fabrication_type to one of: {", ".join(FABRICATION_TYPES)} (otherwise null).
"authorization" fabrication means claiming an action was done (refund issued, booking \
cancelled) without a successful tool call doing it.

Answer with one JSON object and nothing else, of this exact shape:
{{"items": [{{"item_id": "<id>", "correctness": 0.0, "informativeness": 0.0, \
"consistency": 0.0, "label": 0, "categories": [], "fabrication_type": null, \
"rationale": "<one or two sentences>"}}]}}
with exactly one entry per item id, using the ids exactly as given."""


Unit = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class ItemGrade(BaseModel):
    """One graded assistant message as the model returns it (strict types, extras ignored)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    item_id: str = Field(min_length=1)
    correctness: Unit
    informativeness: Unit
    consistency: Unit
    label: Annotated[int, Field(ge=0, le=1)]
    categories: list[FailureCategory] = Field(default_factory=list)
    fabrication_type: FabricationType | None = None
    rationale: str = ""


class RubricOutput(BaseModel):
    """The whole reply: ``{"items": [...]}``."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    items: list[ItemGrade]


def _clip(text: str, limit: int = MAX_CONTENT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[truncated {len(text) - limit} chars]"


def _render_event(event: AgentEvent) -> str | None:
    msg, res = event.message, event.tool_result
    if msg is not None:
        head = f"[item {event.event_id}] assistant" if msg.role == "assistant" else msg.role
        if msg.confidence is not None and msg.role == "assistant":
            head += f" (stated confidence {msg.confidence:.2f})"
        lines = [f"{head}: {_clip(msg.content or '')}"]
        for call in msg.tool_calls:
            args = json.dumps(call.arguments, separators=(",", ":"), ensure_ascii=False)
            lines.append(f"  -> tool call {call.id} {call.name}({_clip(args)})")
        return "\n".join(lines)
    if res is not None:
        status = "ok" if res.ok else "ERROR"
        body = res.content if res.ok or res.error is None else res.error
        return f"tool result {res.call_id} {res.name} [{status}]: {_clip(body or '')}"
    if event.escalation is not None:
        esc = event.escalation
        return f"escalation to a human ({esc.trigger}): {_clip(esc.reason or '')}"
    return None  # outcome and feedback are ground truth: never shown to the judge


def render_conversation(conversation: Conversation) -> str:
    """The conversation as compact text, one entry per event, assistant messages tagged
    ``[item <event_id>]``. Outcome and feedback events are left out (they are the ground truth
    the judge is measured against). Each content, error or argument text longer than
    :data:`MAX_CONTENT_CHARS` characters is cut with a ``…[truncated N chars]`` marker; the
    events a conversation above the cap leaves out are one ``[... N events omitted ...]`` line."""
    lines = [f"conversation {conversation.conversation_id}"]
    omitted, gap = conversation.omitted, conversation.gap
    for i, event in enumerate(conversation.events):
        if i == gap and omitted is not None:
            lines.append(
                f"[... {omitted.events} events omitted (judged: the first and last "
                f"{omitted.total - omitted.events} of {omitted.total}) ...]"
            )
        if (text := _render_event(event)) is not None:
            lines.append(text)
    return "\n".join(lines)


def build_messages(conversation: Conversation) -> list[dict[str, str]]:
    """The chat-completions ``messages`` (system rubric + user conversation) for one conversation.

    Pure and deterministic: the same conversation always gives the same messages.
    """
    ids = ", ".join(e.event_id for e in conversation.assistant_messages())
    user = f"{render_conversation(conversation)}\n\nGrade these item ids: {ids}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def extract_json(text: str) -> Any:
    """The first JSON object in ``text``: the whole text, inside ```json fences, or embedded in
    prose. Raises :class:`MalformedOutput` (``no_json``) when there is none."""
    stripped = text.strip()
    candidates = [stripped]
    if "```" in stripped:
        parts = stripped.split("```")
        candidates += [p.removeprefix("json").removeprefix("JSON").strip() for p in parts[1::2]]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    decoder = json.JSONDecoder()
    start = stripped.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(stripped, start)
        except ValueError:
            start = stripped.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = stripped.find("{", start + 1)
    shown = _clip(stripped, 200) if stripped else "an empty reply"
    raise MalformedOutput("no_json", f"no JSON object found in {shown!r}")


def _validation_detail(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "reply"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def parse_output(
    text: str,
    conversation: Conversation,
    *,
    judge: str = "llm",
    judge_version: str = PROMPT_VERSION,
) -> list[Verdict]:
    """Validate the model's reply and return one ``ok`` verdict per assistant message, in
    conversation order.

    Each verdict: ``label`` from the reply, ``score`` = correctness, ``categories`` = the reply's
    categories plus ``fabrication:<type>`` when a fabrication type is given (``fabrication`` is
    added if the model named a type but forgot the category), ``rationale`` (cut to
    :data:`MAX_RATIONALE_CHARS`), and ``evidence`` with the three scores and the fabrication type.

    Raises:
        MalformedOutput: no JSON object (``no_json``), the wrong shape or out-of-range values
            (``invalid``), an item id that is not an assistant message (``unknown_item``), an id
            graded twice (``duplicate_item``), or an assistant message not graded
            (``missing_item``).
    """
    raw = extract_json(text)
    try:
        out = RubricOutput.model_validate(raw)
    except ValidationError as exc:
        raise MalformedOutput("invalid", _validation_detail(exc)) from None
    expected = [e.event_id for e in conversation.assistant_messages()]
    grades: dict[str, ItemGrade] = {}
    for grade in out.items:
        if grade.item_id not in expected:
            raise MalformedOutput(
                "unknown_item",
                f"item_id {grade.item_id!r} is not one of the item ids {expected}",
            )
        if grade.item_id in grades:
            raise MalformedOutput("duplicate_item", f"item_id {grade.item_id!r} graded twice")
        grades[grade.item_id] = grade
    missing = [i for i in expected if i not in grades]
    if missing:
        raise MalformedOutput("missing_item", f"no grade for item ids {missing}")
    return [_verdict(grades[i], conversation, judge, judge_version) for i in expected]


def _verdict(g: ItemGrade, conversation: Conversation, judge: str, version: str) -> Verdict:
    categories: list[str] = list(dict.fromkeys(g.categories))
    if g.fabrication_type is not None:
        if "fabrication" not in categories:
            categories.append("fabrication")
        categories.append(f"fabrication:{g.fabrication_type}")
    return Verdict(
        judge=judge,
        judge_version=version,
        conversation_id=conversation.conversation_id,
        item_id=g.item_id,
        label=g.label,
        score=g.correctness,
        categories=tuple(categories),
        evidence={
            "correctness": g.correctness,
            "informativeness": g.informativeness,
            "consistency": g.consistency,
            "fabrication_type": g.fabrication_type,
        },
        rationale=_clip(g.rationale, MAX_RATIONALE_CHARS) or None,
    )


def repair_messages(
    original_messages: list[dict[str, str]], bad_output: str, error: BaseException | str
) -> list[dict[str, str]]:
    """The messages of the one repair attempt: the original request, the bad reply (cut to
    :data:`MAX_CONTENT_CHARS`) as the assistant turn, then a user turn that starts with
    :data:`REPAIR_INSTRUCTION`, names what was wrong and asks for the JSON object only."""
    reason = error.detail if isinstance(error, MalformedOutput) else str(error)
    instruction = (
        f"{REPAIR_INSTRUCTION}: {reason}. Reply again with only the JSON object of the required "
        'shape ({"items": [...]}, one entry per item id, every score a number between 0 and 1, '
        "categories only from the list given), with no text or code fences around it."
    )
    return [
        *original_messages,
        {"role": "assistant", "content": _clip(bad_output)},
        {"role": "user", "content": instruction},
    ]
