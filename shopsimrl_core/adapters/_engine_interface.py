"""The interface every HTTP engine shares: replies, the transport error, the keep-alive defaults.

It sits below the engines (``_http.py`` for aiohttp and httpx, ``_h1.py`` with ``_h1_connection.py``)
so that each imports it and none imports another: ``build_engine`` in ``_http.py`` chooses among them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

KEEPALIVE_EXPIRY = 4.0
#: the h1 engine never learns an idle expiry below this (seconds)
MIN_KEEPALIVE_EXPIRY = 0.25


# -- engine interface ---------------------------------------------------------------------------


class TransportError(Exception):
    """A request that got no usable HTTP response (connect, read or write failure, timeout, bad framing).

    ``str(exc)`` is ``"<kind>: <detail>"``; ``kind`` uses httpx's exception names.
    """

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.stale = False
        """True when a reused keep-alive connection was closed by the server before any byte of an
        answer arrived: the signature of a server closing an idle connection just as the request was
        sent, which it then never read (set by the h1 engine; the other engines cannot tell)."""
        self.answered = False
        """True when the answer had begun (status line received) and was cut off: the server handled the
        request (set by the h1 and aiohttp engines)."""


class Reply:
    """A complete HTTP response: status code and body bytes (``text`` decodes them on demand)."""

    __slots__ = ("status", "data", "charset", "content_type")

    def __init__(self, status: int, data: bytes, charset: str | None = None, content_type: str | None = None) -> None:
        self.status = status
        self.data = data
        self.charset = charset
        self.content_type = content_type
        """The Content-Type header as sent (None when absent)."""

    @property
    def text(self) -> str:
        """The body as text: the declared charset, else UTF-8; undecodable bytes replaced."""
        try:
            return self.data.decode(self.charset or "utf-8", errors="replace")
        except LookupError:
            return self.data.decode("utf-8", errors="replace")


class StreamReply:
    """A response whose body is read incrementally (``lines()``) or at once (``read()``)."""

    def __init__(self, status: int, chunks: AsyncIterator[bytes], charset: str | None,
                 content_type: str | None = None) -> None:
        self.status = status
        self._chunks = chunks
        self.charset = charset
        self.content_type = content_type
        """The Content-Type header as sent (None when absent)."""

    async def read(self) -> bytes:
        """The rest of the body."""
        return b"".join([chunk async for chunk in self._chunks])

    async def lines(self) -> AsyncIterator[str]:
        r"""The body's lines as text, split on ``\n``, ``\r\n`` or ``\r``, without their endings."""
        import codecs

        decoder = codecs.getincrementaldecoder(self.charset or "utf-8")(errors="replace")
        pending = ""
        async for chunk in self._chunks:
            text = pending + decoder.decode(chunk)
            # a trailing "\r" may be the first half of "\r\n": keep it for the next chunk
            hold_cr = text.endswith("\r")
            if hold_cr:
                text = text[:-1]
            parts = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
            pending = parts.pop() + ("\r" if hold_cr else "")
            for part in parts:
                yield part
        tail = (pending + decoder.decode(b"", final=True)).replace("\r\n", "\n").replace("\r", "\n")
        for part in tail.split("\n") if tail else []:
            yield part


_DEFAULT = object()
_MISSING = object()
_Parsed = TypeVar("_Parsed")


def parsed_once(cache: dict[str, Any], key: str, parse: Callable[[str], _Parsed]) -> _Parsed:
    """``parse(key)``, remembered in *cache* while it holds fewer than 64 entries.

    The clients send to a handful of fixed URLs and read a couple of Content-Types, so each is
    parsed once; the bound keeps an unusual caller from growing the cache without end.
    """
    value = cache.get(key, _MISSING)
    if value is _MISSING:
        value = parse(key)
        if len(cache) < 64:
            cache[key] = value
    parsed: _Parsed = value
    return parsed


class _Engine:
    def _settle(self, *, timeout: float, read_timeout: float | None, max_connections: int,
                keepalive_expiry: float) -> None:
        """Validate and keep the settings every pooling engine of ours shares."""
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self.timeout = timeout
        self.read_timeout = read_timeout
        self.max_connections = max_connections
        self.keepalive_expiry = keepalive_expiry

    async def request(self, method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None,
                      read_timeout: Any = _DEFAULT) -> Reply:
        raise NotImplementedError

    def stream(self, method: str, url: str, body: bytes | None = None,
               headers: Mapping[str, str] | None = None) -> Any:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError
