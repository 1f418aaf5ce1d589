"""One HTTP/1.1 connection of the h1 engine (``_h1.py``): an ``asyncio.Protocol`` and its exchange.

The protocol writes one request at a time and feeds what arrives to ``httptools``' response parser
(llhttp); the parser's callbacks fill in the exchange (status, the headers we act on, body chunks)
and resolve the future the request waits on. Timeouts are timers on the loop, moved forward lazily;
flow control is the transport's (``pause_writing`` / ``pause_reading``).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httptools

from shopsimrl_core.adapters._engine_interface import Reply, TransportError, parsed_once

__all__ = ["Connection", "charset"]

#: bodies up to this size are handed to the transport in one write; larger ones in pieces, each
#: wait for the socket to drain bounded by the write timeout
_ONE_WRITE = 1 << 18
_PIECE = 1 << 16
#: a streamed body pauses reading while this much is buffered and unread
_STREAM_BUFFER = 1 << 20
_NO_RESPONSE = "Server disconnected without sending a response."
_INCOMPLETE = "Server disconnected without sending a complete response."


def charset(content_type: str | None) -> str | None:
    """The ``charset`` parameter of a Content-Type header, or None."""
    return parsed_once(_CHARSETS, content_type, _charset_of) if content_type else None


def _charset_of(content_type: str) -> str | None:
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"') or None
    return None


_CHARSETS: dict[str, Any] = {}


class Connection(asyncio.Protocol):
    """One keep-alive connection and the exchange (request, response) in progress on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_lost: Any) -> None:
        self.loop = loop
        self.on_lost = on_lost
        self.transport: Any = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        self.idle_for = 0.0  # how long it sat idle before its current exchange
        self._done: asyncio.Future[None] | None = None  # the exchange ended (complete or failed)
        self._wake: asyncio.Future[None] | None = None  # a streaming reader waits for more
        self._drain: asyncio.Future[None] | None = None
        self._paused_writing = False
        self._paused_reading = False
        self._timer: asyncio.TimerHandle | None = None
        self._reset_exchange()

    def _reset_exchange(self) -> None:
        self.status = 0
        self.content_type: str | None = None
        self.encoding: str | None = None
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.started = False  # a response byte arrived
        self.head_done = False
        self.framed = False  # Content-Length or Transfer-Encoding: the end is not the connection's close
        self.complete = False
        self.keep = False
        self.error: TransportError | None = None
        self.last_read = 0.0

    # -- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._done is None:  # bytes nobody asked for: the connection can't be trusted again
            self.close()
            return
        self.started = True
        self.last_read = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(TransportError("RemoteProtocolError", "unexpected protocol upgrade"))
        except httptools.HttpParserError as exc:
            self._fail(TransportError("RemoteProtocolError", str(exc) or "malformed HTTP response"))

    def eof_received(self) -> bool:
        return False  # close the transport: a half-closed HTTP/1.1 connection is finished

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.on_lost(self)
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        if self._done is None or self.complete or self.error is not None:
            return
        if self.head_done and not self.framed:
            self._finish(keep=False)  # the body ran to the close (HTTP/1.0 style)
        elif isinstance(exc, OSError) and not isinstance(exc, ConnectionResetError):
            self._fail(TransportError("ReadError", str(exc) or type(exc).__name__))
        else:
            failure = TransportError("RemoteProtocolError", _INCOMPLETE if self.started else _NO_RESPONSE)
            failure.answered = self.started  # the server handled the request: its answer was cut off
            self._fail(failure)

    def pause_writing(self) -> None:
        self._paused_writing = True

    def resume_writing(self) -> None:
        self._paused_writing = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    # -- httptools callbacks ------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"content-type":
            self.content_type = value.decode("latin-1")
        elif lowered == b"content-encoding":
            self.encoding = value.decode("latin-1").strip().lower()
        elif lowered in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.head_done = True
        if self.status in (204, 304) or 100 <= self.status < 200:
            self.framed = True  # no body by definition
        self._wake_reader()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _STREAM_BUFFER and self._wake is not None and not self._paused_reading:
            self._paused_reading = True
            self.transport.pause_reading()
        self._wake_reader()

    def on_message_complete(self) -> None:
        if 100 <= self.status < 200:  # an interim response: the real one follows on the same exchange
            self.head_done = False
            self.framed = False
            return
        self._finish(keep=self.parser.should_keep_alive())

    # -- the exchange ---------------------------------------------------------------------------------

    def _finish(self, *, keep: bool) -> None:
        self.complete = True
        self.keep = keep
        self._cancel_timer()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)
        self._wake_reader()

    def _fail(self, error: TransportError) -> None:
        if self.error is None and not self.complete:
            self.error = error
        self._cancel_timer()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)
        self._wake_reader()
        self.close()

    def _wake_reader(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm_read_timer(self, seconds: float | None) -> None:
        if seconds is not None and self._timer is None:
            self._timer = self.loop.call_at(self.last_read + seconds, self._read_deadline, seconds)

    def _read_deadline(self, seconds: float) -> None:
        # one timer per exchange, moved forward lazily: each wait for bytes is bounded, not the whole response
        self._timer = None
        if self.complete or self.error is not None:
            return
        due = self.last_read + seconds
        if self.loop.time() < due:
            self._timer = self.loop.call_at(due, self._read_deadline, seconds)
        else:
            self._fail(TransportError("ReadTimeout", "timed out waiting for the response"))

    async def send(self, head: bytes, body: bytes | None, write_timeout: float) -> None:
        """Start an exchange: hand the request to the socket (each drain wait bounded by *write_timeout*)."""
        self._reset_exchange()
        self._done = self.loop.create_future()
        transport = self.transport
        if body is None or len(body) <= _ONE_WRITE:
            if body:
                transport.writelines((head, body))  # one writev on uvloop: the body is not copied behind the head
            else:
                transport.write(head)
            if self._paused_writing:
                await self._drained(write_timeout)
        else:
            transport.write(head)
            view = memoryview(body)
            for start in range(0, len(body), _PIECE):
                if self.closed or self.complete:
                    break  # the server answered (or hung up) before taking the whole body
                transport.write(view[start:start + _PIECE])
                if self._paused_writing:
                    await self._drained(write_timeout)
        self.last_read = self.loop.time()

    async def _drained(self, write_timeout: float) -> None:
        while self._paused_writing and not self.closed:
            self._drain = self.loop.create_future()
            try:
                async with asyncio.timeout(write_timeout):
                    await self._drain
            except TimeoutError:
                raise TransportError("WriteTimeout", "timed out sending the request body") from None
            finally:
                self._drain = None
        if self.closed and not self.started:
            raise TransportError("WriteError", "the server closed the connection while the request was sent")

    async def response(self, read_timeout: float | None) -> Reply:
        """Wait for the whole response (each wait for bytes bounded by *read_timeout*)."""
        if not (self.complete or self.error is not None):
            self._arm_read_timer(read_timeout)
            assert self._done is not None
            await self._done
        if self.error is not None:
            raise self.error
        return Reply(self.status, self._body(b"".join(self.chunks)), charset(self.content_type), self.content_type)

    async def head(self, read_timeout: float | None) -> None:
        """Wait for the response's status line and headers."""
        while not (self.head_done or self.complete or self.error is not None):
            await self._wait(read_timeout)
        if self.error is not None:
            raise self.error

    async def body_chunks(self, read_timeout: float | None) -> AsyncIterator[bytes]:
        """The body as it arrives."""
        decoder = self._decoder()
        while True:
            if self.chunks:
                data = b"".join(self.chunks)
                self.chunks.clear()
                self.buffered = 0
                if self._paused_reading and not self.closed:
                    self._paused_reading = False
                    self.transport.resume_reading()
                yield decoder.decompress(data) if decoder else data
                continue
            if self.error is not None:
                raise self.error
            if self.complete:
                if decoder:
                    tail = decoder.flush()
                    if tail:
                        yield tail
                return
            await self._wait(read_timeout)

    async def _wait(self, read_timeout: float | None) -> None:
        self._wake = self.loop.create_future()
        self.last_read = self.loop.time()  # each wait for bytes is bounded from its own start
        self._arm_read_timer(read_timeout)
        try:
            await self._wake
        finally:
            self._wake = None
            self._cancel_timer()

    def _decoder(self) -> Any:
        if self.encoding in (None, "", "identity"):
            return None
        if self.encoding in ("gzip", "x-gzip"):
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        if self.encoding == "deflate":
            return zlib.decompressobj()
        raise TransportError("DecodingError", f"unsupported Content-Encoding {self.encoding!r}")

    def _body(self, data: bytes) -> bytes:
        decoder = self._decoder()
        if decoder is None:
            return data
        try:
            body: bytes = decoder.decompress(data) + decoder.flush()
            return body
        except zlib.error as exc:
            raise TransportError("DecodingError", f"bad {self.encoding} body: {exc}") from None

    def reusable(self) -> bool:
        return self.complete and self.keep and not self.closed and not self._paused_reading

    def end_exchange(self) -> None:
        self._done = None
        self._cancel_timer()
        self.reused = True

    def close(self) -> None:
        """Close the connection; the engine stops counting it at once (not only once the loop reports it)."""
        if not self.closed:
            self.closed = True
            self.on_lost(self)
        self._cancel_timer()
        if self.transport is not None:
            self.transport.close()
