"""Riding out outages: pause dispatching while the environment or the model is unreachable.

A failed attempt whose error points at the environment (reset / step / termination errors) or at the
model (a request that failed after its own retries) makes the evaluator ask :class:`OutageGate` to
probe that service once. If the probe fails, the gate closes: no new attempt starts, the service is
probed with backoff (0.5 s doubling to 5 s) and the gate opens again once it answers. An outage
longer than ``experiment.outage_budget_seconds`` ends the run with :class:`OutageError`; attempts
that failed because of a confirmed outage do not use up the episode's attempts of this invocation.

Between two attempts of the same episode the evaluator also waits a jittered backoff
(:func:`retry_delay`), so a burst of failures never turns into hundreds of attempts in milliseconds.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from shopsimrl_core._backoff import Backoff
from shopsimrl_core._errors import ShopSimRLError

__all__ = ["EndpointFaultNotices", "MODEL_ENDPOINT", "OutageError", "OutageGate", "suspected_service", "retry_delay"]


class OutageError(ShopSimRLError):
    """The environment or the model stayed unreachable for longer than the outage budget."""

    code = "outage-budget-exhausted"


_NEXT_ATTEMPT = Backoff(0.5, 8.0)
"""An episode's next attempt after a failure: 0.5 s doubling to 8 s, equal jitter."""
_PROBE = Backoff(0.5, 5.0, "none")
"""Probes of a service in an outage: 0.5 s doubling to 5 s."""


def retry_delay(failed_attempts: int, rng: random.Random | None = None) -> float:
    """Seconds to wait before an episode's next attempt after *failed_attempts* failures.

    0.5 s doubling per failure, capped at 8 s, times a jitter in [0.5, 1].
    """
    return _NEXT_ATTEMPT.delay(failed_attempts, (rng or random).random())


_ENV_TYPES = {"ShopSimulatorError"}
_MODEL_TYPES = {"ModelRequestError"}
_ENDPOINT_TYPES = {"ModelEndpointFault"}
#: the service an endpoint fault points at: probed with a tiny completion, not only ``GET /models``
MODEL_ENDPOINT = "model endpoint"


def suspected_service(record: dict[str, Any]) -> str | None:
    """The service a failed record's error may come from an outage of, else None.

    ``"environment"``, ``"model"`` (a request that failed after its retries: probed with ``GET
    /models``) or :data:`MODEL_ENDPOINT` (2xx answers that were no chat completion: probed with a
    completion, since a proxy may still list the models while its chat route serves an error page).
    """
    error = record.get("error")
    if record.get("status") != "failed" or not isinstance(error, dict):
        return None
    kind = error.get("type")
    if kind in _ENDPOINT_TYPES:
        return MODEL_ENDPOINT
    if kind in _MODEL_TYPES:
        return "model"
    if kind in _ENV_TYPES:
        return "environment"
    return None


class EndpointFaultNotices:
    """Tells the console once per kind of fault that fails attempts (call it with every failed record).

    Model endpoint faults: the line names the endpoint and the body's first bytes (from the error
    message) and says that the attempt failed instead of being charged to the model. Failed resets
    (issue 24: an answer cut short or not JSON, no slot left): the line is the error itself — what the
    environment answered and whether the server may hold a slot for it — so a run that ends with exit 1
    has said why, not only shown its progress.
    """

    def __init__(self, notice: Callable[[str], Any]) -> None:
        self._notice = notice
        self._told: set[str] = set()

    def __call__(self, record: dict[str, Any]) -> None:
        error = record.get("error")
        if record.get("status") != "failed" or not isinstance(error, dict):
            return
        message = " ".join(str(error.get("message", "")).split())
        if error.get("type") in _ENDPOINT_TYPES:
            kind = message.split(" with ", 1)[-1][:60]
            line = (
                f"{message[:400]} — an endpoint fault (proxy error page or crashed server), not the model's answer: "
                "the attempt is stored as failed and retried, never as a completed episode"
            )
        elif error.get("type") in _ENV_TYPES and error.get("stage") == "reset":
            kind = "reset:" + "".join("#" if c.isdigit() else c for c in message)[:80]
            line = f"{message[:400]} — the attempt is stored as failed and retried"
        else:
            return
        if kind in self._told:
            return
        self._told.add(kind)
        try:
            self._notice(line)
        except Exception:  # a broken display must not stop the run
            pass


