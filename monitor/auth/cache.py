"""The worker's API keys, held in memory and reloaded from Postgres (I/O edge).

Requests are authorized from memory (:class:`monitor.auth.authorizer.Authorizer`): no request
waits on Postgres for a known key. The keys are reloaded every ``keys_refresh_s`` (the
worker's timer: a revoked key is refused at most that long after ``monitor keys revoke``) and
on a miss (a ``mk_`` secret the cache does not hold: a key issued since the last reload), at
most once per ``miss_interval_s`` whatever the traffic, the missing request waiting for that
reload at most ``miss_wait_s``. A reload that fails (Postgres down) keeps the keys held, so
authorization goes on from the cache; the failure is logged (never a secret: only key ids).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime

from monitor.auth.authorizer import Authorizer, Denied, Grant, bearer
from monitor.auth.keys import SECRET_PREFIX, ApiKey, Scope

log = logging.getLogger("monitor.auth.cache")

Loader = Callable[[], Awaitable[Mapping[str, ApiKey]]]


class KeyCache:
    """``await check(...)``: the authorizer's answer from the keys held (see module)."""

    def __init__(
        self,
        load: Loader,
        tokens: Mapping[Scope, str | None],
        now: Callable[[], datetime],
        monotonic: Callable[[], float],
        *,
        miss_interval_s: float = 2.0,
        miss_wait_s: float = 1.0,
        load_timeout_s: float = 10.0,
    ) -> None:
        self._load = load
        self._monotonic = monotonic
        self.authorizer = Authorizer({}, tokens, now)
        self.miss_interval_s = miss_interval_s
        self.miss_wait_s = miss_wait_s
        self.load_timeout_s = load_timeout_s
        self.loaded_at: float | None = None  # monotonic time of the last successful reload
        self.failures = 0  # reloads failed in a row
        self._last_miss = float("-inf")
        self._reloading: asyncio.Task[bool] | None = None

    async def refresh(self) -> bool:
        """Reload the keys (one reload at a time: a caller during one awaits it); False when
        it failed and the keys held stay."""
        if self._reloading is None or self._reloading.done():
            self._reloading = asyncio.ensure_future(self._reload())
        return await asyncio.shield(self._reloading)

    async def _reload(self) -> bool:
        try:
            keys = await asyncio.wait_for(self._load(), self.load_timeout_s)
        except Exception as exc:  # Postgres down or slow: keep authorizing from the cache
            self.failures += 1
            log.warning(
                "API keys not reloaded (%s: %s); %d keys held from the last reload",
                type(exc).__name__,
                str(exc)[:200],
                len(self.authorizer.keys),
            )
            return False
        self.authorizer = Authorizer(dict(keys), self.authorizer.tokens, self.authorizer.now)
        self.loaded_at, self.failures = self._monotonic(), 0
        return True

    async def check(
        self, authorization: str | None, action: Scope, agent_ids: Iterable[str] = ()
    ) -> Grant | Denied:
        """The authorizer's answer; an unknown key secret first reloads the keys (bounded)."""
        agents = tuple(agent_ids)
        answer = self.authorizer.check(authorization, action, agents)
        if isinstance(answer, Grant) or answer.key_id is not None:
            return answer
        token = bearer(authorization)
        if token is None or not token.startswith(SECRET_PREFIX):
            return answer
        if self.authorizer.known(authorization):
            return answer
        now = self._monotonic()
        if now - self._last_miss < self.miss_interval_s:
            return answer
        self._last_miss = now
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.refresh()), self.miss_wait_s)
        return self.authorizer.check(authorization, action, agents)
