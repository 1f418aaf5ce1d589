"""The slot pool (spec §6): N slots, UUID4-hex leases, blocking acquisition, explicit release only."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any


class SlotPool:
    """N slots, each free or bound to a lease (and, once reset succeeded, an episode).

    All methods must be called from the event loop that serves requests; nothing else touches the pool,
    so checks and updates between two awaits are atomic.
    """

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"slots: must be >= 1 (got {size}); pass --slots N with N >= 1")
        self.size = size
        self.leases: list[str | None] = [None] * size
        self.episodes: list[Any] = [None] * size
        self._changed = asyncio.Condition()

    @property
    def free_count(self) -> int:
        """Number of slots without a lease."""
        return sum(1 for lease in self.leases if lease is None)

    async def acquire(self) -> tuple[int, str]:
        """Lease the lowest free slot, waiting (without timeout) while none is free."""
        async with self._changed:
            while None not in self.leases:
                await self._changed.wait()
            env_idx = self.leases.index(None)
            lease = uuid.uuid4().hex
            self.leases[env_idx] = lease
            self.episodes[env_idx] = None
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
