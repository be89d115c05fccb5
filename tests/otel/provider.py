"""A loopback OpenAI-compatible provider for the conformance suite (real aiohttp server).

``Provider`` answers ``POST /v1/chat/completions`` from a queue of scripted actions, one per
HTTP request: :class:`Answer` (a completion with text and/or tool calls, as JSON or, when the
request asks ``stream: true``, as server-sent events in several chunks, with a usage chunk when
``stream_options.include_usage``), or :class:`Fail` (any status, e.g. 500 or 429 with
``Retry-After: 0``). Every request body is recorded.
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

    def push(self, *actions: Action) -> None:
        self.script.extend(actions)

    async def __aenter__(self) -> Provider:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
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
