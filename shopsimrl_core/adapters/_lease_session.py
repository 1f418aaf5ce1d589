"""The surface an episode sees of one environment lease.

``EnvironmentSession`` (one server), ``PooledSession`` (a pool of servers) and ``JournaledSession``
(the lease journal around either) all offer it, and each wrapper holds the one it wraps as a
:class:`LeaseSession`, so a call through the wrappers is type-checked end to end.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["LeaseSession"]


class LeaseSession(Protocol):
    """One episode's lease: reset takes it, interact/terminate use it, close releases it."""

    @property
    def env_idx(self) -> int | None: ...
    @property
    def lease_id(self) -> str | None: ...
    @property
    def environment_version(self) -> str | None: ...
    @property
    def observation_version(self) -> str | None: ...
    @property
    def done(self) -> bool: ...
    async def reset(self, task_id: int) -> dict[str, Any]: ...
    async def interact(self, action: str) -> dict[str, Any]: ...
    async def terminate(self, reason: str) -> dict[str, Any]: ...
    async def close(self) -> None: ...
