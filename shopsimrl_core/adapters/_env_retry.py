"""When an environment call may be sent again: the retry policy of the ShopSimulator client.

ShopSimulator has no idempotency keys, so whether a failed call can be repeated depends on the call and
on what the failure proves about the server (http-contract §5): ``reset``, ``release_one`` and ``healthz``
are safe to repeat after any 429/5xx or transport failure; ``interact`` and ``terminate`` only when the
server cannot have acted.
"""

from __future__ import annotations

from shopsimrl_core.adapters._http import TransportError

__all__ = ["retry_reason"]

#: calls that may be repeated after any 429/5xx or transport failure: no lease exists yet (reset; a 500
#: rolls its slot back, http-contract §5.6), the release of one is idempotent in effect (a second one answers 409,
#: which counts as released), or nothing changes (healthz)
_REPEATABLE = frozenset({"reset", "release_one", "healthz"})
#: the contract's own reset refusals (http-contract §5.1): the same answer again, never worth a retry
_RESET_REFUSALS = (
    "reset must not include env_idx",
    "reset action requires idx parameter",
    "task idx must be an integer",
    "unknown or inactive task_id",
    "unsupported interaction_mode",
)
#: failures that prove the server never acted on the request: no connection was made
_NOT_SENT = frozenset({"ConnectError", "ConnectTimeout", "UnsupportedProtocol"})


def retry_reason(action: str, *, status: int | None = None, error: str | None = None,
                 failure: TransportError | None = None) -> str | None:
    """Why *action* may be sent again after this failure, or None when it must not be.

    *status* and *error* describe an HTTP answer (``result.error``), *failure* a request without one.
    ``interact`` and ``terminate`` are not idempotent (a repeat after a lost answer would consume
    another action, http-contract §5.2), so they are repeated only when the server cannot have acted:
    HTTP 429 or 503 (the server or a gateway in front of it refused the request), a connection never
    made, or a stale keep-alive connection the server closed before reading the request.
    """
    if failure is not None:
        if failure.stale:
            return "the server closed an idle keep-alive connection as the request was sent"
        if failure.kind in _NOT_SENT:
            return f"{failure.kind}: the request never reached the server"
        if action in _REPEATABLE and failure.kind != "UnsupportedProtocol":
            return f"{failure.kind} on {action}, which is safe to repeat"
        return None
    if status is None:
        return None
    if status in (429, 503):
        return f"HTTP {status}: the request was refused before it was handled"
    if action in _REPEATABLE and status in (500, 502, 504):
        if action == "reset" and error is not None and any(text in error for text in _RESET_REFUSALS):
            return None
        return f"HTTP {status} on {action}, which is safe to repeat"
    return None
