"""A real chat-completions HTTP server on 127.0.0.1 for the LLM-judge tests.

``ChatServer`` listens on a free loopback port (aiohttp.web, in the test's event loop) and
answers ``POST /v1/chat/completions`` from a script: each request takes the next queued action
(:class:`Reply`, :class:`Status`, :class:`Hang`), or ``default`` when the queue is empty. It
records every request (headers, JSON body) and the most requests it ever had in flight.

    async with ChatServer() as server:
        server.push(Reply("not json"), Reply(verdicts_json(...)))
        judge = LLMJudge(LLMJudgeConfig(base_url=server.base_url, model="m"))
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.servers.scripted import Status, serve_on_loopback


@dataclass(frozen=True)
class Reply:
    """200 with a chat completion whose message content is ``content``, after ``delay`` s;
    ``raw`` instead sends that body as is (to test replies that are not chat completions)."""

    content: str | None
    delay: float = 0.0
    raw: str | None = None


@dataclass(frozen=True)
class Hang:
    """Send nothing for ``seconds`` (or until the server stops), then a 504."""

    seconds: float


Action = Reply | Status | Hang


@dataclass(frozen=True)
class Recorded:
    """One request as the server got it."""

    path: str
    headers: dict[str, str]
    body: Any
    at: float


def completion(content: str | None, model: str = "judge-model") -> dict[str, Any]:
    """A chat-completions response body with one choice."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


def verdicts_json(*items: dict[str, Any]) -> str:
    """The rubric's output object for ``items`` (each filled with passing defaults)."""
    full = [
        {
            "correctness": 1.0,
            "informativeness": 1.0,
            "consistency": 1.0,
            "label": 1,
            "categories": [],
            "fabrication_type": None,
            "rationale": "fine",
            **item,
        }
        for item in items
    ]
    return json.dumps({"items": full})


class ChatServer:
    """The scriptable server; use as ``async with`` (see the module doc)."""

    def __init__(self, default: Action | Callable[[Recorded], Action] | None = None) -> None:
        self.script: deque[Action] = deque()
        self.default = default
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *actions: Action) -> None:
        """Queue actions for the next requests, in order."""
        self.script.extend(actions)

    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    async def __aenter__(self) -> ChatServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner, self.port = await serve_on_loopback(app, shutdown_timeout=0.5)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def _next(self, request: Recorded) -> Action:
        if self.script:
            return self.script.popleft()
        if self.default is None:
            return Status(500, "no scripted response left")
        return self.default(request) if callable(self.default) else self.default

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            raw = await request.read()
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
            recorded = Recorded(request.path, dict(request.headers), body, time.monotonic())
            self.requests.append(recorded)
            action = self._next(recorded)
            if isinstance(action, Hang):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), action.seconds)
                return web.Response(status=504, text="hung")
            if isinstance(action, Status):
                return web.Response(status=action.status, text=action.body, headers=action.headers)
            if action.delay:
                await asyncio.sleep(action.delay)
            if action.raw is not None:
                return web.Response(text=action.raw, content_type="application/json")
            model = body.get("model", "?") if isinstance(body, dict) else "?"
            return web.json_response(completion(action.content, model))
        finally:
            self.in_flight -= 1
