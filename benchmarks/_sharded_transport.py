"""httpx's own transport, split into several small pools, for the transport-seam comparison.

httpcore's connection pool re-examines every in-flight request against every connection each
time a request starts or ends, so its CPU cost per request grows with the number of connections
in one pool (quadratic over a run at high concurrency). ``ShardedHttpxTransport`` keeps httpx and
httpcore unchanged but spreads requests over ``shards`` independent ``httpx.AsyncHTTPTransport``
pools of ``per_shard`` connections each, sending every request to the least busy shard.
"""

from __future__ import annotations

import httpx


class ShardedHttpxTransport(httpx.AsyncBaseTransport):
    """``shards`` httpx transports of ``per_shard`` connections; each request goes to the least busy one."""

    def __init__(self, shards: int = 8, per_shard: int = 16) -> None:
        limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard)
        self._shards = [httpx.AsyncHTTPTransport(limits=limits) for _ in range(shards)]
        self._busy = [0] * shards
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send *request* through the shard with the fewest requests in flight."""
        index = min(range(len(self._shards)), key=self._busy.__getitem__)
        self._busy[index] += 1
        try:
            response = await self._shards[index].handle_async_request(request)
            # the body is read here so the connection is back in its pool before the shard counts as free
            await response.aread()
        finally:
            self._busy[index] -= 1
        return response

    async def aclose(self) -> None:
        """Close every shard (idempotent; two httpx clients may share one transport)."""
        if self._closed:
            return
        self._closed = True
        for shard in self._shards:
            await shard.aclose()
