"""The environment adapter: an async ShopSimulator client (runtime-semantics §8, http-contract §4–§6, §18).

:class:`ShopSimulatorClient` owns the connection pools for one environment endpoint for the whole
run. Each episode opens an :class:`EnvironmentSession` (``client.session()``) that holds at most one
lease: ``reset`` → ``interact``… → ``terminate`` → ``close`` (``release_one``). The session is an
async context manager, so the lease is released on every exit path, cancellation included.

Rules that matter:

* ``include_private_goal`` is always sent as ``false``: the agent side never sees the goal early.
* A call is repeated (up to ``retry_attempts`` tries, backoff from ``retry_backoff_seconds``
  doubling to 2 s) only where repeating it is safe (:func:`retry_reason`): ``reset`` before a lease
  exists, ``release_one`` and ``/healthz`` on 429/5xx and transport failures; ``interact`` and
  ``terminate``, which are not idempotent, only when the server cannot have acted on the request —
  HTTP 429 or 503, a connection that was never made, or a reused keep-alive connection the server
  closed before answering (``TransportError.stale``). Anything else fails the episode, which the
  evaluator reruns whole with a fresh lease.
* ``reset`` may block server-side while all slots are leased, so it has no read timeout; it goes
  through its own pool so that blocked resets never starve the calls of running episodes (which
  would deadlock: running episodes could not release their slots).
* A 409 means the lease is gone (:class:`LeaseError`); a 409 on release is logged and ignored.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from shopsimrl_core._backoff import Backoff
from shopsimrl_core._errors import LeaseError, ShopSimulatorError
from shopsimrl_core._versions import ENVIRONMENT_ADAPTER, INTERACTION_MODE, KNOWN_OBSERVATION_VERSIONS
from shopsimrl_core.adapters._env_retry import lease_in, may_have_acted, retry_reason, settle_lost_reset
from shopsimrl_core.adapters._http import TransportError, build_engine, select_transport
from shopsimrl_core.adapters._json import dumps, loads, loads_finite

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ShopSimulatorClient",
    "EnvironmentSession",
    "sanitize_payload",
    "environment_identity",
    "retry_reason",
    "TERMINATION_REASONS",
]

logger = logging.getLogger("shopsimrl_core.environment")

TERMINATION_REASONS = ("action_limit", "generation_length")
_LEASE_KEYS = ("env_idx", "lease_id")
_PRIVATE_RESET_KEYS = ("private_task_instruction", "goal_options", "reason_key")
_JSON_HEADERS = {"Content-Type": "application/json"}
def sanitize_payload(payload: dict[str, Any], *, reset: bool = False) -> dict[str, Any]:
    """Return a copy fit for a trace: lease fields removed; for a reset also the private-goal keys (§8.2)."""
    drop = _LEASE_KEYS + (_PRIVATE_RESET_KEYS if reset else ())
    return {key: value for key, value in payload.items() if key not in drop}


def environment_identity(base_url: str, persona: bool) -> dict[str, Any]:
    """The plan's environment identity (§6.3): ``{adapter, base_url, persona, interaction_mode}``."""
    return {
        "adapter": ENVIRONMENT_ADAPTER,
        "base_url": base_url.rstrip("/"),
        "persona": persona,
        "interaction_mode": INTERACTION_MODE,
    }


class ShopSimulatorClient:
    """Async client of one ShopSimulator endpoint (``POST {base_url}/api/shop_agent``).

    **Parameters:** ``base_url``; ``timeout`` (seconds for every call except the read of ``reset``);
    ``persona`` (sent as ``if_persona``); ``max_connections`` (per pool); ``transport`` (the httpx
    seam, shared by both pools; it wins over ``http_transport``); ``http_transport`` (``auto`` |
    ``aiohttp`` | ``httpx``, see ``_http.py``); ``expected_environment_versions`` (None: any version
    accepted and recorded); ``expected_observation_versions`` (None: the versions this runtime
    knows; an empty collection disables the check); ``retry_attempts`` (total tries of one call
    where repeating it is safe, see :func:`retry_reason`) and ``retry_backoff_seconds`` (first
    backoff, doubling to 2 s, jittered); ``keepalive_expiry`` (seconds an idle pooled connection is
    kept; None: the engine's 4 s, lowered when the server turns out to close idle connections sooner).
    """

    def __init__(
        self,
        *,
        base_url: str,
        timeout: float = 30.0,
        persona: bool,
        max_connections: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
        expected_environment_versions: Iterable[str] | None = None,
        expected_observation_versions: Iterable[str] | None = None,
        http_transport: str = "auto",
        retry_attempts: int = 4,
        retry_backoff_seconds: float = 0.1,
        keepalive_expiry: float | None = None,
    ) -> None:
        if retry_attempts < 1:
            raise ValueError("retry_attempts counts total tries of one call and must be >= 1")
        self.retry_attempts = retry_attempts
        self.retry_backoff_seconds = retry_backoff_seconds
        self.keepalive_expiry = keepalive_expiry
        self.retries = 0
        """Calls repeated so far (after a failure :func:`retry_reason` found safe to repeat)."""
        # seams for tests: the sleep used for backoff and the jitter source
        self.sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
        self.rng = random.Random()
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/api/shop_agent"
        self.timeout = timeout
        self.persona = bool(persona)
        self.max_connections = max_connections
        self.expected_environment_versions = (
            frozenset(expected_environment_versions) if expected_environment_versions is not None else None
        )
        observation_versions = (
            KNOWN_OBSERVATION_VERSIONS
            if expected_observation_versions is None
            else frozenset(expected_observation_versions)
        )
        self.expected_observation_versions = observation_versions or None
        self._transport = transport
        self.http_transport = http_transport
        select_transport(self.url, mode=http_transport)  # a bad mode fails here, not at the first call
        self._step_client: Any = None
        self._reset_client: Any = None
        self._closed = False
        # resets whose episode was cancelled mid-request: finished and released before aclose
        self._orphan_resets: set[asyncio.Task[Any]] = set()

    @property
    def identity(self) -> dict[str, Any]:
        """The environment identity of the plan (§6.3), without observed versions."""
        return environment_identity(self.base_url, self.persona)

    # -- lifecycle ------------------------------------------------------------------------------

    def _clients(self) -> tuple[Any, Any]:
        if self._closed:
            raise RuntimeError("Cannot send a request, as the environment client has been closed.")
        if self._step_client is None or self._reset_client is None:
            # proxies are never honoured for the environment (§8.1): trust_env=False.
            # Two pools: blocked resets must not hold the connections of running episodes' steps.
            def engine(read_timeout: float | None) -> Any:
                return build_engine(
                    self.url,
                    mode=self.http_transport,
                    timeout=self.timeout,
                    read_timeout=read_timeout,
                    max_connections=self.max_connections,
                    trust_env=False,
                    transport=self._transport,
                    keepalive_expiry=self.keepalive_expiry,
                )

            self._step_client = engine(self.timeout)
            self._reset_client = engine(None)
        return self._step_client, self._reset_client

    async def __aenter__(self) -> ShopSimulatorClient:
        self._clients()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close both connection pools. Idempotent. Sessions must be closed first."""
        if self._orphan_resets:
            await asyncio.gather(*self._orphan_resets, return_exceptions=True)
        self._closed = True
        for client in (self._step_client, self._reset_client):
            if client is not None:
                await client.aclose()
        self._step_client = self._reset_client = None

    def _adopt_cancelled_reset(self, post: asyncio.Future[dict[str, Any]]) -> None:
        # The server may grant a lease for a reset whose caller was cancelled: wait for the answer
        # in the background and release that lease, so a Ctrl-C never leaks a slot.
        async def finish() -> None:
            try:
                result = await post
            except BaseException:
                return
            env_idx, lease_id = result.get("env_idx"), result.get("lease_id")
            if isinstance(env_idx, int) and isinstance(lease_id, str) and lease_id:
                try:
                    await self._post(
                        {"action": "release_one", "env_idx": env_idx, "lease_id": lease_id}, env_idx=env_idx
                    )
                except Exception as exc:
                    logger.warning("release_one after a cancelled reset of environment %s failed: %s", env_idx, exc)

        task = asyncio.ensure_future(finish())
        self._orphan_resets.add(task)
        task.add_done_callback(self._orphan_resets.discard)

    def session(self) -> EnvironmentSession:
        """A new lease scope for one episode (no request is sent until ``reset``)."""
        return EnvironmentSession(self)

    async def release_one(self, env_idx: int, lease_id: str) -> None:
        """Send ``release_one`` for a lease; a 409 (already released or invalidated) is logged and ignored.

        Not shielded from cancellation: a caller that must finish the release anyway runs it in a
        task of its own (``EnvironmentSession.close``, the lease journal's release).

        Raises:
            ShopSimulatorError: the release failed otherwise.
        """
        try:
            await self._post({"action": "release_one", "env_idx": env_idx, "lease_id": lease_id}, env_idx=env_idx)
        except LeaseError as exc:
            logger.warning("release_one of environment %s ignored: %s", env_idx, exc)

    async def health(self) -> dict[str, Any]:
        """``GET /healthz`` and return its JSON object.

        Raises:
            ShopSimulatorError: unreachable server, non-200 status or a non-object body.
        """
        step, _ = self._clients()
        tries = 0
        while True:
            tries += 1
            reason: str | None = None
            try:
                response = await step.request("GET", self.base_url + "/healthz")
            except TransportError as exc:
                reason = retry_reason("healthz", failure=exc)
                if reason is None or tries >= self.retry_attempts:
                    raise ShopSimulatorError(
                        f"environment health check failed: {exc}; is the server at {self.base_url} running?"
                    ) from exc
            else:
                reason = retry_reason("healthz", status=response.status) if response.status != 200 else None
                if reason is None or tries >= self.retry_attempts:
                    break
            await self._backoff(tries, "healthz", reason)
        if response.status != 200:
            raise ShopSimulatorError(f"environment health check answered HTTP {response.status}: {response.text[:300]}")
        try:
            body = loads(response.data)
        except ValueError as exc:
            raise ShopSimulatorError("environment health check did not return JSON") from exc
        if not isinstance(body, dict):
            raise ShopSimulatorError("environment health check did not return a JSON object")
        return body

    # -- transport ------------------------------------------------------------------------------

    async def _backoff(self, tries: int, action: str, reason: str) -> None:
        self.retries += 1
        logger.info("environment %s repeated after try %d (%s)", action, tries, reason)
        await self.sleep(Backoff(self.retry_backoff_seconds, 2.0).delay(tries, self.rng.random()))

    async def _post(self, payload: dict[str, Any], *, env_idx: int | None = None) -> dict[str, Any]:
        """Send one envelope and return ``result``; every failure becomes a ShopSimulatorError.

        A failure :func:`retry_reason` finds safe to repeat is retried (``retry_attempts`` tries in all).
        """
        body = dumps(payload)
        tries = 0
        while True:
            tries += 1
            try:
                return await self._post_once(payload, body, env_idx)
            except ShopSimulatorError as exc:
                reason = getattr(exc, "retry", None)
                if reason is None or tries >= self.retry_attempts:
                    if tries > 1:
                        exc.args = (f"{exc.args[0]} (after {tries} tries)", *exc.args[1:])
                    raise
            await self._backoff(tries, payload["action"], reason)

    async def _post_once(self, payload: dict[str, Any], content: bytes, env_idx: int | None) -> dict[str, Any]:
        step, reset = self._clients()
        client = reset if payload["action"] == "reset" else step
        action = payload["action"]
        try:
            response = await client.request("POST", self.url, content, _JSON_HEADERS)
        except TransportError as exc:
            raise ShopSimulatorError(
                f"environment {action} request failed: {exc}",
                env_idx=env_idx,
                action=action,
                retry=retry_reason(action, failure=exc),
                # sent and unanswered (or cut off): the server may have granted, or grant later, a lease
                may_hold_lease=action == "reset" and may_have_acted(exc),
            ) from exc
        status = response.status
        undecodable = ""
        try:
            body = loads_finite(response.data)  # a trace line cannot hold NaN: refuse it here, at the source
        except ValueError as exc:
            body, undecodable = None, f" (the body is not JSON: {exc})"
        result = body.get("result") if isinstance(body, dict) else None
        error = result.get("error") if isinstance(result, dict) else None
        if status == 409:
            raise LeaseError(
                f"environment {action}: lease lost (HTTP 409): {error or response.text[:300]}",
                env_idx=env_idx,
                action=action,
                status=status,
            )
        if not 200 <= status < 300:
            detail = error if error else response.text[:300]
            raise ShopSimulatorError(
                f"environment {action} failed with HTTP {status}: {detail}",
                env_idx=env_idx,
                action=action,
                status=status,
                retry=retry_reason(action, status=status, error=error if isinstance(error, str) else None),
            )
        if not isinstance(result, dict):
            raise ShopSimulatorError(
                f"environment {action} response has no result object{undecodable}",
                env_idx=env_idx,
                action=action,
                status=status,
                # a 2xx reset granted a lease the body does not show whole: the ids, if they made it
                may_hold_lease=action == "reset",
                lost_lease=lease_in(response.data) if action == "reset" else None,
            )
        if error:
            raise ShopSimulatorError(
                f"environment {action} error: {error}", env_idx=env_idx, action=action, status=status
            )
        return result

    def _check_observation(self, result: dict[str, Any], action: str, env_idx: int | None) -> str:
        if not isinstance(result.get("observation"), str):
            raise ShopSimulatorError(f"environment {action} result has no string observation", env_idx=env_idx)
        state = result.get("observation_state")
        if not isinstance(state, dict) or not isinstance(state.get("observation_version"), str):
            raise ShopSimulatorError(
                f"environment {action} result has no observation_state with a string observation_version",
                env_idx=env_idx,
            )
        version: str = state["observation_version"]
        if self.expected_observation_versions is not None and version not in self.expected_observation_versions:
            raise ShopSimulatorError(
                f"environment {action}: observation_version {version!r} is not supported "
                f"(expected one of {sorted(self.expected_observation_versions)}); the server is incompatible",
                env_idx=env_idx,
            )
        return version


class EnvironmentSession:
    """One episode's lease on a ShopSimulator slot. Holds at most one lease; always release it.

    ``async with client.session() as env:`` guarantees ``close()`` (``release_one``) on every exit.
    """

    def __init__(self, client: ShopSimulatorClient) -> None:
        self.client = client
        self.env_idx: int | None = None
        self.lease_id: str | None = None
        self.environment_version: str | None = None
        self.observation_version: str | None = None
        self.done = False

    async def __aenter__(self) -> EnvironmentSession:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    @property
    def holds_lease(self) -> bool:
        return self.lease_id is not None

    async def reset(self, task_id: int) -> dict[str, Any]:
        """Start task *task_id* on a free slot (may wait for one) and return the raw reset result.

        Raises:
            ShopSimulatorError: error answer, missing or mistyped keys, retired ``instruction`` key,
                unexpected versions, or a lease already held by this session.
        """
        if self.lease_id is not None:
            raise ShopSimulatorError("this environment session already holds a lease; one session runs one episode")
        payload = {
            "action": "reset",
            "idx": task_id,
            "if_persona": self.client.persona,
            "include_private_goal": False,
            "interaction_mode": INTERACTION_MODE,
        }
        post = asyncio.ensure_future(self.client._post(payload))
        try:
            result = await asyncio.shield(post)
        except asyncio.CancelledError:
            self.client._adopt_cancelled_reset(post)
            raise
        except ShopSimulatorError as exc:
            await settle_lost_reset(self.client, exc)
            raise
        env_idx, lease_id = result.get("env_idx"), result.get("lease_id")
        if isinstance(env_idx, int) and not isinstance(env_idx, bool) and isinstance(lease_id, str) and lease_id:
            # take the lease first, so that any check failing below still releases it
            self.env_idx, self.lease_id = env_idx, lease_id
        else:
            raise ShopSimulatorError("environment reset result has no integer env_idx and string lease_id")
        if "instruction" in result:
            raise ShopSimulatorError(
                "environment reset carries the retired key 'instruction'; the server is incompatible", env_idx=env_idx
            )
        if not isinstance(result.get("task_instruction"), str):
            raise ShopSimulatorError("environment reset result has no string task_instruction", env_idx=env_idx)
        self.observation_version = self.client._check_observation(result, "reset", env_idx)
        version = result.get("environment_version")
        expected = self.client.expected_environment_versions
        if expected is not None and version not in expected:
            raise ShopSimulatorError(
                f"environment_version {version!r} is not supported (expected one of {sorted(expected)})",
                env_idx=env_idx,
            )
        self.environment_version = version if isinstance(version, str) else None
        self.done = False
        return result

    def _lease_payload(self, action: str) -> dict[str, Any]:
        if self.lease_id is None:
            raise ShopSimulatorError(f"environment {action} without a lease; call reset first")
        return {"action": action, "env_idx": self.env_idx, "lease_id": self.lease_id}

    async def interact(self, action: str) -> dict[str, Any]:
        """Send one action (never retried: ``interact`` is not idempotent) and return the raw result.

        Raises:
            LeaseError: the lease is gone (409): abandon the episode.
            ShopSimulatorError: error answer or malformed result.
        """
        payload = self._lease_payload("interact")
        payload["response"] = action
        result = await self.client._post(payload, env_idx=self.env_idx)
        self.client._check_observation(result, "interact", self.env_idx)
        if result.get("done") is True:
            self.done = True
        return result

    async def terminate(self, reason: str) -> dict[str, Any]:
        """End an unpurchased episode with ``action_limit`` or ``generation_length``.

        Raises:
            ValueError: any other reason.
            ShopSimulatorError: error answer, malformed result, or a reply echoing another reason.
        """
        if reason not in TERMINATION_REASONS:
            raise ValueError(f"termination reason must be one of {TERMINATION_REASONS}, got {reason!r}")
        payload = self._lease_payload("terminate")
        payload["termination_reason"] = reason
        result = await self.client._post(payload, env_idx=self.env_idx)
        self.client._check_observation(result, "terminate", self.env_idx)
        if result.get("termination_reason") != reason:
            raise ShopSimulatorError(
                f"environment terminate echoed termination_reason {result.get('termination_reason')!r}, expected "
                f"{reason!r}",
                env_idx=self.env_idx,
            )
        self.done = True
        return result

    async def close(self) -> None:
        """Release the lease with ``release_one`` if one is held. Safe to call more than once.

        The release runs shielded from cancellation, so a cancelled episode still frees its slot.
        A 409 (already released or invalidated) is logged and ignored.

        Raises:
            ShopSimulatorError: the release failed otherwise (the caller records it as a cleanup error).
        """
        if self.lease_id is None or self.env_idx is None:
            return
        env_idx, lease_id = self.env_idx, self.lease_id
        self.env_idx = self.lease_id = None
        release = asyncio.ensure_future(self.client.release_one(env_idx, lease_id))
        try:
            await asyncio.shield(release)
        except asyncio.CancelledError:
            # cancelled while releasing: let the release finish (bounded), then propagate
            await asyncio.wait([release], timeout=self.client.timeout)
            if release.done() and not release.cancelled() and release.exception() is not None:
                logger.warning(
                    "release_one of environment %s failed during cancellation: %s", env_idx, release.exception()
                )
            raise
