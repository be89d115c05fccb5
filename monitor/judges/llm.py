"""LLM-as-a-judge over any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama...).

:class:`LLMJudge` sends the rubric of :mod:`monitor.judges.rubric` to
``POST {base_url}/chat/completions`` and turns the reply into verdicts. It never raises for an
endpoint or output problem: it returns ``status="error"`` verdicts whose ``error`` is one code:

- ``circuit_open``: the endpoint's breaker is open; no request was sent. (A call whose own
  failures open the breaker stops retrying and reports its last failure instead.)
- ``timeout``, ``connection_error``, ``http_429``, ``http_5xx`` (e.g. ``http_503``): retried
  with backoff (429 honours ``Retry-After``); the last failure once the budget is spent.
- ``http_<status>`` for any other non-2xx status (400, 401, 404...): never retried.
- ``bad_response``: a 2xx whose body is not a chat-completions response; not retried.
- ``request_error``: the request could not be built or sent (bad URL...); not retried.
- ``malformed_output``: the reply did not parse, and neither did the one repair attempt.

Error verdicts go one per assistant message that has a confidence (the items the metrics use),
or as one conversation-level verdict (``item_id=None``) when there is none; ``evidence`` carries
a readable ``detail`` and the number of HTTP ``attempts``. The API key is sent only as the
``Authorization`` header and is scrubbed from every detail, rationale and log line.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import httpx

from monitor.core.clock import Clock, SystemClock
from monitor.core.errors import MalformedOutput
from monitor.core.resilience import CircuitBreaker, CircuitBreakers, RetryPolicy
from monitor.core.resilience import parse_retry_after as _retry_after
from monitor.judges import rubric
from monitor.judges.base import Conversation, Verdict

log = logging.getLogger(__name__)
_DETAIL_CHARS = 300
_POOL = 8  # connections per owned httpx pool (see _own_clients)


@dataclass(frozen=True, slots=True)
class LLMJudgeConfig:
    """Settings of one LLM judge.

    Attributes:
        base_url: the API root, e.g. ``https://api.openai.com/v1`` or ``http://vllm:8000/v1``
            (``/chat/completions`` is appended; a trailing slash is fine).
        model: model name sent in every request; also the first half of ``judge_version``.
        api_key: sent as ``Authorization: Bearer <key>``; ``None`` sends no header (Ollama).
        timeout: seconds, the whole budget of one HTTP attempt (connect to last byte).
        max_concurrency: most HTTP requests in flight at once across all ``judge`` calls of
            this judge instance (waiting for a slot does not count against ``timeout``).
        json_mode: send ``response_format: {"type": "json_object"}`` (turn off for servers
            that reject it; the reply is parsed leniently either way).
        max_tokens: optional cap on the reply's length.
        retry: attempts and backoff for 429, 5xx, timeouts and connection errors.
        breaker_threshold, breaker_cool_down: consecutive failures that open the endpoint's
            breaker, and seconds before it lets a trial call through.
        name: the ``judge`` field of the verdicts.
    """

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 60.0
    max_concurrency: int = 16
    json_mode: bool = True
    max_tokens: int | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker_threshold: int = 5
    breaker_cool_down: float = 30.0
    name: str = "llm"

    def __post_init__(self) -> None:
        if self.timeout <= 0 or self.max_concurrency < 1:
            raise ValueError("timeout must be > 0 seconds and max_concurrency >= 1")


class _Failure(NamedTuple):
    code: str
    detail: str


class LLMJudge:
    """An async judge over an OpenAI-compatible chat-completions endpoint (see module doc).

    Args:
        config: endpoint, model, key and limits.
        client: an ``httpx.AsyncClient`` to use (not closed by :meth:`aclose`); when ``None`` the
            judge creates and owns its clients (over ``transport`` if given; see
            ``_own_clients``).
        sleep: awaited with the backoff delay in seconds (inject a fake in tests).
        rand: returns floats in [0, 1) for the backoff jitter.
        clock: monotonic time for latency and the breaker cool-down, wall time for Retry-After
            dates.
        breakers: a registry shared by judges that call the same endpoint; by default this judge
            has its own, configured from ``config``.
    """

    def __init__(
        self,
        config: LLMJudgeConfig,
        *,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        clock: Clock | None = None,
        breakers: CircuitBreakers | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.version = f"{config.model}/{rubric.PROMPT_VERSION}"
        self.applies_to = "every conversation with an assistant message"
        self._owns_client = client is None
        self._clients = [client] if client is not None else _own_clients(config, transport)
        self._load = [0] * len(self._clients)  # requests in flight per client
        self._sleep, self._rand = sleep, rand
        self._clock = clock or SystemClock()
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        registry = breakers or CircuitBreakers(
            self._clock.monotonic, config.breaker_threshold, config.breaker_cool_down
        )
        self.breaker: CircuitBreaker = registry.for_endpoint(config.base_url.rstrip("/"))
        self._semaphore = asyncio.Semaphore(config.max_concurrency)
        self._headers = {"Content-Type": "application/json"}
        if config.api_key:
            self._headers["Authorization"] = f"Bearer {config.api_key}"

    async def __aenter__(self) -> LLMJudge:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this judge created it."""
        if self._owns_client:
            for client in self._clients:
                await client.aclose()

    async def judge(self, conversation: Conversation) -> list[Verdict]:
        """Judge every assistant message of ``conversation``.

        Returns one ``ok`` verdict per assistant message (conversation order), or error verdicts
        as the module doc describes; ``[]`` when the conversation has no assistant message (no
        request is sent). ``latency_ms`` is the wall time of the whole call including retries
        and the repair attempt. Never raises except ``asyncio.CancelledError``.
        """
        start = self._clock.monotonic()
        if not conversation.assistant_messages():
            return []
        messages = rubric.build_messages(conversation)
        attempts, repaired = 0, False
        while True:
            reply, n = await self._complete(messages)
            attempts += n
            if isinstance(reply, _Failure):
                return self._errors(conversation, reply, attempts, start)
            try:
                verdicts = rubric.parse_output(
                    reply, conversation, judge=self.name, judge_version=self.version
                )
                break
            except MalformedOutput as exc:
                failure = _Failure("malformed_output", self._scrub(str(exc)))
                if repaired:
                    return self._errors(conversation, failure, attempts, start)
                log.info("judge %s: %s, asking for a repair", self.name, failure.detail)
                messages, repaired = rubric.repair_messages(messages, reply, exc), True
        extra, latency = {"attempts": attempts, "repaired": repaired}, self._elapsed_ms(start)
        return [
            replace(
                v,
                rationale=self._scrub(v.rationale or "") or None,
                latency_ms=latency,
                evidence={**v.evidence, **extra},
            )
            for v in verdicts
        ]

    async def _complete(self, messages: list[dict[str, str]]) -> tuple[str | _Failure, int]:
        """One chat completion with retries: (the reply's text or the failure, attempts made)."""
        body: dict[str, Any] = {"model": self.config.model, "messages": messages, "temperature": 0}
        if self.config.json_mode:
            body["response_format"] = {"type": "json_object"}
        if self.config.max_tokens is not None:
            body["max_tokens"] = self.config.max_tokens
        policy = self.config.retry
        attempt, last = 0, None
        while True:
            if not self.breaker.allow():
                if last is None:
                    return _Failure("circuit_open", f"breaker of {self._url} is open"), attempt
                return _Failure(last.code, f"{last.detail} (then the circuit opened)"), attempt
            attempt += 1
            result, retry_after = await self._attempt(body)
            if not isinstance(result, _Failure) or not _retryable(result.code):
                return result, attempt
            if not policy.should_retry(attempt) or self.breaker.state == "open":
                return result, attempt  # the last failure, rather than "circuit_open"
            last = result
            delay = policy.delay(attempt, self._rand, retry_after)
            log.info(
                "judge %s: attempt %d %s, retry in %.2fs", self.name, attempt, last.code, delay
            )
            await self._sleep(delay)

    async def _attempt(self, body: dict[str, Any]) -> tuple[str | _Failure, float | None]:
        """One HTTP request; reports its health to the breaker (exactly once)."""
        timeout = self.config.timeout
        try:
            async with self._semaphore, asyncio.timeout(timeout):
                shard = self._load.index(min(self._load))  # never a full pool: no queueing
                self._load[shard] += 1
                try:
                    resp = await self._clients[shard].post(
                        self._url, json=body, headers=self._headers, timeout=timeout
                    )
                finally:
                    self._load[shard] -= 1
        except (TimeoutError, httpx.TimeoutException):
            self.breaker.record_failure()
            return _Failure("timeout", f"no response within {timeout}s"), None
        except (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ProxyError) as exc:
            self.breaker.record_failure()
            detail = self._scrub(f"{type(exc).__name__}: {exc}")
            return _Failure("connection_error", detail), None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            self.breaker.release()
            return _Failure("request_error", self._scrub(f"{type(exc).__name__}: {exc}")), None
        except BaseException:  # cancelled: says nothing about the endpoint
            self.breaker.release()
            raise
        status = resp.status_code
        if status == 429:
            self.breaker.release()  # a rate limit is back-pressure, not an outage
            wait = _retry_after(resp.headers.get("retry-after"), self._clock.now())
            return _Failure("http_429", self._body_detail(resp)), wait
        if status >= 500:
            self.breaker.record_failure()
            return _Failure(f"http_{status}", self._body_detail(resp)), None
        self.breaker.record_success()  # the endpoint is up, even if it rejects this request
        if not 200 <= status < 300:
            return _Failure(f"http_{status}", self._body_detail(resp)), None
        return self._content(resp), None

    def _content(self, resp: httpx.Response) -> str | _Failure:
        try:
            data = resp.json()
            content = data["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return _Failure("bad_response", self._body_detail(resp, "not a chat completion"))
        return content if isinstance(content, str) else ""

    def _body_detail(self, resp: httpx.Response, prefix: str | None = None) -> str:
        text = " ".join(resp.text[:_DETAIL_CHARS].split())
        return self._scrub(f"{prefix or f'HTTP {resp.status_code}'}: {text}")

    def _scrub(self, text: str) -> str:
        key = self.config.api_key
        return text.replace(key, "[redacted]") if key else text

    def _elapsed_ms(self, start: float) -> float:
        return max(0.0, (self._clock.monotonic() - start) * 1000.0)

    def _errors(
        self, conversation: Conversation, failure: _Failure, attempts: int, start: float
    ) -> list[Verdict]:
        cid = conversation.conversation_id
        log.warning("judge %s: %s on %s: %s", self.name, failure.code, cid, failure.detail)
        msgs = conversation.assistant_messages()
        items: list[str | None] = [m.event_id for m in msgs if m.confidence is not None]
        latency = self._elapsed_ms(start)
        return [
            Verdict(
                self.name,
                self.version,
                cid,
                item,
                status="error",
                error=failure.code,
                evidence={"detail": failure.detail, "attempts": attempts},
                latency_ms=latency,
            )
            for item in (items or [None])
        ]


def _own_clients(
    config: LLMJudgeConfig, transport: httpx.AsyncBaseTransport | None
) -> list[httpx.AsyncClient]:
    """Clients whose pools together hold ``max_concurrency`` kept-alive connections. Without a
    transport, several pools of at most ``_POOL`` connections: httpcore's pool bookkeeping costs
    O(connections^2) per request, which at 64 connections costs more CPU than the requests."""
    n = config.max_concurrency
    shards = 1 if transport is not None else -(-n // _POOL)
    size = -(-n // shards)
    limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
    return [httpx.AsyncClient(transport=transport, limits=limits) for _ in range(shards)]


def _retryable(code: str) -> bool:
    return code in ("timeout", "connection_error", "http_429") or code.startswith("http_5")