class OutageGate:
    """Pauses dispatching while a service is unreachable; shared by all workers of one run.

    ``probes`` maps a service name to a coroutine that raises when the service is unreachable;
    *notice* gets one-line console messages.
    """

    def __init__(
        self,
        budget_seconds: float,
        probes: dict[str, Callable[[], Awaitable[Any]]],
        *,
        notice: Callable[[str], Any] | None = None,
        probe_timeout: float = 5.0,
        probe_timeouts: dict[str, float] | None = None,
    ) -> None:
        self.budget_seconds = budget_seconds
        self.probes = probes
        self.probe_timeout = probe_timeout
        self.probe_timeouts = dict(probe_timeouts or {})
        """Per-service probe timeouts (a completion may take longer than a ``GET``)."""
        self._notice = notice
        self._open = asyncio.Event()
        self._open.set()
        self._riding: asyncio.Task[None] | None = None
        self.failure: OutageError | None = None
        self.outages = 0
        self.paused_seconds = 0.0

    def notice(self, text: str) -> None:
        if self._notice is not None:
            try:
                self._notice(text)
            except Exception:
                pass

    async def wait_open(self) -> None:
        """Return when dispatching may go on.

        Raises:
            OutageError: the outage budget ran out.
        """
        await self._open.wait()
        if self.failure is not None:
            raise self.failure

    async def _probe(self, service: str) -> str | None:
        try:
            # asyncio.timeout, not wait_for: wait_for (Python 3.11) can swallow a cancellation that meets a
            # finished probe, and a signal's shutdown must not be lost
            async with asyncio.timeout(self.probe_timeouts.get(service, self.probe_timeout)):
                await self.probes[service]()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    async def check(self, service: str) -> bool:
        """Probe *service* after a suspicious failure; True when an outage is (or already was) under way.

        Returns only once the outage is over (or the budget is exhausted: then ``wait_open`` raises).
        """
        if service not in self.probes:
            return False
        if self._riding is None:
            problem = await self._probe(service)
            if problem is None:
                return False
            if self._riding is None:  # another worker may have started riding meanwhile
                self.outages += 1
                self._open.clear()
                self.notice(
                    f"{service} unreachable ({problem[:200]}); pausing new episodes and probing for up to "
                    f"{self.budget_seconds:g} s (experiment.outage_budget_seconds)"
                )
                self._riding = asyncio.ensure_future(self._ride(service))
        # shielded: one cancelled worker must not stop the probing the others wait on
        await asyncio.shield(self._riding)
        return True

    async def _ride(self, service: str) -> None:
        started = time.monotonic()
        probes = 0
        try:
            while True:
                probes += 1
                await asyncio.sleep(_PROBE.delay(probes))
                problem = await self._probe(service)
                elapsed = time.monotonic() - started
                if problem is None:
                    self.paused_seconds += elapsed
                    self.notice(f"{service} answers again after {elapsed:.1f} s; resuming")
                    return
                if elapsed >= self.budget_seconds:
                    self.paused_seconds += elapsed
                    self.failure = OutageError(
                        f"{service} unreachable for {elapsed:.0f} s, longer than experiment.outage_budget_seconds "
                        f"({self.budget_seconds:g}): {problem[:200]}; completed attempts are stored — "
                        f"fix the {service} "
                        "and rerun the same command to resume",
                        code="outage-budget-exhausted",
                    )
                    return
        finally:
            self._riding = None
            self._open.set()

    def cancel(self) -> None:
        """Stop probing (the run is being interrupted)."""
        if self._riding is not None and not self._riding.done():
            self._riding.cancel()
