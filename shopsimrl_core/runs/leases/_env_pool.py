"""Several ShopSimulator servers behind one environment: episodes spread by free slots.

:class:`EnvironmentPool` has the surface the evaluator and the episode runtime use of one
environment (``session()``, ``health()``, ``recover()``, ``drain()``, ``base_url``, ``identity``,
``async with``/``aclose()``); its members are per-server environments — in a run, one
``JournaledEnvironment`` per server over a shared lease journal, so every lease is journaled with
the URL of the server that granted it and the reliability layer's bounded reset wait, retried
release and recovery apply per server.

* **Spread by free slots.** A session picks its server at ``reset``: the one with the most free
  slots, estimated as the ``free_slots`` of its last ``/healthz`` minus the leases this pool took
  on it since (ties: the server chosen least recently).
* **A lease stays tied to its server.** ``interact``, ``terminate`` and the release go to the
  server that granted the lease; a session's ``base_url`` says which.
* **One server down does not stop the run.** A reset that cannot reach a server (transport
  failure, no lease granted) marks it down and is sent to another server at once; a down server
  gets no new episodes and is probed (``/healthz``) every ``probe_interval_s`` until it answers.
  An episode whose server died mid-way fails like any environment failure and is retried by the
  evaluator on a live server. ``health()`` fails only when every server is down, so the outage
  gate waits only for a real outage of the whole environment.

The plan's identity is the first member's (``environment.base_url``), so adding or removing
servers does not change a run's fingerprint.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shopsimrl_core._errors import ShopSimulatorError
from shopsimrl_core.adapters._http import TransportError
from shopsimrl_core.adapters._lease_session import LeaseSession

__all__ = ["EnvironmentPool", "PooledSession", "ServerState", "environment_client", "per_server"]

logger = logging.getLogger("shopsimrl_core.env_pool")


@dataclass
class ServerState:
    """What the pool knows about one server (see :meth:`EnvironmentPool.snapshot`)."""

    index: int
    member: Any
    free_at_probe: int | None = None
    slots: int | None = None
    outstanding_at_probe: int = 0
    outstanding: int = 0
    episodes: int = 0
    down: bool = False
    last_chosen: int = -1
    probe: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return str(self.member.base_url).rstrip("/")

    def free_estimate(self) -> int:
        """Free slots now, as far as this pool can tell without asking."""
        base = self.free_at_probe if self.free_at_probe is not None else 0
        return base - (self.outstanding - self.outstanding_at_probe)


def _unreachable(exc: BaseException) -> bool:
    # The server could not be reached at all: no HTTP answer, so no lease was granted.
    return isinstance(exc, ShopSimulatorError) and isinstance(exc.__cause__, TransportError)


class EnvironmentPool:
    """Several environment servers used as one (see the module docstring).

    **Parameters:** ``members`` (one environment per server, each with ``base_url``, ``session()``,
    ``health()``; optionally ``recover()``, ``drain()``, ``aclose()``); ``probe_interval_s``
    (seconds between ``/healthz`` probes of a down server).
    """

    def __init__(self, members: Sequence[Any], *, probe_interval_s: float = 2.0) -> None:
        if not members:
            raise ValueError("an environment pool needs at least one server")
        self.servers = [ServerState(index, member) for index, member in enumerate(members)]
        urls = [s.base_url for s in self.servers]
        if len(set(urls)) != len(urls):
            raise ValueError(f"environment servers must be distinct, got {urls}")
        self.probe_interval_s = probe_interval_s
        self._choices = 0
        self._refreshing: asyncio.Task[None] | None = None

    # -- the one-environment surface ----------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The first server's URL: the environment's name in the plan and the manifest."""
        return self.servers[0].base_url

    def __getattr__(self, name: str) -> Any:
        # identity, persona, timeout, ... are the first server's (the plan's environment).
        if name == "servers":
            raise AttributeError(name)
        return getattr(self.servers[0].member, name)

    def session(self) -> PooledSession:
        """A lease scope for one episode; its server is chosen at ``reset``."""
        return PooledSession(self)

    async def __aenter__(self) -> EnvironmentPool:
        for server in self.servers:
            client = getattr(server.member, "client", server.member)
            await client.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the probes and close every server's client. Idempotent."""
        probes = [s.probe for s in self.servers if s.probe is not None]
        if self._refreshing is not None:
            probes.append(self._refreshing)
        for probe in probes:
            probe.cancel()
        await asyncio.gather(*probes, return_exceptions=True)
        for server in self.servers:
            client = getattr(server.member, "client", server.member)
            await client.aclose()

    async def health(self) -> dict[str, Any]:
        """``/healthz`` of every server, combined: slots and free slots summed over the servers that answer.

        The first answering server's body gives the other keys (versions, tasks); ``servers`` lists
        each server's ``base_url``, ``ok``, ``environment_slots`` and ``free_slots``. Refreshes the
        free-slot estimates and the down marks.

        Raises:
            ShopSimulatorError: no server answered (the first server's error).
        """
        results = await asyncio.gather(*(s.member.health() for s in self.servers), return_exceptions=True)
        combined: dict[str, Any] | None = None
        slots = free = 0
        listing = []
        first_error: BaseException | None = None
        for server, result in zip(self.servers, results):
            if isinstance(result, BaseException):
                if isinstance(result, asyncio.CancelledError):
                    raise result
                first_error = first_error or result
                self._mark_down(server, result)
                listing.append({"base_url": server.base_url, "ok": False})
                continue
            self._observe(server, result)
            entry = {"base_url": server.base_url, "ok": True}
            entry.update(environment_slots=result.get("environment_slots"), free_slots=result.get("free_slots"))
            listing.append(entry)
            if combined is None:
                combined = dict(result)
            slots += int(result.get("environment_slots") or 0)
            free += int(result.get("free_slots") or 0)
        if combined is None:
            assert first_error is not None
            raise first_error
        combined.update(environment_slots=slots, free_slots=free, servers=listing)
        return combined

    async def recover(self) -> tuple[int, int]:
        """Every server's lease recovery (members without one count nothing): ``(released, still outstanding)``."""
        released = kept = 0
        for server in self.servers:
            recover = getattr(server.member, "recover", None)
            if recover is None:
                continue
            try:
                r, k = await recover()
            except Exception as exc:  # a down server keeps its journaled leases for the next start
                logger.warning("lease recovery on %s failed: %s", server.base_url, exc)
                continue
            released, kept = released + r, kept + k
        journals = {id(j): j for j in (getattr(s.member, "journal", None) for s in self.servers) if j is not None}
        if len(journals) == 1:
            # One shared journal: each member counted the other servers' leases as "kept"; what is
            # really left is what the journal still holds after every server released its own.
            kept = len(next(iter(journals.values())).outstanding())
        return released, kept

    async def drain(self, timeout: float) -> None:
        """Wait (bounded) for every server's background releases."""
        drains = [server.member.drain(timeout) for server in self.servers if hasattr(server.member, "drain")]
        await asyncio.gather(*drains, return_exceptions=True)

    def snapshot(self) -> list[dict[str, Any]]:
        """Per server: base_url, down, episodes started, leases outstanding, estimated free slots."""
        return [{"base_url": s.base_url, "down": s.down, "episodes": s.episodes, "outstanding": s.outstanding,
                 "free_estimate": s.free_estimate()} for s in self.servers]

    # -- choosing -----------------------------------------------------------------------------

    def _pick(self, tried: set[int]) -> ServerState | None:
        live = [s for s in self.servers if not s.down and s.index not in tried]
        if not live:
            # Every server down (or tried): still try the untried ones, so the error is a real one.
            live = [s for s in self.servers if s.index not in tried]
        if not live:
            return None
        return max(live, key=lambda s: (s.free_estimate(), -s.last_chosen))

    def _take(self, server: ServerState) -> None:
        server.outstanding += 1
        server.last_chosen = self._choices
        self._choices += 1

    def _observe(self, server: ServerState, body: dict[str, Any]) -> None:
        free, slots = body.get("free_slots"), body.get("environment_slots")
        server.free_at_probe = free if isinstance(free, int) else server.free_at_probe
        server.slots = slots if isinstance(slots, int) else server.slots
        server.outstanding_at_probe = server.outstanding
        if server.down:
            server.down = False
            logger.warning("environment server %s is back; it takes new episodes again", server.base_url)

    def _mark_down(self, server: ServerState, exc: BaseException) -> None:
        if not server.down:
            server.down = True
            logger.warning("environment server %s is unreachable (%s); its episodes go to the other servers",
                           server.base_url, exc)
        if server.probe is None or server.probe.done():
            try:
                server.probe = asyncio.get_running_loop().create_task(self._probe_until_up(server))
            except RuntimeError:
                server.probe = None

    async def _probe_until_up(self, server: ServerState) -> None:
        while server.down:
            await asyncio.sleep(self.probe_interval_s)
            try:
                body = await server.member.health()
            except Exception:
                continue
            if isinstance(body, dict):
                self._observe(server, body)

    async def _refresh_unknown(self) -> None:
        # Before the first choice, learn every server's free slots once; the burst of first resets
        # shares one round of /healthz calls.
        if not any(s.free_at_probe is None and not s.down for s in self.servers):
            return
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh())
        await asyncio.shield(self._refreshing)

    async def _refresh(self) -> None:
        unknown = [s for s in self.servers if s.free_at_probe is None and not s.down]
        results = await asyncio.gather(*(s.member.health() for s in unknown), return_exceptions=True)
        for server, result in zip(unknown, results):
            if isinstance(result, dict):
                self._observe(server, result)
            elif isinstance(result, Exception):
                self._mark_down(server, result)
            else:
                server.free_at_probe = server.free_at_probe if server.free_at_probe is not None else 0


