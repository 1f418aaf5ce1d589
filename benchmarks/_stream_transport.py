"""A minimal keep-alive HTTP/1.1 transport on asyncio streams, for the transport-seam comparison.

``StreamTransport`` implements ``httpx.AsyncBaseTransport`` so it can be handed to
``run_evaluation(model_transport=..., env_transport=...)`` in place of httpx's own pool
(httpcore). It supports exactly what the benchmark needs: ``http://`` URLs, request bodies already
in memory, responses framed by ``Content-Length`` or chunked encoding, idle connections reused
per host. No TLS, no proxies, no HTTP/2, no timeouts: a benchmark instrument, not a product.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.close()


class StreamTransport(httpx.AsyncBaseTransport):
    """Keep-alive connection reuse per (host, port) on plain asyncio streams."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def _connect(self, host: str, port: int) -> _Connection:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
        return _Connection(reader, writer)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send *request* on an idle (or new) connection and return the fully read response."""
        host, port = request.url.host, request.url.port or 80
        body = await request.aread()
        target = request.url.raw_path.decode("ascii")
        lines = [f"{request.method} {target} HTTP/1.1"]
        for name, value in request.headers.multi_items():
            lines.append(f"{name}: {value}")
        if "content-length" not in request.headers and body:
            lines.append(f"Content-Length: {len(body)}")
        payload = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        idle = self._idle.setdefault((host, port), [])
        reused = bool(idle)
        conn = idle.pop() if idle else await self._connect(host, port)
        try:
            status, headers, content, keep = await self._exchange(conn, payload)
        except (asyncio.IncompleteReadError, ConnectionError):
            conn.close()
            if not reused:
                raise httpx.RemoteProtocolError("server closed the connection", request=request) from None
            # the server dropped an idle keep-alive connection: one fresh connection, same request
            conn = await self._connect(host, port)
            status, headers, content, keep = await self._exchange(conn, payload)
        if keep:
            idle.append(conn)
        else:
            conn.close()
        return httpx.Response(status, headers=headers, content=content, request=request)

    async def _exchange(self, conn: _Connection, payload: bytes) -> tuple[int, list[tuple[str, str]], bytes, bool]:
        conn.writer.write(payload)
        await conn.writer.drain()
        head = await conn.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        headers: list[tuple[str, str]] = []
        length: int | None = None
        chunked, keep = False, True
        for line in header_lines:
            name, _, value = line.partition(":")
            name, value = name.strip(), value.strip()
            lower = name.lower()
            if lower == "content-length":
                length = int(value)
            elif lower == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
                continue  # the body handed to httpx is already de-chunked
            elif lower == "connection" and value.lower() == "close":
                keep = False
            headers.append((name, value))
        if chunked:
            parts = []
            while True:
                size = int((await conn.reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
                if size == 0:
                    await conn.reader.readuntil(b"\r\n")
                    break
                parts.append(await conn.reader.readexactly(size))
                await conn.reader.readexactly(2)
            content = b"".join(parts)
        elif length is not None:
            content = await conn.reader.readexactly(length)
        else:
            content = await conn.reader.read()
            keep = False
        return status, headers, content, keep

    async def aclose(self) -> None:
        """Close every idle connection (idempotent; two httpx clients may share one transport)."""
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

    async def __aenter__(self) -> StreamTransport:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
