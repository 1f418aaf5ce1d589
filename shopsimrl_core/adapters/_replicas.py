"""Endpoint replicas: one checkpoint served by several OpenAI-compatible servers (one per GPU, data parallel).

:class:`ReplicaSet` decides where each request goes:

* **least outstanding** — the admitted replica with the fewest requests in flight; ties go to the
  one chosen least recently, so a lightly loaded set still spreads its traffic;
* **per-replica in-flight cap** — a request waits while every admitted replica is at its cap;
* **ejection and re-admission** — after :data:`EJECT_AFTER_FAILURES` consecutive failed attempts
  (connection refused, timeout, HTTP 5xx/429 …) a replica gets no new requests; a background probe
  (``GET <base_url>/models``) every ``probe_interval_s`` re-admits it once it answers 200. When
  every replica is ejected, requests go to all of them again, so the run's retry and outage
  handling see the real error instead of waiting forever.

:class:`ReplicatedChatModelClient` is a :class:`ChatModelClient` (same public methods and
signature) whose attempts go through a replica set: a retryable failure on one replica is retried
on another at once (the runtime-semantics §7.2 backoff applies only when no other replica is admitted), attempts
still count against ``max_retries``, and every answered output records which replica answered in
``metadata["replica"]``. Its ``identity`` (and so the plan fingerprint) is that of ``base_url``:
replicas serve one checkpoint and may be added or removed between invocations of a run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from shopsimrl_core._clock import round_ms
from shopsimrl_core.adapters._http import TransportError
from shopsimrl_core.adapters._model import (
    ChatModelClient,
    ModelEndpointFault,
    ModelRequestError,
    _EndpointFaulted,
    _Retryable,
    backoff_delay,
)
from shopsimrl_core.adapters._sse import StreamFailure
from shopsimrl_core.adapters._validation import ModelOutput

__all__ = ["EJECT_AFTER_FAILURES", "Replica", "ReplicaSet", "ReplicatedChatModelClient", "models_probe"]

logger = logging.getLogger("shopsimrl_core.replicas")

EJECT_AFTER_FAILURES = 2
"""Consecutive failed attempts after which a replica is ejected (one failure may be a blip)."""


@dataclass
class Replica:
    """One replica's live state (read it through :meth:`ReplicaSet.snapshot`)."""

    index: int
    base_url: str
    outstanding: int = 0
    answered: int = 0
    failed: int = 0
    consecutive_failures: int = 0
    ejected: bool = False
    ejections: int = 0
    last_chosen: int = -1