class PooledSession:
    """One episode's lease on a slot of one of the pool's servers (the surface of ``EnvironmentSession``)."""

    def __init__(self, pool: EnvironmentPool) -> None:
        self.pool = pool
        self.server: ServerState | None = None
        self.inner: LeaseSession | None = None

    async def __aenter__(self) -> PooledSession:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    @property
    def base_url(self) -> str | None:
        """The server holding this session's lease (None before ``reset``)."""
        return self.server.base_url if self.server is not None else None

    @property
    def env_idx(self) -> int | None:
        return self.inner.env_idx if self.inner is not None else None

    @property
    def lease_id(self) -> str | None:
        return self.inner.lease_id if self.inner is not None else None

    @property
    def holds_lease(self) -> bool:
        return self.inner is not None and self.inner.lease_id is not None

    @property
    def environment_version(self) -> str | None:
        return self.inner.environment_version if self.inner is not None else None

    @property
    def observation_version(self) -> str | None:
        return self.inner.observation_version if self.inner is not None else None

    @property
    def done(self) -> bool:
        return bool(self.inner.done) if self.inner is not None else False

    async def reset(self, task_id: int) -> dict[str, Any]:
        """Reset *task_id* on the server with the most free slots; an unreachable server is skipped.

        Raises:
            ShopSimulatorError: the chosen server answered with an error (not retried elsewhere:
                the answer is the server's verdict), or no server could be reached.
        """
        if self.inner is not None:
            raise ShopSimulatorError("this environment session already holds a lease; one session runs one episode")
        pool = self.pool
        await pool._refresh_unknown()
        tried: set[int] = set()
        while True:
            server = pool._pick(tried)
            if server is None:
                raise ShopSimulatorError(f"environment reset: none of the {len(pool.servers)} servers could be reached")
            tried.add(server.index)
            pool._take(server)
            inner: LeaseSession = server.member.session()
            try:
                result = await inner.reset(task_id)
            except BaseException as exc:
                if inner.lease_id is not None:
                    # A lease was granted and a check failed after it: close() must release it there.
                    self.server, self.inner = server, inner
                    server.episodes += 1
                    raise
                server.outstanding -= 1
                if _unreachable(exc) and len(tried) < len(pool.servers):
                    pool._mark_down(server, exc)
                    continue
                if _unreachable(exc):
                    pool._mark_down(server, exc)
                raise
            self.server, self.inner = server, inner
            server.episodes += 1
            return result

    async def interact(self, action: str) -> dict[str, Any]:
        """Send one action to the server holding the lease."""
        if self.inner is None:
            raise ShopSimulatorError("environment interact without a lease; call reset first")
        return await self.inner.interact(action)

    async def terminate(self, reason: str) -> dict[str, Any]:
        """End the episode on the server holding the lease."""
        if self.inner is None:
            raise ShopSimulatorError("environment terminate without a lease; call reset first")
        return await self.inner.terminate(reason)

    async def close(self) -> None:
        """Release the lease on its server (the member's own release rules). Safe to call twice."""
        inner, server = self.inner, self.server
        if inner is None or server is None:
            return
        held = inner.lease_id is not None
        try:
            await inner.close()
        finally:
            # Released (or handed to the member's background release): the slot is no longer this pool's.
            self.inner = None
            if held:
                server.outstanding -= 1


