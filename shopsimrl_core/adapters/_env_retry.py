"""When an environment call may be sent again, and what a failed reset may leave on the server.

ShopSimulator has no idempotency keys, so whether a failed call can be repeated depends on the call and
on what the failure proves about the server (http-contract §5): ``reset``, ``release_one`` and ``healthz``
are safe to repeat after any 429/5xx or transport failure — except a reset whose answer was cut off after
it began (the server granted a lease; issue 24); ``interact`` and ``terminate`` only when the server
cannot have acted.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from shopsimrl_core._errors import ShopSimulatorError
from shopsimrl_core.adapters._http import TransportError

__all__ = ["lease_in", "may_have_acted", "retry_reason", "settle_lost_reset"]

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
        if action == "reset" and failure.answered:
            return None  # the server granted a lease its cut answer hides: a repeat would take another slot
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


# -- a reset that failed after the server may have granted its lease (issue 24) -----------------------

_ENV_IDX = re.compile(rb'"env_idx"\s*:\s*(\d+)\s*[,}]')
_LEASE_ID = re.compile(rb'"lease_id"\s*:\s*"([^"\\]{1,200})"')


def may_have_acted(failure: TransportError) -> bool:
    """Whether the server may have handled a request that failed this way.

    True when it was sent, and not on a stale connection the server closed unread; for a reset: the
    server may hold, or later grant, a lease.
    """
    return failure.kind not in _NOT_SENT and not failure.stale


def lease_in(data: bytes) -> tuple[int, str] | None:
    """``(env_idx, lease_id)`` when the cut or broken body of a reset answer still shows both whole."""
    idx, lease = _ENV_IDX.findall(data), _LEASE_ID.findall(data)
    if len(idx) != 1 or len(lease) != 1:
        return None  # missing, or ambiguous: never release a lease that may be someone else's
    try:
        return int(idx[0]), lease[0].decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


async def settle_lost_reset(client: Any, exc: ShopSimulatorError) -> None:
    """After a reset that failed once the server may have granted its lease (``exc.may_hold_lease``).

    When the cut answer names the lease (``exc.lost_lease``) it is released and ``may_hold_lease`` turns
    False; otherwise the message says that the server may hold a slot, so the console line is clear.
    """
    if not getattr(exc, "may_hold_lease", False):
        return
    lost = getattr(exc, "lost_lease", None)
    if lost is not None:
        try:
            await asyncio.shield(client.release_one(*lost))
        except ShopSimulatorError:
            pass  # the server may still hold it: said below
        else:
            exc.may_hold_lease = False  # type: ignore[attr-defined]
            exc.args = (f"{exc.args[0]}; the lease its cut answer names (slot {lost[0]}) was released",)
            return
    exc.args = (
        f"{exc.args[0]}; the server may hold a slot for this reset (its answer did not show the lease, and "
        "ShopSimulator never expires one)",
    )
