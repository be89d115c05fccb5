"""A loopback OpenAI-compatible provider for the conformance suite (real aiohttp server).

``Provider`` answers ``POST /v1/chat/completions`` from a queue of scripted actions, one per
HTTP request: :class:`Answer` (a completion with text and/or tool calls, as JSON or, when the
request asks ``stream: true``, as server-sent events in several chunks, with a usage chunk when
``stream_options.include_usage``), or :class:`Fail` (any status, e.g. 500 or 429 with
``Retry-After: 0``). Every request body is recorded.

The same script also answers the OpenAI Responses API (``POST /v1/responses``: an ``output``
list of ``message`` / ``function_call`` items) and Anthropic's Messages API (``POST
/v1/messages``: ``text`` / ``tool_use`` content blocks; point the ``anthropic`` client at
``root_url``), errors in each API's own error shape; as JSON, or, when the request asks
``stream: true``, as each API's server-sent events (the Responses API's ``response.*`` events
ending in ``response.completed``; Anthropic's ``message_start`` ... ``message_stop``, text and
tool input in several deltas).
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.servers.scripted import serve_on_loopback


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Answer:
    content: str | None = None
    calls: tuple[Call, ...] = ()
    prompt_tokens: int = 11
    completion_tokens: int = 7
    response_id: str = "chatcmpl-x"


@dataclass(frozen=True)
class Fail:
    status: int
    message: str = "provider failure"
    headers: dict[str, str] = field(default_factory=dict)


Action = Answer | Fail


class Provider:
    def __init__(self) -> None:
        self.script: deque[Action] = deque()
        self.requests: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """The server's root (the ``anthropic`` client appends ``/v1/messages`` itself)."""
        return f"http://127.0.0.1:{self.port}"

    def push(self, *actions: Action) -> None:
        self.script.extend(actions)

    async def __aenter__(self) -> Provider:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/responses", self._handle_responses)
        app.router.add_post("/v1/messages", self._handle_messages)
        self._runner, self.port = await serve_on_loopback(app, shutdown_timeout=0.2)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        action = self.script.popleft() if self.script else Fail(500, "script exhausted")
        if isinstance(action, Fail):
            error = {"error": {"message": action.message, "type": "server_error", "code": None}}
            return web.json_response(error, status=action.status, headers=action.headers)
        model = body.get("model", "m")
        if not body.get("stream"):
            return web.json_response(_completion(action, model))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in _chunks(
            action, model, bool((body.get("stream_options") or {}).get("include_usage"))
        ):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _next(self, request: web.Request) -> tuple[dict[str, Any], Action]:
        body = await request.json()
        self.requests.append(body)
        return body, self.script.popleft() if self.script else Fail(500, "script exhausted")

    async def _handle_responses(self, request: web.Request) -> web.StreamResponse:
        body, action = await self._next(request)
        if isinstance(action, Fail):
            error = {"error": {"message": action.message, "type": "server_error", "code": None}}
            return web.json_response(error, status=action.status, headers=action.headers)
        if body.get("stream"):
            return await _sse(request, _response_events(action, body.get("model", "m")))
        return web.json_response(_response(action, body.get("model", "m")))

    async def _handle_messages(self, request: web.Request) -> web.StreamResponse:
        body, action = await self._next(request)
        if isinstance(action, Fail):
            kind = "rate_limit_error" if action.status == 429 else "api_error"
            error = {"type": "error", "error": {"type": kind, "message": action.message}}
            return web.json_response(error, status=action.status, headers=action.headers)
        if body.get("stream"):
            return await _sse(request, _anthropic_events(action, body.get("model", "m")))
        return web.json_response(_anthropic_message(action, body.get("model", "m")))


