"""The slot pool (http-contract §6): N slots, UUID4-hex leases, blocking acquisition, explicit release only.

Like the real server, a lease never expires by default. ``lease_ttl_s`` (``serve --lease-ttl-seconds``,
off by default) is a sandbox-only knob: a lease untouched (no reset/interact/terminate) for that long
is reclaimed when a reset needs a slot, so a test can model a server that does clean up.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any


class SlotPool:
    """N slots, each free or bound to a lease (and, once reset succeeded, an episode).

    All methods must be called from the event loop that serves requests; nothing else touches the pool,
    so checks and updates between two awaits are atomic.
    """

    def __init__(self, size: int, *, lease_ttl_s: float | None = None):
        if size < 1:
            raise ValueError(f"slots: must be >= 1 (got {size}); pass --slots N with N >= 1")
        if lease_ttl_s is not None and not lease_ttl_s > 0:
            raise ValueError(
                f"lease TTL: must be > 0 seconds (got {lease_ttl_s}); "
                "omit --lease-ttl-seconds to keep leases forever"
            )
        self.size = size
        self.lease_ttl_s = lease_ttl_s
        self.leases: list[str | None] = [None] * size
        self.episodes: list[Any] = [None] * size
        self.touched: list[float] = [0.0] * size
        self.expired = 0
        self._changed = asyncio.Condition()

    @property
    def free_count(self) -> int:
        """Number of slots without a lease."""
        return sum(1 for lease in self.leases if lease is None)

    def touch(self, env_idx: int) -> None:
        """Note activity on a slot's lease (for the optional expiry)."""
        self.touched[env_idx] = time.monotonic()

    def expire_idle(self) -> float | None:
        """Reclaim leases idle longer than the TTL; return seconds until the next one may expire (None: no TTL)."""
        if self.lease_ttl_s is None:
            return None
        now = time.monotonic()
        soonest = self.lease_ttl_s
        for env_idx, lease in enumerate(self.leases):
            if lease is None:
                continue
            idle = now - self.touched[env_idx]
            if idle >= self.lease_ttl_s:
                self.leases[env_idx] = None
                self.episodes[env_idx] = None
                self.expired += 1
            else:
                soonest = min(soonest, self.lease_ttl_s - idle)
        return soonest

    async def acquire(self) -> tuple[int, str]:
        """Lease the lowest free slot, waiting (without timeout) while none is free.

        Cancelling the wait (a client that went away) leaves the pool untouched.
        """
        async with self._changed:
            while None not in self.leases:
                next_expiry = self.expire_idle()
                if None in self.leases:
                    break
                if next_expiry is None:
                    await self._changed.wait()
                else:
                    try:
                        await asyncio.wait_for(self._changed.wait(), timeout=next_expiry + 0.01)
                    except TimeoutError:
                        pass
            env_idx = self.leases.index(None)
            lease = uuid.uuid4().hex
            self.leases[env_idx] = lease
            self.episodes[env_idx] = None
            self.touched[env_idx] = time.monotonic()
            return env_idx, lease

    def holds(self, env_idx: int, lease_value: Any) -> bool:
        """True iff `lease_value`'s string form is the current lease of slot `env_idx` (§6)."""
        if not 0 <= env_idx < self.size:
            return False
        current = self.leases[env_idx]
        return current is not None and current == str(lease_value)

    async def release(self, env_idx: int) -> None:
        """Free one slot and wake one waiting acquirer."""
        async with self._changed:
            self.leases[env_idx] = None
            self.episodes[env_idx] = None
            self._changed.notify(1)

    async def release_all(self) -> None:
        """Free every slot, invalidating every lease, and wake every waiting acquirer."""
        async with self._changed:
            self.leases = [None] * self.size
            self.episodes = [None] * self.size
            self._changed.notify_all()
