"""Health checks of one endpoint at a time, without an evaluation config: is it up, and is it the right one?

:func:`check_environment` reads a ShopSimulator's ``GET /healthz`` and refuses a server that is not
ready or reports versions this client does not speak; :func:`check_model` reads an OpenAI-compatible
server's ``GET /models`` and refuses one that does not serve the named model. They are what the
Dagster resources call before a run, and what a notebook or a shell script calls to ask the same.
The full pre-run check of a config (these two plus a probe completion) is ``preflight``.

Each check is one request through the adapters' HTTP engine (the one runs use; no proxies unless
*trust_env*) and no retries: a health check reports what it sees, and the run's clients repeat what
is worth repeating. Every refusal is a :class:`~shopsimrl_core.runs.endpoints._preflight.PreflightError`
with the code of the matching preflight check (docs/errors.md), the URL in ``.url``, and a one-line
message that names the URL and what was seen but no fix: the fix depends on where the URL came from
(a config key, a registry entry, a pipeline setting), so the caller appends its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from shopsimrl_core._errors import ConfigError
from shopsimrl_core._versions import KNOWN_ENVIRONMENT_VERSIONS, KNOWN_OBSERVATION_VERSIONS
from shopsimrl_core.adapters._auth import EndpointAuth
from shopsimrl_core.runs.endpoints._preflight import PreflightError

if TYPE_CHECKING:  # annotations only: the test seam of the HTTP engine
    import httpx

__all__ = ["acheck_environment", "acheck_model", "check_environment", "check_model"]

T = TypeVar("T")


class _Codes(NamedTuple):
    unreachable: str
    unauthorized: str
    bad_response: str


_ENVIRONMENT = _Codes("environment-unreachable", "environment-unreachable", "environment-unreachable")
_MODEL = _Codes("model-unreachable", "model-unauthorized", "model-bad-response")


async def _get_json(
    url: str,
    *,
    what: str,
    timeout: float,
    headers: dict[str, str],
    http_transport: str,
    trust_env: bool,
    transport: httpx.AsyncBaseTransport | None,
    codes: _Codes,
) -> Any:
    """``GET url`` once and decode its JSON body; a refusal carries the matching one of *codes*."""
    from shopsimrl_core.adapters._http import TransportError, build_engine
    from shopsimrl_core.adapters._json import loads

    try:
        engine = build_engine(
            url,
            mode=http_transport,
            timeout=timeout,
            read_timeout=timeout,
            max_connections=1,
            trust_env=trust_env,
            transport=transport,
        )
    except ValueError as exc:  # not an http(s) URL
        raise PreflightError(f"{what} unreachable at {url} ({exc})", code=codes.unreachable, url=url) from None
    try:
        reply = await engine.request("GET", url, headers=headers)
    except TransportError as exc:
        raise PreflightError(f"{what} unreachable at {url} ({exc})", code=codes.unreachable, url=url) from None
    finally:
        await engine.aclose()
    if reply.status != 200:
        raise PreflightError(
            f"{what} at {url} answered HTTP {reply.status}: {reply.text[:200]!r}",
            code=codes.unauthorized if reply.status in (401, 403) else codes.unreachable,
            url=url,
            status=reply.status,
        )
    try:
        return loads(reply.data)
    except ValueError:
        kind = (reply.content_type or "no content type").split(";")[0]
        problem = f"{what} at {url} did not answer JSON (got {kind})"
        raise PreflightError(problem, code=codes.bad_response, url=url) from None


async def acheck_environment(
    base_url: str,
    *,
    timeout: float = 10.0,
    what: str = "ShopSimulator",
    http_transport: str = "auto",
    trust_env: bool = False,
    transport: httpx.AsyncBaseTransport | None = None,
) -> dict[str, Any]:
    """:func:`check_environment` on the running event loop (same arguments, result and errors)."""
    base = base_url.rstrip("/")
    body = await _get_json(
        f"{base}/healthz",
        what=what,
        timeout=timeout,
        headers={},
        http_transport=http_transport,
        trust_env=trust_env,
        transport=transport,
        codes=_ENVIRONMENT,
    )
    if not isinstance(body, dict) or body.get("ready") is not True:
        raise PreflightError(f"{what} at {base} is not ready: {body!r}", code="environment-not-ready", url=base)
    for key, known in (
        ("environment_version", KNOWN_ENVIRONMENT_VERSIONS),
        ("observation_version", KNOWN_OBSERVATION_VERSIONS),
    ):
        if body.get(key) not in known:
            raise PreflightError(
                f"{what} at {base} reports {key} {body.get(key)!r}, which this runtime does not know "
                f"(known: {', '.join(sorted(known))})",
                code="environment-incompatible",
                url=base,
                key=key,
                value=body.get(key),
            )
    return body


async def acheck_model(
    base_url: str,
    name: str,
    *,
    api_key_env: str | None = None,
    auth: EndpointAuth | None = None,
    timeout: float = 10.0,
    what: str = "model endpoint",
    http_transport: str = "auto",
    trust_env: bool = False,
    transport: httpx.AsyncBaseTransport | None = None,
) -> list[str]:
    """:func:`check_model` on the running event loop (same arguments, result and errors)."""
    base = base_url.rstrip("/")
    auth = auth if auth is not None else EndpointAuth(api_key_env)
    try:
        headers = auth.headers()
    except ConfigError as exc:
        problem = f"{what}: environment variable {auth.api_key_env} is not set"
        raise PreflightError(problem, code=exc.code, url=base, variable=auth.api_key_env) from None
    body = await _get_json(
        f"{base}/models",
        what=what,
        timeout=timeout,
        headers=headers,
        http_transport=http_transport,
        trust_env=trust_env,
        transport=transport,
        codes=_MODEL,
    )
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise PreflightError(
            f"{what} at {base}/models did not return an OpenAI model list", code="model-bad-response", url=base
        )
    served = [str(item["id"]) for item in data if isinstance(item, dict) and item.get("id") is not None]
    if name not in served:
        raise PreflightError(
            f"{what} {base} does not serve model {name!r} (served: {', '.join(served) or 'none'})",
            code="model-not-served",
            url=base,
            served_models=served,
        )
    return served


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    # Safe to call while a loop runs in this thread (a notebook, an async op): then on a helper thread.
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def check_environment(
    base_url: str,
    *,
    timeout: float = 10.0,
    what: str = "ShopSimulator",
    http_transport: str = "auto",
    trust_env: bool = False,
    transport: httpx.AsyncBaseTransport | None = None,
) -> dict[str, Any]:
    """Check that the ShopSimulator at *base_url* is up, ready and speaks this client's versions.

    Returns the ``/healthz`` object (slots, tasks, versions). *what* names the server in messages;
    *timeout* bounds connecting and each read, in seconds.

    Raises:
        PreflightError: ``environment-unreachable`` (nothing answers, a non-200 status or a body that
            is not JSON), ``environment-not-ready`` (``ready`` is not true) or
            ``environment-incompatible`` (an unknown ``environment_version`` / ``observation_version``;
            ``.key`` and ``.value`` name it). ``.url`` is the URL checked.
    """
    return _run(
        acheck_environment(
            base_url,
            timeout=timeout,
            what=what,
            http_transport=http_transport,
            trust_env=trust_env,
            transport=transport,
        )
    )


def check_model(
    base_url: str,
    name: str,
    *,
    api_key_env: str | None = None,
    auth: EndpointAuth | None = None,
    timeout: float = 10.0,
    what: str = "model endpoint",
    http_transport: str = "auto",
    trust_env: bool = False,
    transport: httpx.AsyncBaseTransport | None = None,
) -> list[str]:
    """Check that the OpenAI-compatible server at *base_url* (``…/v1``) serves the model *name*.

    Returns the served model ids. The API key, when *api_key_env* names a variable, is read from it
    now and sent as a bearer token; it never appears in a message.

    Raises:
        PreflightError: ``api-key-missing`` (the variable is unset or empty), ``model-unreachable``
            (nothing answers, a non-200 status), ``model-unauthorized`` (401/403),
            ``model-bad-response`` (no OpenAI model list) or ``model-not-served`` (``.served_models``
            lists what is served). ``.url`` is the base URL.
    """
    return _run(
        acheck_model(
            base_url,
            name,
            api_key_env=api_key_env,
            auth=auth,
            timeout=timeout,
            what=what,
            http_transport=http_transport,
            trust_env=trust_env,
            transport=transport,
        )
    )
