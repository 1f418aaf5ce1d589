"""One preflight for the CLI and the Dagster layer: is the run's environment and model usable at all?

Three checks, in order, each a refusal with one line naming the config key and the fix:

1. the environment answers ``GET /healthz`` with a JSON object, and the versions it reports (when it
   reports them) are ones this client speaks;
2. the model server answers ``GET {model.base_url}/models`` with an OpenAI model list that contains
   ``model.name`` (the served name);
3. one tiny completion (no tools, a few tokens) comes back with a body that parses as a chat
   completion — a URL answering ``200`` with an HTML page fails here, not after a whole run.

Nothing is written. ``preflight`` is synchronous (usable from a Dagster op or a shell);
``apreflight`` is the same on a running event loop. Both raise :class:`PreflightError` (a
``ShopSimRLError``; the CLI exits 2).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: requests go through the adapters' HTTP engine
    import httpx

from shopsimrl_core._errors import ShopSimRLError
from shopsimrl_core._versions import KNOWN_ENVIRONMENT_VERSIONS, KNOWN_OBSERVATION_VERSIONS

__all__ = ["PreflightError", "PreflightReport", "preflight", "apreflight"]

_PROBE_MESSAGES = [{"role": "user", "content": "Reply with the single word: ok"}]


class PreflightError(ShopSimRLError):
    """The environment or the model is not usable; the message is one line with the fix."""

    code = "preflight-failed"


@dataclass
class PreflightReport:
    """What the preflight saw (all checks passed)."""

    environment: dict[str, Any]
    """The ``/healthz`` object."""
    served_models: list[str]
    """Model ids listed by ``GET /models``."""
    probe: dict[str, Any] = field(default_factory=dict)
    """The probe completion: ``finish_reason``, ``latency_ms``, ``attempts``."""

    @property
    def free_slots(self) -> int | None:
        """``free_slots`` reported by the environment, when it is an int."""
        value = self.environment.get("free_slots")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def environment_slots(self) -> int | None:
        """``environment_slots`` reported by the environment, when it is an int."""
        value = self.environment.get("environment_slots")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


_TLS_FIX = "name the server's CA with SSL_CERT_FILE or REQUESTS_CA_BUNDLE (docs/runtime.md#http-transport)"


def _untrusted(exc: BaseException) -> str | None:
    """The certificate failure behind a transport failure, as the problem of a preflight line; else None."""
    from shopsimrl_core.adapters._tls import certificate_problem

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        reason = certificate_problem(str(exc))
        if reason is not None:
            return f"the server's TLS certificate is not trusted ({reason})"
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


def _reason(exc: BaseException) -> str | None:
    """A stable description of a transport failure (HTTP engines word their errors differently)."""
    import ssl

    seen: set[int] = set()
    chain: list[BaseException] = []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    for link in chain:
        # before the ConnectError wrapped around it: the server answered, but not with TLS (issue 24)
        if isinstance(link, ssl.SSLError) and not isinstance(link, ssl.SSLCertVerificationError):
            why = str(link.reason or link).lower().replace("_", " ")
            return f"the TLS handshake failed ({why}); if the server speaks plain HTTP, use http://"
    for exc in chain:
        # by name: the HTTP engine's TransportError.kind and httpx's classes use the same names
        kind = str(getattr(exc, "kind", None) or type(exc).__name__)
        if isinstance(exc, ConnectionError) or kind == "ConnectError":
            return "nothing answers there (connection refused or host unreachable)"
        if isinstance(exc, TimeoutError) or "Timeout" in kind:
            return "no answer in time (timed out)"
        if kind == "RemoteProtocolError" and "without sending a response" in str(exc):
            return "the server closed the connection without an HTTP answer; if it speaks HTTPS, use https://"
    return None


def _fail(label: str, key: str, problem: str, fix: str, code: str) -> PreflightError:
    return PreflightError(f"{label}: {key}: {problem}; {fix} (nothing was written)", code=code)


async def _check_environment(config: Any, transport: httpx.AsyncBaseTransport | None, persona: bool) -> dict[str, Any]:
    from shopsimrl_core._errors import ShopSimulatorError
    from shopsimrl_core.adapters._environment import ShopSimulatorClient

    env = config.environment
    label = config.source_label
    async with ShopSimulatorClient(
        base_url=env.base_url,
        timeout=min(env.timeout, 10.0),
        persona=persona,
        transport=transport,
        http_transport=env.http_transport,
    ) as client:
        try:
            health = await client.health()
        except ShopSimulatorError as exc:
            untrusted = _untrusted(exc)
            if untrusted is not None:  # not "nothing answers there": the handshake failed (issue 24)
                raise _fail(label, "environment.base_url", f"GET {env.base_url.rstrip('/')}/healthz: {untrusted}",
                            _TLS_FIX, "tls-untrusted") from None
            reason = _reason(exc)
            problem = f"GET {env.base_url.rstrip('/')}/healthz: {reason}" if reason else exc.one_line()
            raise _fail(
                label,
                "environment.base_url",
                problem,
                "start the environment or fix the URL",
                "environment-unreachable",
            ) from None
    for key, known in (
        ("environment_version", KNOWN_ENVIRONMENT_VERSIONS),
        ("observation_version", KNOWN_OBSERVATION_VERSIONS),
    ):
        value = health.get(key)
        if value is not None and value not in known:
            raise _fail(
                label,
                "environment.base_url",
                f"the server reports {key} {value!r}, this client speaks {sorted(known)}",
                "point environment.base_url at a compatible server",
                "environment-incompatible",
            )
    return health


def _headers(config: Any) -> dict[str, str]:
    # the run refuses a missing key before preflight (``_check_api_key``); here it only sends what is set
    headers: dict[str, str] = config.model.auth().headers(required=False)
    return headers


async def _check_models(config: Any, transport: httpx.AsyncBaseTransport | None) -> list[str]:
    model = config.model
    label = config.source_label
    url = model.base_url.rstrip("/") + "/models"
    from shopsimrl_core.adapters._http import TransportError, build_engine
    from shopsimrl_core.adapters._json import loads

    wait = min(model.timeout, 10.0)
    engine = build_engine(
        url,
        mode=model.http_transport,
        timeout=wait,
        read_timeout=wait,
        max_connections=1,
        trust_env=model.trust_env,
        transport=transport,
    )
    try:
        response = await engine.request("GET", url, headers=_headers(config))
    except TransportError as exc:
        untrusted = _untrusted(exc)
        if untrusted is not None:
            raise _fail(label, "model.base_url", f"GET {url}: {untrusted}", _TLS_FIX, "tls-untrusted") from None
        raise _fail(
            label,
            "model.base_url",
            f"GET {url}: {_reason(exc) or exc}",
            "start the model server or fix the URL",
            "model-unreachable",
        ) from None
    finally:
        await engine.aclose()
    if response.status in (401, 403):
        raise _fail(
            label,
            "model.api_key_env",
            f"GET {url} answered HTTP {response.status}",
            "export a valid API key in the variable model.api_key_env names",
            "model-unauthorized",
        )
    if response.status != 200:
        raise _fail(
            label,
            "model.base_url",
            f"GET {url} answered HTTP {response.status}",
            "use the OpenAI base URL of the server (it usually ends in /v1)",
            "model-unreachable",
        )
    try:
        body = loads(response.data)
    except ValueError:
        body = None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        kind = (response.content_type or "no content type").split(";")[0]
        raise _fail(
            label,
            "model.base_url",
            f"GET {url} did not return an OpenAI model list (got {kind})",
            "use the OpenAI base URL of the server (it usually ends in /v1)",
            "model-bad-response",
        )
    served = [str(item["id"]) for item in data if isinstance(item, dict) and "id" in item]
    if model.name not in served:
        shown = ", ".join(repr(name) for name in served[:5]) or "none"
        raise _fail(
            label,
            "model.name",
            f"{model.name!r} is not served at {model.base_url} (served: {shown})",
            "set model.name to a served model id",
            "model-not-served",
        )
    return served


async def _check_probe(config: Any, transport: httpx.AsyncBaseTransport | None) -> dict[str, Any]:
    from shopsimrl_core._errors import InferenceError
    from shopsimrl_core.adapters._model import ChatModelClient

    label = config.source_label
    async with ChatModelClient.from_config(
        config.model,
        transport=transport,
        max_tokens=min(config.model.max_tokens, 16),
        max_retries=min(config.model.max_retries, 2),
        timeout=min(config.model.timeout, 60.0),
        retry_backoff_seconds=min(config.model.retry_backoff_seconds, 0.5),
        stream=False,
        max_connections=1,
    ) as client:
        try:
            output = await client.complete(list(_PROBE_MESSAGES), None, seed=None)
        except InferenceError as exc:
            raise _fail(
                label,
                "model.base_url",
                f"the probe completion failed: {exc.one_line()[:300]}",
                "check the model server's log",
                "model-probe-failed",
            ) from None
    error = output.protocol_error
    # An empty answer to a few tokens is fine (thinking models); a body that is not a completion is not.
    if error is not None and error.get("code") != "empty_response":
        raise _fail(
            label,
            "model.base_url",
            f"the probe completion's body is not a chat completion ({error.get('code')}: "
            f"{str(error.get('message'))[:200]})",
            "use the OpenAI base URL of the server (it usually ends in /v1)",
            "model-bad-response",
        )
    return {"finish_reason": output.finish_reason, "latency_ms": output.latency_ms, "attempts": output.attempts}


async def apreflight(
    config: Any,
    *,
    persona: bool | None = None,
    env_transport: httpx.AsyncBaseTransport | None = None,
    model_transport: httpx.AsyncBaseTransport | None = None,
    check_model: bool = True,
) -> PreflightReport:
    """Run the preflight of *config* (an ``EvalConfig``) on the running loop.

    *persona* only shapes the environment client (default: ``environment.persona`` or false);
    *check_model* false skips checks 2 and 3 (for runs whose episodes never call the model).

    Raises:
        PreflightError: one line, codes ``environment-unreachable``, ``environment-incompatible``,
            ``model-unreachable``, ``model-unauthorized``, ``model-bad-response``, ``model-not-served``,
            ``model-probe-failed``.
    """
    persona_flag = bool(config.environment.persona) if persona is None else persona
    health = await _check_environment(config, env_transport, persona_flag)
    served: list[str] = []
    probe: dict[str, Any] = {}
    if check_model:
        served = await _check_models(config, model_transport)
        probe = await _check_probe(config, model_transport)
    return PreflightReport(environment=health, served_models=served, probe=probe)


def preflight(config: Any, **kwargs: Any) -> PreflightReport:
    """Synchronous :func:`apreflight` (same arguments and errors).

    Safe to call while a loop runs in this thread (it then runs on a helper thread).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(apreflight(config, **kwargs))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, apreflight(config, **kwargs)).result()
