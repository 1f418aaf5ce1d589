"""The client-side budget of a server's slots: how many resets a run may have at the server at once.

Part of the journaled environment (``runs/leases/_journaled_env.py``, issue 24): a reset is sent only while the
budget has a unit for it, so no reset of the run ever waits inside the server for a slot — a waiting reset
of a killed run would be granted later to nobody. Units are served first come, first served; a unit whose
reset answer was lost after the server may have granted it stays used (``lost``) until ``/healthz`` shows
the slot free, and when every unit is lost that way waiting is futile (:class:`SlotsLost`).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

__all__ = ["SlotBudget", "SlotsLost"]

#: a reset waiting this long for the client-side budget asks ``/healthz`` whether slots were freed
_BUDGET_PROBE_S = 2.0


class SlotsLost(Exception):
    """Every unit of the budget is held by a reset whose answer was lost: waiting for one is futile."""


class SlotBudget:
    """How many resets this run may have at the server at once (granted leases and resets in flight).

    ``capacity`` None: no limit (the server's slot count is unknown). Otherwise a reset takes a unit
    before it is sent and gives it back once its lease is released (or it ended without one), so no
    reset of this run waits inside the server for a slot another of its episodes holds: a waiting
    reset of a killed run would be granted later to nobody (the real server does not notice that its
    client has gone). A reset waiting here for :data:`_BUDGET_PROBE_S` asks *probe* (``/healthz``)
    whether the server has more free slots (another client released some) and grows the capacity.

    Units go to waiting resets first come, first served: a unit given back is handed to the longest
    waiter before a newcomer can take it. (Handing it to whoever asks next let the worker that just
    released a slot take it again for its next episode, so with more episodes in flight than slots a
    few resets waited for the whole run and, on a long one, ran into ``environment.reset_wait_seconds``.)
    """

    def __init__(self, probe: Callable[[], Any] | None = None) -> None:
        self.capacity: int | None = None
        self.used = 0
        self.lost = 0
        """Units (in ``used``) of resets whose answer was lost or cut after the server may have granted a
        lease: never given back, forgiven when ``/healthz`` shows the server has those slots free."""
        self._probe = probe
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.slots: int | None = None
        """The server's slot count (``environment_slots`` of ``/healthz``): the capacity never exceeds it."""
        self.releasing = 0
        """Releases of this run's budgeted leases sent but not yet given back: the server may already show
        their slots free, yet each is promised to this run's next waiter (:meth:`release_started`)."""

    def _free(self) -> bool:
        return self.capacity is None or self.used < self.capacity

    def _wake(self) -> None:
        while self._waiters and self._free():
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.used += 1  # the unit is the waiter's from now on
                waiter.set_result(None)

    def set_capacity(self, capacity: int | None, *, lost: int = 0, slots: int | None = None) -> None:
        """Set how many units the server has for this run; *lost* of them start used (see :meth:`keep_lost`).

        *slots*: the server's size, an upper bound the capacity keeps from now on.
        """
        if slots is not None:
            self.slots = slots
        self.capacity = capacity if capacity is None or self.slots is None else min(capacity, self.slots)
        self.lost += lost
        self.used += lost
        self._wake()

    async def take(self) -> None:
        """Wait for a unit, in arrival order (cancellable; the caller's own deadline bounds the wait)."""
        if not self._waiters and self._free():
            self.used += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            while not waiter.done():
                # asyncio.wait, not wait_for: on Python 3.11 wait_for returns the result when the waiter is
                # granted as the task is cancelled, and the cancellation (Ctrl-C, SIGTERM) is lost — the worker
                # then ran on to its next episode and a signal's shutdown took ~4 s instead of 0.4 s
                await asyncio.wait((waiter,), timeout=_BUDGET_PROBE_S)
                if not waiter.done():
                    await self._grow()
                    if self.exhausted_by_lost and not waiter.done():
                        raise SlotsLost  # no unit can ever come back: stop waiting
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give()  # granted as the wait was cancelled: pass it on
            else:
                waiter.cancel()
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass
            raise

    def give(self) -> None:
        self.used = max(0, self.used - 1)
        self._wake()

    def release_started(self) -> None:
        """Note that a budgeted lease's release is on its way.

        Until :meth:`release_done`, a slot ``/healthz`` shows free may be this one (issue 33: counting it
        as new capacity grew the budget past the server).
        """
        self.releasing += 1

    def release_done(self, returned: bool) -> None:
        """The release ended: its unit comes back when the server no longer holds the slot (*returned*)."""
        self.releasing = max(0, self.releasing - 1)
        if returned:
            self.give()

    def keep_lost(self) -> None:
        """The unit of a reset whose answer was lost after the server may have granted it stays used."""
        self.lost += 1

    @property
    def exhausted_by_lost(self) -> bool:
        """Every unit is held by a lost answer: no reset of this run can ever give one back."""
        return self.capacity is not None and self.lost > 0 and self.lost >= self.capacity

    async def _grow(self) -> None:
        if self._probe is None or self.capacity is None:
            return
        try:
            health = await self._probe()
        except Exception:
            return
        free = health.get("free_slots") if isinstance(health, dict) else None
        slots = health.get("environment_slots") if isinstance(health, dict) else None
        if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0:
            self.slots = slots
        if isinstance(free, int) and not isinstance(free, bool) and free > 0:
            # slots our own releases in flight have freed are already promised to our next waiters
            # (their units come back through release_done): they are no new capacity
            free = max(0, free - self.releasing)
            # more free than we think: first the lost answers that held nothing (the server dropped
            # those resets) come back, then the rest is slots another client released
            forgiven = min(self.lost, max(0, free - (self.capacity - self.used)))
            self.lost -= forgiven
            self.used -= forgiven
            # every other reset of ours is counted in used (granted, or waiting in the server only when
            # others took the slots: then free is 0), so used + free is what the server can give us —
            # and never more than the server has
            grown = max(self.capacity, self.used + free)
            self.capacity = grown if self.slots is None else min(grown, self.slots)
            self._wake()
