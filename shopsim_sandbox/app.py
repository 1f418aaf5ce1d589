r"""The ASGI environment server: `POST /api/shop_agent` and `GET /healthz` (http-contract §4–§6).

Responses are compact JSON with sorted keys and `\uXXXX` escapes, like the real server's framework.
Every status code and error string follows the contract's error catalogue (§5.6).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any, TypeGuard

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shopsim_sandbox.catalog import Catalog
from shopsim_sandbox.episode import Episode, EpisodeOver
from shopsim_sandbox.faults import FaultConfig, FaultInjector
from shopsim_sandbox.search import SearchIndex
from shopsim_sandbox.slots import SlotPool
from shopsim_sandbox.versions import (
    DEBUG_UI_PATH,
    ENVIRONMENT_VERSION,
    MAX_ACTIONS,
    OBSERVATION_VERSION,
    PRIMARY_REWARD,
    REPLAY_UI_PATH,
)

_ACTIONS = ("reset", "interact", "terminate", "release_one", "release_all")
_TERMINATION_REASONS = ("action_limit", "generation_length")
_MODES_TEXT = "['multi_turn', 'single_turn']"


class _ClientGone(Exception):
    """The client of a waiting reset disconnected: the reset is dropped."""


async def _disconnected(request: Request) -> None:
    # After the body is read, the ASGI receive channel yields only `http.disconnect`.
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return


async def _gone(request: Request) -> bool:
    # Let the loop read pending socket events first: with uvloop a timer (the latency sleep) fires
    # before the poll that would deliver a dead client's FIN, so a check right away misses it.
    for _ in range(2):
        await asyncio.sleep(0)
    return await request.is_disconnected()


class _Reply(Exception):
    """Ends request handling with an error answer."""

    def __init__(self, status: int, error: str):
        super().__init__(error)
        self.status = status
        self.error = error


def _json_response(payload: dict, status: int = 200) -> Response:
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n"
    return Response(body, status_code=status, media_type="application/json")


def _result(status: int = 200, **result: Any) -> Response:
    return _json_response({"result": result}, status)


def _is_json_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_json_content_type(header: str | None) -> bool:
    mimetype = (header or "").split(";", 1)[0].strip().lower()
    return mimetype == "application/json" or (mimetype.startswith("application/") and mimetype.endswith("+json"))


class ShopEnvironment:
    """Server state: catalog, search index, slot pool and fault injector."""

    def __init__(self, catalog: Catalog, *, slots: int, latency_ms: float = 0.0, faults: FaultConfig | None = None,
                 index: SearchIndex | None = None, lease_ttl_s: float | None = None):
        self.catalog = catalog
        self.index = index or SearchIndex(catalog.records, set(catalog.products))
        self.pool = SlotPool(slots, lease_ttl_s=lease_ttl_s)
        self.dropped_resets = 0
        self.queued_resets = 0
        """Resets that found no free slot and waited inside the server (``GET /sandbox/slots``): a client
        whose slot budget works never causes one (docs/runs.md, "Resets never queue inside the server")."""
        self.latency_ms = float(latency_ms)
        self.faults = FaultInjector(faults)

    # ----- operations --------------------------------------------------------------------------

    async def _acquire_for(self, request: Request | None) -> tuple[int, str]:
        """Acquire a slot; a reset whose client disconnects while it waits is dropped (no ghost lease)."""
        if request is None or self.pool.free_count > 0:
            return await self.pool.acquire()  # no wait: nothing to watch
        self.queued_resets += 1
        acquiring = asyncio.ensure_future(self.pool.acquire())
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({acquiring, gone}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            acquiring.cancel()  # the server is shutting down: the waiting acquirer must not take a slot later
            raise
        finally:
            gone.cancel()
        if not acquiring.done():
            acquiring.cancel()
        try:
            env_idx, lease = await acquiring
        except asyncio.CancelledError:
            if not gone.cancelled() and gone.done():
                self.dropped_resets += 1
                raise _ClientGone() from None
            raise
        if gone.done() and not gone.cancelled():
            await self.pool.release(env_idx)  # granted in the same instant the client left
            self.dropped_resets += 1
            raise _ClientGone()
        return env_idx, lease

    async def reset(self, body: dict, request: Request | None = None) -> Response:
        """``reset``: lease a free slot (the server assigns it) and start the task's episode."""
        if body.get("env_idx") is not None:
            raise _Reply(400, "reset must not include env_idx; the server assigns a slot")
        env_idx, lease = await self._acquire_for(request)
        try:
            payload = self._start(body, env_idx, lease)
        except _Reply:
            await self.pool.release(env_idx)
            raise
        except Exception:
            await self.pool.release(env_idx)
            raise
        if request is not None and await _gone(request):
            # The client died while this reset was being served (e.g. SIGKILL during the latency):
            # nobody can learn this lease, so do not keep it.
            await self.pool.release(env_idx)
            self.dropped_resets += 1
            raise _ClientGone()
        return _result(**payload)

    def _start(self, body: dict, env_idx: int, lease: str) -> dict:
        idx = body.get("idx")
        if idx is None:
            raise _Reply(500, "reset action requires idx parameter")
        if not _is_json_int(idx):
            raise _Reply(500, "task idx must be an integer")
        task = self.catalog.tasks.get(idx)
        if task is None:
            raise _Reply(500, f"'unknown or inactive task_id {idx}'")
        mode = str(body["interaction_mode"]) if "interaction_mode" in body else "single_turn"
        if mode not in MAX_ACTIONS:
            raise _Reply(500, f"unsupported interaction_mode {mode!r}; choose one of {_MODES_TEXT}")
        persona_mode = bool(body.get("if_persona"))
        episode = Episode(self.catalog, self.index, task, mode, env_idx)
        self.pool.episodes[env_idx] = episode
        goal = task.goal
        observation, state = episode.observation()
        payload = {
            "task_instruction": goal["instruction_simple"] if persona_mode and task.has_persona
            else goal["instruction_text"],
            "observation": observation,
            "observation_state": state,
            "message": f"Task {idx} started",
            "env_idx": env_idx,
            "lease_id": lease,
            "idx": idx,
            "task_mode": "persona" if persona_mode else "standard",
            "interaction_mode": mode,
            "environment_version": ENVIRONMENT_VERSION,
            "user_persona": dict(task.visible_persona),
        }
        if body.get("include_private_goal"):
            payload["private_task_instruction"] = goal["instruction_text"]
            payload["goal_options"] = list(goal["goal_options"])
            payload["reason_key"] = goal["reason_key"]
        return payload

    def _leased_episode(self, body: dict, op: str) -> tuple[int, Any, Episode]:
        env_idx = body.get("env_idx")
        lease = body.get("lease_id")
        if not _is_json_int(env_idx) or not lease:
            raise _Reply(400, f"{op} requires a valid env_idx and lease_id")
        if not self.pool.holds(env_idx, lease):
            raise _Reply(409, f"stale or invalid lease for environment {env_idx}")
        self.pool.touch(env_idx)
        return env_idx, lease, self.pool.episodes[env_idx]

    async def interact(self, body: dict) -> Response:
        """``interact``: apply the model's action to the leased slot's episode."""
        env_idx, lease, episode = self._leased_episode(body, "interact")
        response = body.get("response")
        if response is None:
            raise _Reply(500, "interact action requires response parameter")
        if not isinstance(response, str):
            raise _Reply(500, f"'{type(response).__name__}' object has no attribute 'replace'")
        try:
            result = episode.step(response)
        except EpisodeOver as exc:
            raise _Reply(500, str(exc)) from None
        result["lease_id"] = self.pool.leases[env_idx]
        return _result(**result)

    async def terminate(self, body: dict) -> Response:
        """``terminate``: end the leased slot's episode with a valid termination reason."""
        env_idx, lease, episode = self._leased_episode(body, "terminate")
        reason = body["termination_reason"] if "termination_reason" in body else "action_limit"
        if not (isinstance(reason, str) and reason in _TERMINATION_REASONS):
            raise _Reply(500, f"unsupported termination reason: {reason}")
        try:
            result = episode.terminate(reason)
        except EpisodeOver as exc:
            raise _Reply(500, str(exc)) from None
        result["lease_id"] = self.pool.leases[env_idx]
        return _result(**result)

    async def release_one(self, body: dict) -> Response:
        """``release_one``: free the slot of a valid lease."""
        env_idx, _lease, _episode = self._leased_episode(body, "release_one")
        await self.pool.release(env_idx)
        return _result(message=f"Environment {env_idx} has been released")

    async def release_all(self, body: dict) -> Response:
        """``release_all``: free every slot."""
        await self.pool.release_all()
        return _result(message="All environments have been initialized")

    # ----- HTTP ----------------------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        """The ``/api/shop_agent`` route: faults and latency first, then one JSON action dispatched.

        A bad action or lease is answered as the contract says (never an exception), a client that
        went away during a reset gets a 499 nobody reads.
        """
        raw = await request.body()
        decision = self.faults.decide("shop_agent:" + hashlib.sha256(raw).hexdigest())
        delay = self.latency_ms + decision.delay_ms
        if delay > 0:
            await asyncio.sleep(delay / 1000.0)
        if decision.status is not None:
            return _result(decision.status, error=f"injected fault: HTTP {decision.status}")
        body: Any = None
        if _is_json_content_type(request.headers.get("content-type")):
            try:
                body = json.loads(raw) if raw else None
            except (ValueError, UnicodeDecodeError):
                body = None
        if body is None:
            return _result(error="No JSON data provided")
        if not isinstance(body, dict):
            # Outside the contract: the real server fails with a non-JSON 500 page.
            return Response("Internal Server Error", status_code=500, media_type="text/plain")
        action = body.get("action")
        try:
            if not (isinstance(action, str) and action in _ACTIONS):
                raise _Reply(400, f"unsupported action: {action!r}")
            if action == "reset":
                return await self.reset(body, request)
            return await getattr(self, action)(body)
        except _ClientGone:
            return Response(b"", status_code=499)  # nobody reads it: the client has gone
        except _Reply as reply:
            return _result(reply.status, error=reply.error)
        except Exception as exc:  # the contract's catch-all: 500 with the exception text
            return _result(500, error=str(exc))

    async def healthz(self, request: Request) -> Response:
        """The health document: slots (idle leases expired first), versions, UI paths and task count."""
        self.pool.expire_idle()
        return _json_response({
            "debug_ui": DEBUG_UI_PATH,
            "environment_slots": self.pool.size,
            "environment_version": ENVIRONMENT_VERSION,
            "free_slots": self.pool.free_count,
            "observation_version": OBSERVATION_VERSION,
            "primary_reward": PRIMARY_REWARD,
            "ready": True,
            "replay_ui": REPLAY_UI_PATH,
            "tasks": self.catalog.active_task_count,
        })


SERVER_TIMING_HEADER = b"server-timing"
"""Opt-in response header (`--server-timing`): `app;dur=<ms>`, the time the app spent on the request."""


class ServerTiming:
    """ASGI middleware adding `server-timing: app;dur=<ms>` to every HTTP response.

    The duration runs from the moment the server hands the request to the app until the app starts
    its response (body read, JSON parse, routing, episode work and JSON encoding): the service time,
    without the time the request waited for the event loop. Opt-in only (`--server-timing`): the real
    server sends no such header, so by default the responses stay byte-identical to the contract.
    """

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        """Pass non-HTTP scopes through; time HTTP requests and add the header to their response."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def send_with_timing(message: dict) -> None:
            if message["type"] == "http.response.start":
                duration = f"app;dur={(time.perf_counter() - start) * 1000.0:.3f}".encode()
                message = {**message, "headers": [*message.get("headers", ()), (SERVER_TIMING_HEADER, duration)]}
            await send(message)

        await self.app(scope, receive, send_with_timing)


