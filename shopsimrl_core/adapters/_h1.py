"""The default HTTP engine: HTTP/1.1 keep-alive connections on the event loop's own transports.

Why an engine of our own beside aiohttp: ``benchmarks/http_engines.py`` plays the client's
request shape through every candidate in one run, and the CPU per step of the request loop was
(64 in flight, uvloop, loopback stubs; docs/benchmarks.md): this engine 0.11 ms, libcurl through
pycurl's multi interface 0.25 ms, ``aiohttp.ClientSession`` 0.37 ms, httpx 6.1 ms. No maintained
library came within 20 % of the best, which is the issue's rule for keeping an engine of our own.
What makes it cheap is what it leaves out: no cookie jar, no redirects, no multidict headers, no
request/response model objects, no tracing hooks. The parts that are easy to get wrong are not
ours: the response parser is ``httptools`` (llhttp, the parser of Node.js and uvicorn), sockets,
TLS and flow control are the event loop's (uvloop under ``shopsimrl run``).

This module is the pool and the request framing; one connection and its exchange with the parser
live in ``_h1_connection.py``. Scope: ``http://`` and ``https://`` origins reached directly;
proxies and ``.netrc`` are aiohttp's and httpx's job (``select_transport`` hands those URLs to
them). The rules of ``_http.py``'s module docstring hold here too and are tested on every engine
(tests/core/test_transport.py).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote, urlsplit

from shopsimrl_core.adapters._engine_interface import (
    _DEFAULT,
    KEEPALIVE_EXPIRY,
    MIN_KEEPALIVE_EXPIRY,
    Reply,
    StreamReply,
    TransportError,
    _Engine,
    parsed_once,
)
from shopsimrl_core.adapters._h1_connection import Connection, charset
from shopsimrl_core.adapters._tls import certificate_problem, tls_context, untrusted_detail

__all__ = ["H1Engine"]

#: methods that may be resent once when a reused keep-alive connection turns out closed (RFC 9110 §9.2.2)
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
#: header names the engine writes itself; a caller's copy is dropped
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


class _Origin:
    """What every request to one URL shares: where to connect and the request line's fixed parts."""

    __slots__ = ("key", "host", "port", "tls", "target", "host_line")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise TransportError("UnsupportedProtocol", f"only http:// and https:// URLs are supported (got {url!r})")
        try:
            port = parts.port
        except ValueError:
            raise TransportError("UnsupportedProtocol", f"invalid port in {url!r}") from None
        self.tls = scheme == "https"
        self.host = parts.hostname
        self.port = port or (443 if self.tls else 80)
        if "@" in parts.netloc:  # auto mode sends such URLs to aiohttp, which turns them into Basic auth
            raise TransportError("UnsupportedProtocol", "the h1 engine does not take credentials in the URL")
        self.key = (scheme, self.host, self.port)
        target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        # non-ASCII becomes UTF-8 percent escapes; escapes already there stay as they are
        self.target = quote(target, safe="/:?&=%@!$'()*+,;~-._[]").encode("ascii")
        self.host_line = b"Host: " + parts.netloc.encode("idna") + b"\r\n"

    def head(self, method: str, headers: Mapping[str, str] | None, length: int | None) -> bytes:
        """The request head: request line, Host, the caller's headers, framing, blank line."""
        lines = [method.encode("ascii"), b" ", self.target, b" HTTP/1.1\r\n", self.host_line]
        if headers:
            for name, value in headers.items():
                if name.lower() in _OWN_HEADERS:
                    continue
                if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
                    raise ValueError(f"HTTP header {name!r} contains a line break")
                lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        if length is not None:
            lines.append(b"Content-Length: %d\r\n" % length)
        lines.append(b"Accept-Encoding: identity\r\nUser-Agent: shopsimrl\r\n\r\n")
        return b"".join(lines)