async def _sse(request: web.Request, events: list[dict[str, Any]]) -> web.StreamResponse:
    """``events`` as server-sent events, each named by its ``type`` (both APIs do so)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for event in events:
        await response.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
    await response.write_eof()
    return response


def _pieces(text: str, size: int = 5) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _response_events(answer: Answer, model: str) -> list[dict[str, Any]]:
    """The Responses API's stream of ``answer``: created, each output item added, its text or
    arguments in deltas, done; then ``response.completed`` with the whole response."""
    final = _response(answer, model)
    started = {**final, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    for i, item in enumerate(final["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            empty = {**item, "status": "in_progress", "content": []}
            part = {"type": "output_text", "text": "", "annotations": []}
            events.append({"type": "response.output_item.added", "output_index": i, "item": empty})
            where = {"item_id": item["id"], "output_index": i, "content_index": 0}
            events.append({"type": "response.content_part.added", **where, "part": part})
            for piece in _pieces(text):
                events.append(
                    {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
                )
            events.append(
                {"type": "response.output_text.done", **where, "text": text, "logprobs": []}
            )
            done_part = {**part, "text": text}
            events.append({"type": "response.content_part.done", **where, "part": done_part})
        else:
            args = item["arguments"]
            empty = {**item, "status": "in_progress", "arguments": ""}
            events.append({"type": "response.output_item.added", "output_index": i, "item": empty})
            where = {"item_id": item["id"], "output_index": i}
            for piece in _pieces(args, len(args) // 2 or 1):
                events.append(
                    {"type": "response.function_call_arguments.delta", **where, "delta": piece}
                )
            events.append(
                {"type": "response.function_call_arguments.done", **where, "arguments": args}
            )
        events.append({"type": "response.output_item.done", "output_index": i, "item": item})
    events.append({"type": "response.completed", "response": final})
    return [{**e, "sequence_number": n} for n, e in enumerate(events)]


def _anthropic_events(answer: Answer, model: str) -> list[dict[str, Any]]:
    """Anthropic's stream of ``answer``: ``message_start`` (input tokens), each content block
    started, its text or tool input JSON in deltas, stopped; ``message_delta`` (stop reason,
    output tokens), ``message_stop``."""
    whole = _anthropic_message(answer, model)
    start = {
        **whole,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": answer.prompt_tokens, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(whole["content"]):
        if block["type"] == "text":
            first = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": t} for t in _pieces(block["text"])]
        else:
            first = {**block, "input": {}}
            args = json.dumps(block["input"])
            deltas = [
                {"type": "input_json_delta", "partial_json": t}
                for t in _pieces(args, len(args) // 2 or 1)
            ]
        events.append({"type": "content_block_start", "index": i, "content_block": first})
        events.extend({"type": "content_block_delta", "index": i, "delta": d} for d in deltas)
        events.append({"type": "content_block_stop", "index": i})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": answer.completion_tokens},
        }
    )
    events.append({"type": "message_stop"})
    return events


def _response(answer: Answer, model: str) -> dict[str, Any]:
    """A Responses API response: the text as a ``message`` item, each call a ``function_call``."""
    output: list[dict[str, Any]] = []
    if answer.content is not None:
        output.append(
            {
                "type": "message",
                "id": f"msg_{answer.response_id}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": answer.content, "annotations": []}],
            }
        )
    for c in answer.calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{c.id}",
                "call_id": c.id,
                "name": c.name,
                "arguments": json.dumps(c.arguments),
                "status": "completed",
            }
        )
    return {
        "id": answer.response_id,
        "object": "response",
        "created_at": 1,
        "model": model,
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": answer.prompt_tokens,
            "output_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _anthropic_message(answer: Answer, model: str) -> dict[str, Any]:
    """An Anthropic Messages API message: a ``text`` block, then a ``tool_use`` per call."""
    content: list[dict[str, Any]] = []
    if answer.content is not None:
        content.append({"type": "text", "text": answer.content})
    for c in answer.calls:
        content.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
    return {
        "id": answer.response_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if answer.calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": answer.prompt_tokens, "output_tokens": answer.completion_tokens},
    }


def _tool_calls(answer: Answer) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
        }
        for c in answer.calls
    ]


def _usage(answer: Answer) -> dict[str, int]:
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
    }


def _completion(answer: Answer, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.content}
    if answer.calls:
        message["tool_calls"] = _tool_calls(answer)
    return {
        "id": answer.response_id,
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if answer.calls else "stop",
            }
        ],
        "usage": _usage(answer),
    }


def _chunks(answer: Answer, model: str, usage: bool) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": answer.response_id,
            "object": "chat.completion.chunk",
            "created": 1,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    out = [chunk({"role": "assistant", "content": ""})]
    text = answer.content or ""
    for i in range(0, len(text), 5):
        out.append(chunk({"content": text[i : i + 5]}))
    for i, c in enumerate(answer.calls):
        args = json.dumps(c.arguments)
        half = len(args) // 2
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": args[:half]},
                        }
                    ]
                }
            )
        )
        out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": args[half:]}}]}))
    out.append(chunk({}, "tool_calls" if answer.calls else "stop"))
    if usage:
        out.append(
            {
                "id": answer.response_id,
                "object": "chat.completion.chunk",
                "created": 1,
                "model": model,
                "choices": [],
                "usage": _usage(answer),
            }
        )
    return out
