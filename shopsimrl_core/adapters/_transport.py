"""The HTTP transport under the model and environment clients: keep-alive HTTP/1.1 on asyncio streams.

httpx stays the client API (requests, responses, timeouts, exceptions), but its default pool
(httpcore) re-examines every queued request against every connection each time a request starts or
ends, so its CPU cost per request grows with the number of episodes in flight (docs/benchmarks.md).
:class:`StreamsTransport` is an ``httpx.AsyncBaseTransport`` for plain ``http://`` endpoints whose
pool does O(1) work per request: one stack of idle connections and one FIFO queue of waiters per
``(host, port)``, at most ``max_connections`` open connections.

Rules that matter (they keep the retry logic of the layers above correct):

* A connection goes back to the pool only when its response was read to the end and the server
  did not ask to close it; anything else (error, timeout, cancellation, unread body) closes it.
* A request is never resent once its bytes may have reached the server, except for idempotent
  methods (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) with an in-memory body when a *reused*
  connection ended before a single response byte came back. A POST is resent only when the kernel
  refused its very first byte. Otherwise the httpx error is raised and higher layers decide.
* Timeouts come from ``request.extensions["timeout"]`` exactly as httpx defines them: ``connect``
  (opening the socket), ``read`` (each wait for response bytes; ``None`` waits forever, which the
  environment's ``reset`` relies on), ``write`` (each wait to flush request bytes), ``pool`` (waiting
  for a free connection; ``None`` waits forever).

:func:`select_transport` decides which transport a client uses (``auto`` / ``httpx`` / ``streams``).
"""

from __future__ import annotations

import asyncio
import collections
import select
import socket
import time
import urllib.request
from collections.abc import AsyncIterator
from typing import Any, Literal

import httpx

__all__ = ["StreamsTransport", "select_transport", "HTTP_TRANSPORT_MODES", "HttpTransportMode"]

HttpTransportMode = Literal["auto", "httpx", "streams"]
HTTP_TRANSPORT_MODES: tuple[str, ...] = ("auto", "httpx", "streams")

_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
_READ_SIZE = 65536
# response heads, chunk-size lines and trailers longer than this are a protocol error
_LINE_LIMIT = 1 << 18
_NO_BODY_STATUSES = frozenset({204, 304})
#: idle connections older than this are closed, not reused: below common server keep-alive timeouts
#: (uvicorn 5 s), so a request rarely races the server closing the connection it is sent on
KEEPALIVE_EXPIRY = 4.0


def _proxy_applies(url: httpx.URL) -> bool:
    """True when httpx (trust_env) could route *url* through a proxy from the environment.

    Deliberately conservative: a proxy variable for the scheme (or ``ALL_PROXY``) counts unless
    ``NO_PROXY`` is ``*`` or names the host exactly; any doubt keeps httpx, which is always correct.
    """
    proxies = urllib.request.getproxies()
    if not (proxies.get(url.scheme) or proxies.get("all")):
        return False
    entries = [entry.strip().lower() for entry in proxies.get("no", "").split(",") if entry.strip()]
    return not ("*" in entries or url.host.lower() in entries)


def select_transport(
    url: str,
    *,
    mode: str = "auto",
    trust_env: bool = False,
    max_connections: int = 64,
    keepalive_expiry: float | None = KEEPALIVE_EXPIRY,
) -> httpx.AsyncBaseTransport | None:
    """Return the transport a client of *url* should use; ``None`` means httpx's own default.

    ``auto``: :class:`StreamsTransport` for ``http://`` URLs that no environment proxy applies to
    (only considered when *trust_env*), httpx otherwise (``https://``, proxies). ``httpx``: always
    httpx. ``streams``: always :class:`StreamsTransport` (proxy variables are then ignored).

    Raises:
        ValueError: unknown *mode*, or ``streams`` for a URL that is not ``http://``.
    """
    if mode not in HTTP_TRANSPORT_MODES:
        raise ValueError(f"http_transport must be one of {', '.join(HTTP_TRANSPORT_MODES)} (got {mode!r})")
    if mode == "httpx":
        return None
    parsed = httpx.URL(url)
    if parsed.scheme != "http":
        if mode == "streams":
            raise ValueError(f"http_transport 'streams' supports only http:// URLs (got {url!r}); use 'auto' or 'httpx'")
        return None
    if mode == "auto" and trust_env and _proxy_applies(parsed):
        return None
    return StreamsTransport(max_connections=max_connections, keepalive_expiry=keepalive_expiry)