SANDBOX_IDENTITY_PATH = "/sandbox/identity"
"""Sandbox-only route (the real server has none): lets a client tell this sandbox from another server."""

SANDBOX_SLOTS_PATH = "/sandbox/slots"
"""Sandbox-only route (the real server has none): slot counters a test reads from outside the process."""


def build_env_app(catalog: Catalog, *, slots: int, latency_ms: float = 0, faults: FaultConfig | None = None,
                  index: SearchIndex | None = None, catalog_sha256: str | None = None,
                  server_timing: bool = False, lease_ttl_s: float | None = None) -> Starlette:
    """Build the environment ASGI app over `catalog` with `slots` slots (all knobs off by default).

    With `lease_ttl_s` (sandbox-only, off by default like the real server), a lease untouched for that
    many seconds is reclaimed when a reset needs a slot. A reset that waits for a slot is dropped when
    its client disconnects (no ghost lease).

    With `server_timing`, every response also carries `server-timing: app;dur=<ms>` (`ServerTiming`).

    `GET /sandbox/slots` (sandbox-only) answers `{environment_slots, free_slots, queued_resets,
    dropped_resets}`: how many resets had to wait inside the server for a slot, and how many of those
    were dropped because their client went away.

    With `catalog_sha256` (the SHA-256 of the served catalog file's bytes, as recorded in the split
    file's `source.cleaned_archive_sha256`), `GET /sandbox/identity` answers
    `{"server": "shopsim-sandbox", "catalog_sha256": ..., "tasks": N}`.
    """
    env = ShopEnvironment(
        catalog, slots=slots, latency_ms=latency_ms, faults=faults, index=index, lease_ttl_s=lease_ttl_s
    )
    routes = [
        Route("/api/shop_agent", env.handle, methods=["POST"]),
        Route("/healthz", env.healthz, methods=["GET"]),
    ]
    if catalog_sha256 is not None:
        identity = {"server": "shopsim-sandbox", "catalog_sha256": catalog_sha256, "tasks": catalog.active_task_count}

        async def sandbox_identity(request: Request) -> Response:
            return _json_response(identity)

        routes.append(Route(SANDBOX_IDENTITY_PATH, sandbox_identity, methods=["GET"]))

    async def sandbox_slots(request: Request) -> Response:
        return _json_response({
            "environment_slots": env.pool.size,
            "free_slots": env.pool.free_count,
            "queued_resets": env.queued_resets,
            "dropped_resets": env.dropped_resets,
        })

    routes.append(Route(SANDBOX_SLOTS_PATH, sandbox_slots, methods=["GET"]))
    app = Starlette(routes=routes, middleware=[Middleware(ServerTiming)] if server_timing else None)
    app.state.environment = env
    return app
