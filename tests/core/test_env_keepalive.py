"""The h1 engine and a server that closes idle keep-alive connections (issue 24), over real loopback sockets.

The server answers the first request of each connection with keep-alive, then closes the connection
as soon as the next request's bytes arrive, without answering: what a server whose keep-alive timeout
fires just as a request is sent looks like to the client.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shopsimrl_core.adapters._h1 import H1Engine
from shopsimrl_core.adapters._http import MIN_KEEPALIVE_EXPIRY, TransportError, build_engine

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


async def _closing_server() -> tuple[asyncio.AbstractServer, int, list[int]]:
    served: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        count = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                count += 1
                if count > 1:
                    break  # the "keep-alive timeout": close without an answer
                served.append(count)
                writer.write(OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.transport.abort()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], served


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_a_reused_connection_closed_unanswered_is_stale(method: str) -> None:
    async def go() -> tuple[Any, H1Engine]:
        server, port, _ = await _closing_server()
        engine = H1Engine(timeout=5, read_timeout=5)
        url = f"http://127.0.0.1:{port}/x"
        try:
            first = await engine.request(method, url, b"{}" if method == "POST" else None)
            assert first.status == 200
            await asyncio.sleep(0.6)  # idle for 0.6 s before the server "times out"
            try:
                return await engine.request(method, url, b"{}" if method == "POST" else None), engine
            except TransportError as exc:
                return exc, engine
        finally:
            await engine.aclose()
            server.close()

    outcome, engine = _run(go())
    if method == "GET":  # idempotent: resent once on a fresh connection by the engine itself
        assert getattr(outcome, "status", None) == 200
    else:  # a POST is never resent by the engine; the error says the server never read it
        assert isinstance(outcome, TransportError) and outcome.stale and outcome.kind == "RemoteProtocolError"
    # the engine learnt that this server closes idle connections sooner than its 4 s
    assert MIN_KEEPALIVE_EXPIRY <= engine.keepalive_expiry <= 0.35


def test_a_fresh_connection_that_fails_is_not_stale() -> None:
    async def go() -> TransportError:
        server, port, _ = await _closing_server()
        engine = H1Engine(timeout=5, read_timeout=5)
        try:
            await engine.request("POST", f"http://127.0.0.1:{port}/x", b"{}")
            engine._idle.clear()  # the next request opens a new connection
            server.close()
            try:
                await engine.request("POST", f"http://127.0.0.1:{port}/x", b"{}")
            except TransportError as exc:
                return exc
            raise AssertionError("no error")
        finally:
            await engine.aclose()

    exc = _run(go())
    assert not exc.stale


def test_keepalive_expiry_is_configurable() -> None:
    engine = build_engine("http://127.0.0.1:1/x", mode="h1", timeout=1, read_timeout=1, max_connections=2,
                          trust_env=False, keepalive_expiry=0.7)
    assert engine.keepalive_expiry == 0.7
    aio = build_engine("http://127.0.0.1:1/x", mode="aiohttp", timeout=1, read_timeout=1, max_connections=2,
                       trust_env=False, keepalive_expiry=0.7)
    assert aio.keepalive_expiry == 0.7
    with pytest.raises(ValueError, match="keepalive_expiry"):
        build_engine("http://127.0.0.1:1/x", mode="h1", timeout=1, read_timeout=1, max_connections=2,
                     trust_env=False, keepalive_expiry=0)
