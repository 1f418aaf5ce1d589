"""The HTTP engines under the model and environment clients (their JSON codec: ``_json.py``).

Three engines share one small interface (``request``, ``stream``, ``aclose``; with ``Reply`` and
``TransportError`` it lives in ``_engine_interface.py``, below all three):

* :class:`~shopsimrl_core.adapters._h1.H1Engine` (``_h1.py``) — HTTP/1.1 on the event loop's own
  transports with the httptools (llhttp) parser: the default (``http_transport: auto`` / ``h1``)
  for ``http://`` and ``https://`` reached directly. It costs under a third of aiohttp's CPU per
  request (docs/benchmarks.md, ``benchmarks/http_engines.py``).
* :class:`AiohttpEngine` — ``aiohttp.ClientSession`` used directly: ``http_transport: aiohttp``,
  and in ``auto`` mode when ``trust_env`` is on and an ``HTTP(S)_PROXY`` or a ``.netrc`` entry
  applies to the URL.
* :class:`HttpxEngine` — an ``httpx.AsyncClient``: used for ``http_transport: httpx``, for an explicit
  ``transport=`` (the test seam: ``httpx.MockTransport``), and in ``auto`` mode when a proxy variable
  only httpx understands applies (``ALL_PROXY``, ``socks5://`` proxies).

Rules every engine keeps (the retry logic above relies on them):

* A request is never resent by the engine once its bytes may have reached the server, except an
  idempotent method on a reused keep-alive connection that the server had closed; POSTs never.
* A connection goes back to the pool only when its response was read to the end; cancellation,
  errors and unread bodies close it.
* Timeouts: ``timeout`` bounds connecting and each wait to hand request bytes to the socket (a
  server that stops reading a large body: ``WriteTimeout``); ``read_timeout`` bounds each wait for
  response bytes (``None`` = wait forever: the environment's reset). Waiting for a free pooled
  connection never times out.
* Every failure without a usable HTTP response raises :class:`TransportError`, whose text is
  ``"<Kind>: <detail>"`` with httpx's kind names (``ConnectError``, ``ConnectTimeout``,
  ``ReadTimeout``, ``ReadError``, ``WriteError``, ``RemoteProtocolError``, …).

Idle connections are closed after :data:`KEEPALIVE_EXPIRY` seconds (``keepalive_expiry`` overrides
it), below common server keep-alive timeouts (uvicorn: 5 s), so a request rarely races the server
closing the connection it is sent on. The h1 engine also learns a shorter server timeout: when a
reused connection turns out closed before any answer byte, its expiry drops to half that
connection's idle time (not below :data:`MIN_KEEPALIVE_EXPIRY`), and the error says so
(``TransportError.stale``) so that a caller may resend what the server never read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from shopsimrl_core.adapters._engine_choice import HTTP_TRANSPORT_MODES, select_transport
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
from shopsimrl_core.adapters._tls import certificate_problem, untrusted_detail

if TYPE_CHECKING:  # httpx is imported only when an httpx engine is built
    import httpx

__all__ = [
    "AiohttpEngine",
    "HttpxEngine",
    "HTTP_TRANSPORT_MODES",
    "KEEPALIVE_EXPIRY",
    "MIN_KEEPALIVE_EXPIRY",
    "Reply",
    "StreamReply",
    "TransportError",
    "build_engine",
    "select_transport",
]

# -- aiohttp ------------------------------------------------------------------------------------


class _WriteStalled(TimeoutError):
    """The server stopped reading the request body for longer than the write timeout."""


#: bodies at least this large are written in pieces, each under the write timeout (aiohttp has no
#: write timeout of its own; smaller bodies fit the socket buffers and are handed over at once)
_TIMED_BODY = 1 << 20
_PIECE = 1 << 16
_timed_payload: Any = None


def _timed_body(body: bytes, write_timeout: float) -> Any:
    global _timed_payload
    if _timed_payload is None:
        import aiohttp

        class TimedBytesPayload(aiohttp.BytesPayload):
            """Bytes written in pieces, each under a timeout (the write timeout aiohttp lacks)."""

            write_timeout = 0.0

            async def write_with_length(self, writer: Any, content_length: int | None) -> None:
                data = self._value if content_length is None else self._value[:content_length]
                for start in range(0, len(data), _PIECE):
                    try:
                        async with asyncio.timeout(self.write_timeout):
                            await writer.write(data[start:start + _PIECE])  # waits while the socket is full
                    except TimeoutError:
                        raise _WriteStalled("timed out sending the request body") from None

            async def write(self, writer: Any) -> None:
                await self.write_with_length(writer, None)

        _timed_payload = TimedBytesPayload
    payload = _timed_payload(body)
    payload.write_timeout = write_timeout
    return payload


def _aiohttp_error(exc: BaseException) -> TransportError:
    import aiohttp

    detail = str(exc) or type(exc).__name__
    if isinstance(exc, _WriteStalled) or isinstance(exc.__cause__, _WriteStalled):
        return TransportError("WriteTimeout", "timed out sending the request body")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return TransportError("ConnectTimeout", detail)
    if isinstance(exc, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
        return TransportError("ReadTimeout", detail if str(exc) else "timed out waiting for the response")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        reason = certificate_problem(str(exc.certificate_error)) or str(exc.certificate_error)
        return TransportError("ConnectError", untrusted_detail(exc.host, exc.port or 443, reason))
    if isinstance(exc, aiohttp.ClientConnectorError):
        return TransportError("ConnectError", detail)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return TransportError("RemoteProtocolError", "Server disconnected without sending a complete response.")
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ClientResponseError)):
        failure = TransportError("RemoteProtocolError", detail)
        failure.answered = isinstance(exc, aiohttp.ClientPayloadError)  # the body of an answer was cut off
        return failure
    if isinstance(exc, aiohttp.InvalidURL):
        return TransportError("UnsupportedProtocol", detail)
    if isinstance(exc, (aiohttp.ClientOSError, OSError)):
        return TransportError("ReadError", detail)
    return TransportError("TransportError", f"{type(exc).__name__}: {detail}")


class AiohttpEngine(_Engine):
    """One pooled ``aiohttp.ClientSession`` (created on first use, inside the running loop).

    ``max_connections`` bounds open connections (per engine, all hosts); more requests wait in
    order, without a timeout. ``trust_env`` honours ``HTTP(S)_PROXY`` / ``NO_PROXY`` (and ``.netrc``).
    No cookie jar: the services are stateless and cookie handling costs CPU on every response.
    """

    def __init__(self, *, timeout: float, read_timeout: float | None, max_connections: int = 64,
                 trust_env: bool = False, keepalive_expiry: float = KEEPALIVE_EXPIRY) -> None:
        self._settle(timeout=timeout, read_timeout=read_timeout, max_connections=max_connections,
                     keepalive_expiry=keepalive_expiry)
        self.trust_env = trust_env
        self._session: Any = None
        self._urls: dict[str, Any] = {}
        self._timeouts: dict[Any, Any] = {}
        self._tls_context: Any = None
        self._closed = False

    def _client(self) -> Any:
        if self._closed:
            raise RuntimeError("Cannot send a request, as the HTTP engine has been closed.")
        if self._session is None:
            import aiohttp

            connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0,
                                             keepalive_timeout=self.keepalive_expiry)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout(self.read_timeout), trust_env=self.trust_env,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    def _tls(self) -> Any:
        if self._tls_context is None:
            self._tls_context = _tls()  # made on the first https request: http-only clients never pay for it
        return self._tls_context

    def _timeout(self, read_timeout: Any) -> Any:
        read = self.read_timeout if read_timeout is _DEFAULT else read_timeout
        cached = self._timeouts.get(read)
        if cached is None:
            import aiohttp

            # connect=None: waiting for a pooled connection is not the attempt timing out
            cached = self._timeouts[read] = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=self.timeout,
                                                                  sock_read=read)
        return cached

    def _url(self, url: str) -> Any:
        from yarl import URL

        return parsed_once(self._urls, url, URL)

    async def request(self, method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None,
                      read_timeout: Any = _DEFAULT) -> Reply:
        """Send one request and read its whole body. Raises :class:`TransportError`."""
        session = self._client()
        data: Any = body if body is None or len(body) < _TIMED_BODY else _timed_body(body, self.timeout)
        # the session's own timeout unless this call overrides the read timeout (saves a merge per call)
        extra: dict[str, Any] = {} if read_timeout is _DEFAULT else {"timeout": self._timeout(read_timeout)}
        if url.startswith("https:"):
            extra["ssl"] = self._tls()
        try:
            async with session.request(method, self._url(url), data=data, headers=headers, **extra) as response:
                data = await response.read()
                return Reply(response.status, data, response.charset, response.headers.get("Content-Type"))
        except (TimeoutError, OSError) as exc:  # aiohttp's errors are OSError or ClientError
            raise _aiohttp_error(exc) from None
        except Exception as exc:
            import aiohttp

            if isinstance(exc, aiohttp.ClientError):
                raise _aiohttp_error(exc) from None
            raise

    @asynccontextmanager
    async def stream(self, method: str, url: str, body: bytes | None = None,
                     headers: Mapping[str, str] | None = None) -> AsyncIterator[StreamReply]:
        """A response whose body is read as it arrives. Raises :class:`TransportError`."""
        import aiohttp

        session = self._client()

        async def chunks(response: Any) -> AsyncIterator[bytes]:
            try:
                async for chunk in response.content.iter_any():
                    yield chunk
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise _aiohttp_error(exc) from None

        try:
            timeout = self._timeout(_DEFAULT)
            manager = session.request(method, self._url(url), data=body, headers=headers, timeout=timeout,
                                      **({"ssl": self._tls()} if url.startswith("https:") else {}))
            response = await manager.__aenter__()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _aiohttp_error(exc) from None
        try:
            yield StreamReply(response.status, chunks(response), response.charset, response.headers.get("Content-Type"))
        finally:
            await manager.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Close every connection. Idempotent."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()


# -- httpx --------------------------------------------------------------------------------------


def _tls() -> Any:
    from shopsimrl_core.adapters._tls import tls_context

    try:
        return tls_context()
    except OSError as exc:  # REQUESTS_CA_BUNDLE names nothing readable: every https request says so
        raise TransportError("ConnectError", str(exc)) from None


def _httpx_error(exc: BaseException) -> TransportError:
    reason = certificate_problem(str(exc)) if type(exc).__name__ == "ConnectError" else None
    if reason is not None:
        request = getattr(exc, "_request", None)
        host, port = (request.url.host, request.url.port or 443) if request is not None else ("?", 443)
        return TransportError("ConnectError", untrusted_detail(host, port, reason))
    return TransportError(type(exc).__name__, str(exc))


class HttpxEngine(_Engine):
    """An ``httpx.AsyncClient`` (own pool, or the given *transport*); httpx errors become :class:`TransportError`."""

    def __init__(self, *, timeout: float, read_timeout: float | None, max_connections: int = 64,
                 trust_env: bool = False, transport: httpx.AsyncBaseTransport | None = None) -> None:
        import httpx

        self._httpx = httpx
        self.read_timeout = read_timeout
        # pool=None: waiting for a pooled connection is not an HTTP attempt timing out
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        verify: Any = True
        self._tls_error: TransportError | None = None
        if transport is None:
            try:
                verify = _tls()  # the same trust as the other engines (httpx alone would use certifi's bundle)
            except TransportError as exc:
                self._tls_error = exc  # raised by the first https request
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=timeout, read=read_timeout, write=timeout, pool=None),
            limits=limits, trust_env=trust_env, transport=transport, verify=verify,
        )

    def _extensions(self, read_timeout: Any) -> Any:
        if read_timeout is _DEFAULT:
            return self._httpx.USE_CLIENT_DEFAULT
        current = self._client.timeout
        return self._httpx.Timeout(connect=current.connect, read=read_timeout, write=current.write, pool=None)

    async def request(self, method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None,
                      read_timeout: Any = _DEFAULT) -> Reply:
        """Send one request and read its whole body. Raises :class:`TransportError`."""
        if self._tls_error is not None and url.startswith("https:"):
            raise self._tls_error
        try:
            response = await self._client.request(
                method, url, content=body, headers=headers, timeout=self._extensions(read_timeout)
            )
        except self._httpx.RequestError as exc:
            raise _httpx_error(exc) from None
        return Reply(
            response.status_code, response.content, response.charset_encoding, response.headers.get("content-type")
        )

    @asynccontextmanager
    async def stream(
        self, method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[StreamReply]:
        """A response whose body is read as it arrives. Raises :class:`TransportError`."""
        httpx = self._httpx

        async def chunks(response: Any) -> AsyncIterator[bytes]:
            try:
                async for chunk in response.aiter_bytes():
                    yield chunk
            except httpx.RequestError as exc:
                raise _httpx_error(exc) from None

        try:
            manager = self._client.stream(method, url, content=body, headers=headers)
            response = await manager.__aenter__()
        except httpx.RequestError as exc:
            raise _httpx_error(exc) from None
        try:
            yield StreamReply(
                response.status_code, chunks(response), response.charset_encoding, response.headers.get("content-type")
            )
        finally:
            await manager.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Close the client (and its transport). Idempotent."""
        await self._client.aclose()


