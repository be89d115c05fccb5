"""The first step of every HTTP endpoint: the authorizer's answer, then the request rate (pure).

An endpoint is given an :data:`Authorize` bound to its action (``write``, ``gate``, ``read``:
the worker's :class:`monitor.auth.cache.KeyCache`) and turns its answer into a :class:`Grant`
that may go on, or the :class:`monitor.core.http_guard.Refusal` to send instead, before it
reads a byte of the body (:func:`admit`):

- a request no credential vouches for (401, or a 403 that names no key, as the gate's
  ``not_loopback``) takes a token from its peer address's bucket: its own 401/403 while the
  bucket holds, then 429 with ``Retry-After`` (a stranger is bounded whatever token it invents);
- another :class:`Denied` (403 ``missing_scope`` / ``out_of_scope`` of a known key) is
  answered with its status, message and reason;
- a :class:`Grant` takes a token from its identity's bucket (:func:`rate_key`: the API key's
  id, or the shared token), 429 with ``Retry-After`` once empty.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from monitor.auth.authorizer import Denied, Grant
from monitor.core.http_guard import Guard, Refusal

Authorize = Callable[[str | None], Awaitable[Grant | Denied]]  # the Authorization header in


def rate_key(grant: Grant) -> str:
    """The rate bucket of a granted request: its credential's identity (never a secret)."""
    return f"key:{grant.key_id}"


def admit(answer: Grant | Denied, peer: str | None, guard: Guard) -> Grant | Refusal:
    """The grant when the request may go on, else its refusal (see the module docstring)."""
    if isinstance(answer, Denied):
        if answer.status == 401 or answer.key_id is None:
            throttled = guard.stranger(peer)
            if throttled is not None:
                return throttled
        return Refusal(answer.status, answer.message, answer.reason)
    limited = guard.credential(rate_key(answer))
    return answer if limited is None else limited