async def models_probe(base_url: str, timeout_s: float = 5.0) -> bool:
    """True when ``GET <base_url>/models`` answers 200 within *timeout_s* (proxies never used)."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client:
            response = await client.get(base_url.rstrip("/") + "/models")
    except httpx.HTTPError:
        return False
    return response.status_code == 200


class ReplicaSet:
    """Routing state of the replicas of one endpoint, for one event loop.

    **Parameters:** ``base_urls`` (at least one, distinct); ``max_in_flight`` (per replica; None:
    no cap); ``probe_interval_s`` (seconds between health probes of an ejected replica);
    ``probe`` (``async (base_url) -> bool``; default :func:`models_probe`); ``eject_after``
    (consecutive failures that eject).
    """

    def __init__(
        self,
        base_urls: Sequence[str],
        *,
        max_in_flight: int | None = None,
        probe_interval_s: float = 2.0,
        probe: Callable[[str], Awaitable[bool]] | None = None,
        eject_after: int = EJECT_AFTER_FAILURES,
    ) -> None:
        urls = [url.rstrip("/") for url in base_urls]
        if not urls:
            raise ValueError("a replica set needs at least one base URL")
        if len(set(urls)) != len(urls):
            raise ValueError(f"replica base URLs must be distinct, got {urls}")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1 or None")
        self.replicas = [Replica(index, url) for index, url in enumerate(urls)]
        self.max_in_flight = max_in_flight
        self.probe_interval_s = probe_interval_s
        self.eject_after = max(1, eject_after)
        self._probe = probe or models_probe
        self._changed: asyncio.Condition | None = None
        self._probes: dict[int, asyncio.Task[None]] = {}
        self._choices = 0
        self._waiting = 0

    def _condition(self) -> asyncio.Condition:
        # Created on first use, inside the running loop (a set may be built outside one).
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    def _candidates(self) -> list[Replica]:
        admitted = [r for r in self.replicas if not r.ejected]
        return admitted or list(self.replicas)

    def _pick(self, avoid: frozenset[int]) -> Replica | None:
        candidates = self._candidates()
        # A request retried after a failure goes elsewhere when it can.
        candidates = [r for r in candidates if r.index not in avoid] or candidates
        free = [r for r in candidates if self.max_in_flight is None or r.outstanding < self.max_in_flight]
        if not free:
            return None
        return min(free, key=lambda r: (r.outstanding, r.last_chosen))

    async def acquire(self, avoid: frozenset[int] = frozenset()) -> Replica:
        """Take a slot on the replica to send the next attempt to (waits while all are at their cap).

        Replicas whose index is in *avoid* (those a request already failed on) are chosen only when
        no other candidate exists.
        """
        changed = self._condition()
        async with changed:
            replica = self._pick(avoid)
            while replica is None:
                self._waiting += 1
                try:
                    await changed.wait()
                finally:
                    self._waiting -= 1
                replica = self._pick(avoid)
            replica.outstanding += 1
            replica.last_chosen = self._choices
            self._choices += 1
            return replica

    def release(self, replica: Replica, *, ok: bool | None) -> None:
        """Give the slot back.

        *ok*: True (answered), False (a failed attempt: counts towards ejection), None (neither:
        e.g. a non-retryable status or a cancelled request).
        """
        replica.outstanding -= 1
        if ok is True:
            replica.answered += 1
            replica.consecutive_failures = 0
        elif ok is False:
            replica.failed += 1
            replica.consecutive_failures += 1
            if not replica.ejected and replica.consecutive_failures >= self.eject_after:
                self._eject(replica)
        self._notify()

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[Replica]:
        """``async with replicas.lease() as replica:`` — acquire, then release.

        The release counts as a success unless the block raises (an exception is a failed attempt,
        cancellation neither).
        """
        replica = await self.acquire()
        ok: bool | None = None
        try:
            yield replica
            ok = True
        except asyncio.CancelledError:
            raise
        except BaseException:
            ok = False
            raise
        finally:
            self.release(replica, ok=ok)

    def has_other_admitted(self, replica: Replica) -> bool:
        """Whether a replica other than *replica* currently takes requests."""
        return any(not r.ejected and r is not replica for r in self.replicas)

    def snapshot(self) -> list[dict[str, Any]]:
        """Per-replica counters: base_url, outstanding, answered, failed, ejected, ejections."""
        return [{"base_url": r.base_url, "outstanding": r.outstanding, "answered": r.answered, "failed": r.failed,
                 "ejected": r.ejected, "ejections": r.ejections} for r in self.replicas]

    def _notify(self) -> None:
        changed = self._changed
        if changed is None or not self._waiting:
            return  # nobody waits for a slot: no wake-up task (this runs once per request)

        async def wake() -> None:
            async with changed:
                changed.notify_all()

        try:
            asyncio.get_running_loop().create_task(wake())
        except RuntimeError:  # no loop running: nobody can be waiting
            pass

    def _eject(self, replica: Replica) -> None:
        replica.ejected = True
        replica.ejections += 1
        logger.warning("replica %s ejected after %d consecutive failures; probing it every %g s",
                       replica.base_url, replica.consecutive_failures, self.probe_interval_s)
        if replica.index not in self._probes:
            try:
                task = asyncio.get_running_loop().create_task(self._probe_until_healthy(replica))
            except RuntimeError:
                return
            self._probes[replica.index] = task

    async def _probe_until_healthy(self, replica: Replica) -> None:
        try:
            while replica.ejected:
                await asyncio.sleep(self.probe_interval_s)
                try:
                    healthy = await self._probe(replica.base_url)
                except Exception:  # a broken probe is an unhealthy replica, not a crashed run
                    healthy = False
                if healthy:
                    replica.ejected = False
                    replica.consecutive_failures = 0
                    logger.warning("replica %s re-admitted after a successful health probe", replica.base_url)
                    self._notify()
        finally:
            self._probes.pop(replica.index, None)

    async def aclose(self) -> None:
        """Stop the health probes. Idempotent."""
        tasks = list(self._probes.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._probes.clear()


class ReplicatedChatModelClient(ChatModelClient):
    """A :class:`ChatModelClient` whose requests are spread over replicas of the endpoint.

    **Parameters:** those of :class:`ChatModelClient` (``base_url`` names the endpoint: it is the
    identity, not necessarily a replica), plus ``replica_urls`` (the servers requests go to),
    ``replica_max_in_flight`` (cap per replica; None: none) and ``replica_probe_seconds`` (probe
    interval of an ejected replica). ``transport`` (the httpx seam) is shared by every replica.
    """

    def __init__(
        self,
        *,
        replica_urls: Sequence[str],
        replica_max_in_flight: int | None = None,
        replica_probe_seconds: float = 2.0,
        probe: Callable[[str], Awaitable[bool]] | None = None,
        **settings: Any,
    ) -> None:
        super().__init__(**settings)
        self.replica_set = ReplicaSet(replica_urls, max_in_flight=replica_max_in_flight,
                                      probe_interval_s=replica_probe_seconds, probe=probe)
        member_settings = {**settings, "max_retries": 1}
        self._members = [ChatModelClient(**{**member_settings, "base_url": r.base_url})
                         for r in self.replica_set.replicas]

    @classmethod
    def from_config(
        cls, model: Any, *, transport: Any = None, **overrides: Any
    ) -> ChatModelClient:
        """The client for a config's ``model`` section.

        Replicated when ``model.base_urls`` lists servers, else a plain :class:`ChatModelClient` (so
        a config without replicas behaves exactly as before).
        """
        urls = list(getattr(model, "base_urls", None) or [])
        if not urls:
            return ChatModelClient.from_config(model, transport=transport, **overrides)
        plain = ChatModelClient.from_config(model, transport=transport, **overrides)
        settings = {name: getattr(plain, name) for name in (
            "base_url", "model", "auth", "timeout", "max_retries", "retry_backoff_seconds", "temperature",
            "top_p", "max_tokens", "send_seed", "tool_choice", "extra_body", "stream", "trust_env", "max_connections",
            "checkpoint_id", "http_transport", "seed_mod_2_32")}
        return cls(replica_urls=urls, replica_max_in_flight=getattr(model, "replica_max_in_flight", None),
                   replica_probe_seconds=getattr(model, "replica_probe_seconds", 2.0), transport=transport, **settings)

    async def __aenter__(self) -> ReplicatedChatModelClient:
        for member in self._members:
            await member.__aenter__()
        return self

    async def aclose(self) -> None:
        """Close every replica's pool and stop the health probes. Idempotent."""
        self._closed = True
        await self.replica_set.aclose()
        for member in self._members:
            await member.aclose()
        await super().aclose()

    async def _attempt(self, member: ChatModelClient, content: bytes, headers: dict[str, str],
                       offered: list[str]) -> ModelOutput:
        # One HTTP attempt on one replica, through the replica's own pooled engine.
        client = member._http()
        if self.stream:
            return await member._attempt_stream(client, content, headers, offered)
        return await member._attempt_plain(client, content, headers, offered)

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, seed: int | None
    ) -> ModelOutput:
        """Send one chat-completion request to the least-loaded admitted replica; see :meth:`ChatModelClient.complete`.

        A retryable failure moves the next attempt to another replica (backoff only when none other
        is admitted); ``max_retries`` bounds the attempts over all replicas together.

        Raises:
            ModelRequestError: a non-retryable status (at once), exhausted attempts, missing key.
        """
        if self._closed:
            raise RuntimeError("Cannot send a request, as the model client has been closed.")
        headers = self._headers()
        content = self.encode_body(messages, tools, seed)
        offered = [t["function"]["name"] for t in tools or []
                   if isinstance(t, dict) and isinstance(t.get("function"), dict)]
        started = time.perf_counter()
        last_error = ""
        replicas = self.replica_set
        failed_on: set[int] = set()
        faulted = False
        for attempt in range(self.max_retries):
            replica = await replicas.acquire(frozenset(failed_on))
            ok: bool | None = None
            faulted = False
            try:
                output = await self._attempt(self._members[replica.index], content, headers, offered)
                ok = True
            except (_Retryable, TransportError, StreamFailure) as exc:
                ok = False
                failed_on.add(replica.index)
                last_error = f"{replica.base_url}: {exc}"
                faulted = isinstance(exc, _EndpointFaulted)
            finally:
                replicas.release(replica, ok=ok)
            if ok:
                output.latency_ms = round_ms((time.perf_counter() - started) * 1000.0)
                output.attempts = attempt + 1
                output.metadata = {**output.metadata, "replica": replica.base_url}
                return output
            logger.warning("model attempt %d/%d failed: %s", attempt + 1, self.max_retries, last_error[:300])
            if attempt + 1 < self.max_retries and not replicas.has_other_admitted(replica):
                await self.sleep(backoff_delay(attempt, self.retry_backoff_seconds, self.rng.random()))
        if faulted:
            raise ModelEndpointFault(f"model endpoint fault after {self.max_retries} attempts: {last_error}")
        raise ModelRequestError(f"model request failed after {self.max_retries} attempts: {last_error}")