class _NothingSent(Exception):
    """The connection was dead before any request byte reached the server: safe to resend."""


class _NoResponse(Exception):
    """A reused connection ended before any response byte arrived (the request may have been seen)."""


class _Connection:
    __slots__ = ("reader", "writer", "idle_since", "requests")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0
        self.requests = 0

    def close(self) -> None:
        transport = self.writer.transport
        if transport.is_closing():
            return
        if transport.get_write_buffer_size():
            # request bytes still queued (a cancelled or failed send): drop them, never flush them late
            transport.abort()
        else:
            transport.close()

    def dead(self) -> bool:
        """True when the server closed (or wrote to) this idle connection: it must not carry a request."""
        reader = self.reader
        if reader.at_eof() or reader.exception() is not None or self.writer.transport.is_closing():
            return True
        if getattr(reader, "_buffer", b""):  # bytes nobody asked for: the stream is out of step
            return True
        # the loop may not have seen a FIN that already arrived: an idle socket must not be readable
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return True
        try:
            poller = select.poll()  # poll, not select: no FD_SETSIZE limit on busy processes
            poller.register(sock.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True


_SLOT = object()  # a waiter's grant meaning "open a new connection in the slot just freed"


class _Pool:
    """Connections to one (host, port): an idle stack, an open-connection count and FIFO waiters."""

    __slots__ = ("idle", "open", "waiters", "active", "limit", "expiry")

    def __init__(self, limit: int, expiry: float | None) -> None:
        self.idle: list[_Connection] = []
        self.open = 0  # connections open or being opened (idle ones included)
        self.waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.active: set[_Connection] = set()
        self.limit = limit
        self.expiry = expiry

    def take_idle(self) -> _Connection | None:
        """Pop the most recently used live idle connection; dead or expired ones are closed."""
        idle = self.idle
        while idle:
            conn = idle.pop()
            if self.expiry is not None and time.monotonic() - conn.idle_since > self.expiry:
                # the stack is ordered by idle time: everything below is older still
                for old in [conn, *idle]:
                    old.close()
                self.open -= len(idle) + 1
                idle.clear()
                return None
            if conn.dead():
                conn.close()
                self.open -= 1
                continue
            return conn
        return None

    async def acquire(self, timeout: float | None, request: httpx.Request) -> _Connection | None:
        """A live idle connection, or None meaning "a slot is reserved: open a new connection"."""
        waiters = self.waiters
        while waiters and waiters[0].done():  # expired or cancelled waiters: nobody to queue behind
            waiters.popleft()
        if not waiters:
            conn = self.take_idle()
            if conn is not None:
                self.active.add(conn)
                return conn
            if self.open < self.limit:
                self.open += 1
                return None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()
        self.waiters.append(waiter)
        timer = None
        if timeout is not None:
            timer = loop.call_later(timeout, _expire_waiter, waiter, request)
        try:
            grant = await waiter
        except asyncio.CancelledError:
            # cancelled after being granted a connection or slot: hand it on, never lose it
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                granted = waiter.result()
                if granted is _SLOT:
                    self.discard(None)
                else:
                    self.active.add(granted)
                    self.release(granted)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if grant is _SLOT:
            return None
        if grant.dead():  # closed by the server while it was handed over: reuse its slot
            grant.close()
            return None
        self.active.add(grant)
        return grant

    def _next_waiter(self) -> asyncio.Future[Any] | None:
        waiters = self.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                return waiter
        return None

    def release(self, conn: _Connection) -> None:
        """Return a connection whose response was read completely and which may be kept alive."""
        self.active.discard(conn)
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result(conn)
            return
        conn.idle_since = time.monotonic()
        self.idle.append(conn)

    def discard(self, conn: _Connection | None) -> None:
        """Close *conn* (None: a reserved slot that never got a connection) and free its slot."""
        if conn is not None:
            self.active.discard(conn)
            conn.close()
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result(_SLOT)  # the slot passes to the waiter: the count stays
            return
        self.open -= 1

    def close_all(self) -> None:
        for conn in [*self.idle, *self.active]:
            conn.close()
        self.idle.clear()
        self.active.clear()
        self.open = 0
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(RuntimeError("the HTTP transport was closed"))


def _expire_waiter(waiter: asyncio.Future[Any], request: httpx.Request) -> None:
    if not waiter.done():
        waiter.set_exception(httpx.PoolTimeout("timed out waiting for a free connection", request=request))


class _Head:
    __slots__ = ("status", "reason", "version", "headers", "length", "chunked", "keep_alive")

    def __init__(self) -> None:
        self.status = 0
        self.reason = b""
        self.version = b"HTTP/1.1"
        self.headers: list[tuple[bytes, bytes]] = []
        self.length: int | None = None
        self.chunked = False
        self.keep_alive = True


def _parse_head(raw: bytes, request: httpx.Request) -> _Head:
    lines = raw[:-4].split(b"\r\n")
    status_line = lines[0]
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or len(parts[1]) != 3 or not parts[1].isdigit():
        raise httpx.RemoteProtocolError(f"malformed HTTP status line: {status_line[:100]!r}", request=request)
    head = _Head()
    head.version = parts[0]
    head.status = int(parts[1])
    head.reason = parts[2] if len(parts) == 3 else b""
    head.keep_alive = head.version == b"HTTP/1.1"
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise httpx.RemoteProtocolError(f"malformed HTTP header line: {line[:100]!r}", request=request)
        value = value.strip()
        head.headers.append((name, value))
        lower = name.lower()
        if lower == b"content-length":
            if not value.isdigit() or (head.length is not None and head.length != int(value)):
                raise httpx.RemoteProtocolError(f"invalid Content-Length: {value[:40]!r}", request=request)
            head.length = int(value)
        elif lower == b"transfer-encoding":
            head.chunked = value.lower().split(b",")[-1].strip() == b"chunked"
        elif lower == b"connection":
            tokens = {token.strip() for token in value.lower().split(b",")}
            if b"close" in tokens:
                head.keep_alive = False
            elif b"keep-alive" in tokens and head.version == b"HTTP/1.0":
                head.keep_alive = True
    if head.chunked:
        head.length = None  # RFC 9112 §6.3: chunked framing wins over Content-Length
    return head


async def _timed(awaitable: Any, timeout: float | None) -> Any:
    if timeout is None:
        return await awaitable
    async with asyncio.timeout(timeout):
        return await awaitable


class _ResponseStream(httpx.AsyncByteStream):
    """The body of one response, read incrementally; returns the connection to the pool at its end."""

    def __init__(
        self, transport: "StreamsTransport", pool: _Pool, conn: _Connection, head: _Head, request: httpx.Request, read_timeout: float | None
    ) -> None:
        self._transport = transport
        self._pool = pool
        self._conn: _Connection | None = conn
        self._head = head
        self._request = request
        self._timeout = read_timeout
        self._consumed = False

    def _finish(self, reusable: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if reusable and self._head.keep_alive and not self._transport._closed:
            self._pool.release(conn)
        else:
            self._pool.discard(conn)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._consumed:
            raise httpx.StreamConsumed()
        self._consumed = True
        conn = self._conn
        if conn is None:
            return
        try:
            head = self._head
            if head.chunked:
                async for piece in self._chunked(conn.reader):
                    yield piece
            elif head.length is not None:
                remaining = head.length
                while remaining:
                    data = await _timed(conn.reader.read(min(remaining, _READ_SIZE)), self._timeout)
                    if not data:
                        raise httpx.RemoteProtocolError(
                            f"peer closed connection without sending complete message body "
                            f"(received {head.length - remaining} bytes, expected {head.length})",
                            request=self._request,
                        )
                    remaining -= len(data)
                    if not remaining:
                        self._finish(True)  # back in the pool before the caller resumes
                    yield data
            else:
                head.keep_alive = False  # the body ends when the server closes the connection
                while True:
                    data = await _timed(conn.reader.read(_READ_SIZE), self._timeout)
                    if not data:
                        break
                    yield data
            self._finish(True)
        except TimeoutError:
            self._finish(False)
            raise httpx.ReadTimeout("timed out reading the response body", request=self._request) from None
        except (ConnectionError, OSError) as exc:
            self._finish(False)
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}", request=self._request) from None
        except BaseException:
            self._finish(False)
            raise

    async def _chunked(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        request, timeout = self._request, self._timeout
        while True:
            line = await self._read_line(reader)
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise httpx.RemoteProtocolError(f"malformed chunk size line: {line[:60]!r}", request=request) from None
            if size < 0:
                raise httpx.RemoteProtocolError(f"malformed chunk size line: {line[:60]!r}", request=request)
            if size == 0:
                while await self._read_line(reader):  # trailers, up to the blank line
                    pass
                self._finish(True)
                return
            while size:
                data = await _timed(reader.read(min(size, _READ_SIZE)), timeout)
                if not data:
                    raise httpx.RemoteProtocolError("peer closed connection in the middle of a chunk", request=request)
                size -= len(data)
                yield data
            if await self._read_line(reader):
                raise httpx.RemoteProtocolError("chunk data longer than its declared size", request=request)

    async def _read_line(self, reader: asyncio.StreamReader) -> bytes:
        try:
            line = await _timed(reader.readuntil(b"\r\n"), self._timeout)
        except asyncio.IncompleteReadError:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body (incomplete chunked read)", request=self._request
            ) from None
        except asyncio.LimitOverrunError:
            raise httpx.RemoteProtocolError("chunk size line or trailer too long", request=self._request) from None
        return line[:-2]

    async def aclose(self) -> None:
        # closed before the end (not read, cancelled, error): the connection cannot be reused
        self._finish(False)


class StreamsTransport(httpx.AsyncBaseTransport):
    """Pooled keep-alive HTTP/1.1 for ``http://`` URLs on asyncio streams (see the module docstring).

    ``max_connections`` bounds open connections per (host, port); requests beyond it wait in FIFO
    order, at most the request's ``pool`` timeout. Idle connections older than ``keepalive_expiry``
    seconds (None: no limit) are closed instead of reused. One instance may serve several httpx
    clients; ``aclose`` is idempotent and closes every connection, idle or busy.
    """

    def __init__(self, *, max_connections: int = 64, keepalive_expiry: float | None = KEEPALIVE_EXPIRY) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self.max_connections = max_connections
        self.keepalive_expiry = keepalive_expiry
        self._pools: dict[tuple[str, int], _Pool] = {}
        self._closed = False

    # -- public ---------------------------------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send *request* and return a response whose body streams from the connection.

        Raises:
            httpx.UnsupportedProtocol: not an ``http://`` URL.
            httpx.ConnectError / ConnectTimeout / PoolTimeout / WriteError / WriteTimeout /
            ReadError / ReadTimeout / RemoteProtocolError: as httpx's own transport would.
        """
        if self._closed:
            raise RuntimeError("Cannot send a request, as the transport has been closed.")
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"StreamsTransport supports only http:// URLs (got {url.scheme}://)", request=request)
        timeouts = request.extensions.get("timeout") or {}
        host, port = url.host, url.port or 80
        pool = self._pools.get((host, port))
        if pool is None:
            pool = self._pools[(host, port)] = _Pool(self.max_connections, self.keepalive_expiry)
        try:
            body: bytes | None = request.content
        except httpx.RequestNotRead:
            body = None  # a streaming body: sent as it is produced, never resent
        head = self._request_head(request)
        conn = await pool.acquire(timeouts.get("pool"), request)
        fresh_retry = False
        while True:
            reused = conn is not None
            try:
                if conn is None:
                    conn = await self._connect(host, port, timeouts.get("connect"), request)
                    pool.active.add(conn)
                conn.requests += 1
                response_head = await self._exchange(conn, head, body, request, timeouts, reused)
            except (_NothingSent, _NoResponse) as exc:
                pool.active.discard(conn)
                conn.close()  # type: ignore[union-attr]
                conn = None  # keep the slot: the one resend goes on a fresh connection
                if isinstance(exc, _NothingSent) or (request.method in _IDEMPOTENT and body is not None):
                    if not fresh_retry:
                        fresh_retry = True
                        continue
                pool.discard(None)
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request) from None
            except BaseException:
                pool.discard(conn)
                raise
            break
        stream = _ResponseStream(self, pool, conn, response_head, request, timeouts.get("read"))
        if request.method == "HEAD" or response_head.status in _NO_BODY_STATUSES or 100 <= response_head.status < 200:
            response_head.chunked, response_head.length = False, 0
            stream._finish(response_head.status != 101)
        return httpx.Response(
            response_head.status,
            headers=response_head.headers,
            stream=stream,
            extensions={"http_version": response_head.version, "reason_phrase": response_head.reason},
        )

    async def aclose(self) -> None:
        """Close every connection (idle and busy) and fail pending waiters. Idempotent."""
        self._closed = True
        for pool in self._pools.values():
            pool.close_all()
        self._pools.clear()

    # -- internals ------------------------------------------------------------------------------

    @staticmethod
    def _request_head(request: httpx.Request) -> bytes:
        target = request.url.raw_path or b"/"
        lines = [request.method.encode("ascii"), b" ", target, b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            lines += (name, b": ", value, b"\r\n")
        lines.append(b"\r\n")
        return b"".join(lines)

    async def _connect(self, host: str, port: int, timeout: float | None, request: httpx.Request) -> _Connection:
        try:
            reader, writer = await _timed(asyncio.open_connection(host, port, limit=_LINE_LIMIT), timeout)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"timed out connecting to {host}:{port}", request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(f"{type(exc).__name__}: {exc}", request=request) from None
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # small request/response turns: never wait for Nagle to coalesce them
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer)

    async def _exchange(
        self, conn: _Connection, head: bytes, body: bytes | None, request: httpx.Request, timeouts: dict[str, Any], reused: bool
    ) -> _Head:
        writer = conn.writer
        write_timeout = timeouts.get("write")
        try:
            if body is not None:
                writer.write(head + body if len(body) < _READ_SIZE else head)
                if writer.transport.is_closing():
                    # the kernel refused the first byte (or the peer was already gone): nothing was sent
                    if reused:
                        raise _NothingSent()
                    raise httpx.WriteError("connection closed before the request could be sent", request=request)
                if len(body) >= _READ_SIZE:
                    writer.write(body)
                await _timed(writer.drain(), write_timeout)
            else:
                writer.write(head)
                if writer.transport.is_closing():
                    if reused:
                        raise _NothingSent()
                    raise httpx.WriteError("connection closed before the request could be sent", request=request)
                await self._write_stream(conn, request, write_timeout)
        except TimeoutError:
            raise httpx.WriteTimeout("timed out sending the request", request=request) from None
        except (ConnectionError, OSError) as exc:
            raise httpx.WriteError(f"{type(exc).__name__}: {exc}", request=request) from None
        read_timeout = timeouts.get("read")
        reader = conn.reader
        while True:
            try:
                raw = await _timed(reader.readuntil(b"\r\n\r\n"), read_timeout)
            except TimeoutError:
                raise httpx.ReadTimeout("timed out waiting for the response", request=request) from None
            except asyncio.IncompleteReadError as exc:
                if not exc.partial and reused:
                    raise _NoResponse() from None
                if not exc.partial:
                    raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request) from None
                raise httpx.RemoteProtocolError("peer closed connection in the middle of the response head", request=request) from None
            except asyncio.LimitOverrunError:
                raise httpx.RemoteProtocolError("response head too long", request=request) from None
            except (ConnectionError, OSError) as exc:
                if reused and isinstance(exc, ConnectionResetError) and not getattr(reader, "_buffer", b"?"):
                    raise _NoResponse() from None
                raise httpx.ReadError(f"{type(exc).__name__}: {exc}", request=request) from None
            parsed = _parse_head(raw, request)
            if 100 <= parsed.status < 200 and parsed.status != 101:
                continue  # interim response (100 Continue, 103 Early Hints): the real one follows
            return parsed

    @staticmethod
    async def _write_stream(conn: _Connection, request: httpx.Request, write_timeout: float | None) -> None:
        chunked = "content-length" not in request.headers
        writer = conn.writer
        stream = request.stream
        assert isinstance(stream, httpx.AsyncByteStream), "an async client sends async request bodies"
        async for piece in stream:
            if not piece:
                continue
            if chunked:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            else:
                writer.write(piece)
            await _timed(writer.drain(), write_timeout)
        if chunked:
            writer.write(b"0\r\n\r\n")
        await _timed(writer.drain(), write_timeout)

    async def __aenter__(self) -> "StreamsTransport":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()