class H1Engine(_Engine):
    """Pooled HTTP/1.1 connections, created on first use inside the running loop.

    ``max_connections`` bounds open connections (per engine, all origins); more requests wait in
    order, without a timeout. Idle connections are reused newest first and closed after
    ``keepalive_expiry`` seconds; a server that closes idle connections sooner lowers it
    (``_learn_expiry``). No proxies, no cookies, no redirects, no ``.netrc``.
    """

    #: the environment's proxy settings are never read (``select_transport`` routes those URLs elsewhere)
    trust_env = False

    def __init__(self, *, timeout: float, read_timeout: float | None, max_connections: int = 64,
                 keepalive_expiry: float = KEEPALIVE_EXPIRY) -> None:
        self._settle(timeout=timeout, read_timeout=read_timeout, max_connections=max_connections,
                     keepalive_expiry=keepalive_expiry)
        self._free = max_connections  # requests that may hold a connection now; the rest wait in order
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._open: set[Connection] = set()
        self._opening = 0
        self._origins: dict[str, _Origin] = {}
        self._tls: ssl.SSLContext | None = None
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False

    # -- pool -------------------------------------------------------------------------------------

    async def _acquire(self) -> None:
        # asyncio.Semaphore would do, but its acquire scans its waiters on every call
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # resolved by _release, which hands its slot over
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._release()  # the slot was handed over just as this request was cancelled: pass it on
            else:
                self._waiters.remove(waiter)
            raise

    def _release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1

    def _origin(self, url: str) -> _Origin:
        return parsed_once(self._origins, url, _Origin)

    def _take(self, origin: _Origin) -> Connection | None:
        idle = self._idle.get(origin.key)
        if not idle:
            return None
        while idle:
            conn = idle.pop()
            if conn.closed:
                continue
            # the connection's own loop: asyncio.get_running_loop() makes a getpid() syscall on 3.11
            now = conn.loop.time()
            if self._expired(conn, now):
                conn.close()
                continue
            conn.idle_for = now - conn.idle_since
            return conn
        return None

    def _learn_expiry(self, idle_for: float) -> None:
        """A server closed a connection idle for *idle_for* s: keep idle ones at most half that long from now on.

        (Not below ``MIN_KEEPALIVE_EXPIRY``; a connection that died sooner points at a restart, not a timeout.)
        """
        if idle_for >= 2 * MIN_KEEPALIVE_EXPIRY:
            self.keepalive_expiry = min(self.keepalive_expiry, idle_for / 2)

    def _expired(self, conn: Connection, now: float) -> bool:
        return now - conn.idle_since >= self.keepalive_expiry

    def _give_back(self, origin: _Origin, conn: Connection) -> None:
        conn.end_exchange()
        if self._closed or not conn.reusable():
            conn.close()
            return
        loop = conn.loop
        conn.idle_since = loop.time()
        self._idle.setdefault(origin.key, []).append(conn)
        if self._sweep is None:
            self._sweep = loop.call_later(self.keepalive_expiry, self._close_expired)

    def _close_expired(self) -> None:
        self._sweep = None
        now = asyncio.get_running_loop().time()
        oldest = now
        for idle in self._idle.values():
            for conn in [c for c in idle if self._expired(c, now)]:
                idle.remove(conn)
                conn.close()
            if idle:
                oldest = min(oldest, min(c.idle_since for c in idle))
        if any(self._idle.values()):
            self._sweep = asyncio.get_running_loop().call_at(oldest + self.keepalive_expiry, self._close_expired)

    def _forget(self, conn: Connection) -> None:
        self._open.discard(conn)

    def _make_room(self) -> None:
        """Close the longest-idle connection when the open ones (with those being opened) reach the bound."""
        if len(self._open) + self._opening < self.max_connections:
            return
        candidates = [(conn.idle_since, key) for key, idle in self._idle.items() for conn in idle[:1]]
        if candidates:
            _, key = min(candidates)
            self._idle[key].pop(0).close()

    async def _connect(self, origin: _Origin) -> Connection:
        loop = asyncio.get_running_loop()
        self._make_room()
        self._opening += 1
        tls: Any = None
        if origin.tls:
            if self._tls is None:
                try:
                    self._tls = tls_context()  # the system store, SSL_CERT_FILE / SSL_CERT_DIR, REQUESTS_CA_BUNDLE
                except OSError as exc:
                    raise TransportError("ConnectError", str(exc)) from None
            tls = self._tls
        try:
            async with asyncio.timeout(self.timeout):
                _, conn = await loop.create_connection(
                    lambda: Connection(loop, self._forget), origin.host, origin.port,
                    ssl=tls, server_hostname=origin.host if tls else None,
                )
        except TimeoutError:
            raise TransportError("ConnectTimeout", f"timed out connecting to {origin.host}:{origin.port}") from None
        except ssl.SSLCertVerificationError as exc:  # said apart from a refused connection (issue 24)
            reason = exc.verify_message or certificate_problem(str(exc)) or "certificate verify failed"
            raise TransportError("ConnectError", untrusted_detail(origin.host, origin.port, reason)) from None
        except OSError as exc:  # refused, unreachable, DNS, other TLS failures (ssl.SSLError is an OSError)
            raise TransportError("ConnectError", str(exc) or type(exc).__name__) from None
        finally:
            self._opening -= 1
        if self._closed:
            conn.close()
            raise RuntimeError("Cannot send a request, as the HTTP engine has been closed.")
        self._open.add(conn)
        return conn

    async def _exchange(self, origin: _Origin, head: bytes, body: bytes | None) -> Connection:
        """A connection (idle or new) on which the request was handed to the socket."""
        conn = self._take(origin) or await self._connect(origin)
        try:
            await conn.send(head, body, self.timeout)
        except BaseException:
            conn.close()
            raise
        return conn

    # -- requests ---------------------------------------------------------------------------------

    def _prepare(self, method: str, url: str, body: bytes | None,
                 headers: Mapping[str, str] | None) -> tuple[_Origin, bytes]:
        if self._closed:
            raise RuntimeError("Cannot send a request, as the HTTP engine has been closed.")
        if method == "HEAD":  # the parser would wait for a body that a HEAD response never has
            raise ValueError("the h1 engine does not send HEAD requests")
        origin = self._origin(url)
        length = len(body) if body is not None else (0 if method in ("POST", "PUT", "PATCH") else None)
        return origin, origin.head(method, headers, length)

    async def request(self, method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None,
                      read_timeout: Any = _DEFAULT) -> Reply:
        """Send one request and read its whole body. Raises :class:`TransportError`."""
        origin, head = self._prepare(method, url, body, headers)
        read = self.read_timeout if read_timeout is _DEFAULT else read_timeout
        await self._acquire()
        try:
            for attempt in range(2):
                conn = await self._exchange(origin, head, body)
                try:
                    reply = await conn.response(read)
                except TransportError as exc:
                    conn.close()
                    # a reused connection the server had closed, no byte of an answer: resend once if idempotent
                    if conn.reused and not conn.started and exc.kind == "RemoteProtocolError":
                        exc.stale = True
                        self._learn_expiry(conn.idle_for)
                        if attempt == 0 and method in _IDEMPOTENT:
                            continue
                    raise
                except BaseException:
                    conn.close()
                    raise
                self._give_back(origin, conn)
                return reply
        finally:
            self._release()
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def stream(self, method: str, url: str, body: bytes | None = None,
                     headers: Mapping[str, str] | None = None) -> AsyncIterator[StreamReply]:
        """A response whose body is read as it arrives. Raises :class:`TransportError`."""
        origin, head = self._prepare(method, url, body, headers)
        read = self.read_timeout
        await self._acquire()
        try:
            conn = await self._exchange(origin, head, body)
            try:
                await conn.head(read)
                yield StreamReply(conn.status, conn.body_chunks(read), charset(conn.content_type), conn.content_type)
            except BaseException:
                conn.close()
                raise
            if conn.complete and not conn.chunks:
                self._give_back(origin, conn)
            else:
                conn.close()  # the body was not read to the end
        finally:
            self._release()

    async def aclose(self) -> None:
        """Close every connection. Idempotent."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        self._idle.clear()
        for conn in list(self._open):
            conn.close()
        self._open.clear()