def environment_client(environment: Any, *, persona: bool, transport: Any = None) -> Any:
    """The environment of a config's ``environment`` section.

    One ``ShopSimulatorClient`` for ``base_url`` when ``base_urls`` is empty (exactly as before), else
    an :class:`EnvironmentPool` of one client per listed server (same timeout, pool size and engine).
    """
    from shopsimrl_core.adapters._environment import ShopSimulatorClient

    tuning: dict[str, Any] = {"retry_attempts": environment.call_retry_attempts}
    if environment.keepalive_expiry_seconds is not None:
        tuning["keepalive_expiry"] = environment.keepalive_expiry_seconds

    def client(url: str) -> ShopSimulatorClient:
        return ShopSimulatorClient(base_url=url, timeout=environment.timeout, persona=persona,
                                   max_connections=environment.max_connections, transport=transport,
                                   http_transport=environment.http_transport, **tuning)

    urls = list(getattr(environment, "base_urls", None) or [])
    if not urls:
        return client(environment.base_url)
    return EnvironmentPool([client(url) for url in urls])


def per_server(environment: Any, wrap: Callable[[Any], Any]) -> Any:
    """*wrap* applied to each server of *environment*: a pool of wrapped members, or the wrapped client.

    The evaluator wraps every server in its own ``JournaledEnvironment`` (one shared journal), so
    leases are journaled and recovered with the URL of the server that granted them.
    """
    if isinstance(environment, EnvironmentPool):
        return EnvironmentPool([wrap(server.member) for server in environment.servers],
                               probe_interval_s=environment.probe_interval_s)
    return wrap(environment)
