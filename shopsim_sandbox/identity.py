"""The client side of the sandbox-only ``GET /sandbox/identity`` route: which catalog a running sandbox serves.

The real ShopSimulator has no such route, so the pipeline's own HTTP code (``shopsimrl_core``) does not
know it; the sandbox package, which serves it (``app.SANDBOX_IDENTITY_PATH``), also reads it. The
Dagster layer's local sandbox (``shopsimrl_dagster.local_sandbox``) calls this rather than an HTTP
client of its own.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["read_sandbox_identity"]


def read_sandbox_identity(env_url: str, *, timeout: float = 5.0) -> tuple[int | None, Any]:
    """``(HTTP status, JSON body)`` of ``GET <env_url>/sandbox/identity``; never raises for the server's answer.

    The status is None when nothing answered (the body is then the error's class name), and the body
    None when the answer was not JSON. A sandbox started with its catalog's hash answers
    ``{"server": "shopsim-sandbox", "catalog_sha256": ..., "tasks": N}``.
    """
    from .app import SANDBOX_IDENTITY_PATH  # here, not at the top: the server's imports are not the caller's

    try:
        response = httpx.get(env_url.rstrip("/") + SANDBOX_IDENTITY_PATH, timeout=timeout, trust_env=False)
    except httpx.HTTPError as exc:
        return None, type(exc).__name__
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, None