def build_engine(url: str, *, mode: str, timeout: float, read_timeout: float | None, max_connections: int,
                 trust_env: bool, transport: httpx.AsyncBaseTransport | None = None,
                 keepalive_expiry: float | None = None) -> _Engine:
    """The engine for *url*.

    An explicit httpx *transport* wins (httpx engine over it), else :func:`select_transport` decides.
    *keepalive_expiry* (seconds an idle connection is kept; None: :data:`KEEPALIVE_EXPIRY`) applies to
    the h1 and aiohttp engines.
    """
    expiry = KEEPALIVE_EXPIRY if keepalive_expiry is None else keepalive_expiry
    if not expiry > 0:
        raise ValueError(f"keepalive_expiry must be > 0 seconds (got {keepalive_expiry!r})")
    chosen = "httpx" if transport is not None else select_transport(url, mode=mode, trust_env=trust_env)
    if chosen == "httpx":
        return HttpxEngine(timeout=timeout, read_timeout=read_timeout, max_connections=max_connections,
                           trust_env=trust_env, transport=transport)
    if chosen == "h1":
        from shopsimrl_core.adapters._h1 import H1Engine

        return H1Engine(timeout=timeout, read_timeout=read_timeout, max_connections=max_connections,
                        keepalive_expiry=expiry)
    return AiohttpEngine(
        timeout=timeout, read_timeout=read_timeout, max_connections=max_connections, trust_env=trust_env,
        keepalive_expiry=expiry,
    )
