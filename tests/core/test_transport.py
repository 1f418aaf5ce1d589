"""The HTTP engines (adapters/_http.py) against REAL loopback servers: uvicorn serving a Starlette app
for well-behaved HTTP, raw asyncio servers for misbehaviour (dropped keep-alive connections, slow
heads, broken framing, a forward proxy), and a TLS server with a self-signed certificate. Servers
count requests and connections, so "never resent" is checked on the server side. Most fault tests
run against both engines (aiohttp, the default; httpx, used for the test seam and ``http_transport:
httpx``): the layers above rely on the same behaviour from either."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from testkit.loopback import make_certificate

from shopsimrl_core.adapters._h1 import H1Engine
from shopsimrl_core.adapters._http import AiohttpEngine, HttpxEngine, TransportError, build_engine
from shopsimrl_core.adapters._model import ChatModelClient, ModelRequestError

pytestmark = pytest.mark.timeout(60)


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


def bounded(coro: Awaitable[Any], seconds: float = 10.0) -> Awaitable[Any]:
    """Guard against a hang turning into a stuck test (not a speed assertion)."""
    return asyncio.wait_for(coro, seconds)


# -- a real uvicorn server in a background thread ------------------------------------------------

SSE_GATE = threading.Event()


async def echo(request: Request) -> Response:
    body = await request.body()
    client = request.scope["client"]
    return JSONResponse({"method": request.method, "length": len(body), "body": body.decode("utf-8", "replace"),
                         "client_port": client[1] if client else None,
                         "transfer_encoding": request.headers.get("transfer-encoding")})


async def chunked(request: Request) -> Response:
    async def parts():
        for index in range(5):
            yield f"part-{index};".encode()
            await asyncio.sleep(0)

    return StreamingResponse(parts(), media_type="text/plain")


async def sse(request: Request) -> Response:
    async def events():
        yield b"data: first\n\n"
        # the second event waits for the client to have seen the first one
        while not SSE_GATE.is_set():
            await asyncio.sleep(0.01)
        yield b"data: second\n\n"
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def slow(request: Request) -> Response:
    await asyncio.sleep(float(request.query_params.get("delay", "1")))
    return JSONResponse({"slow": True})


APP = Starlette(routes=[
    Route("/echo", echo, methods=["GET", "POST", "PUT"]),
    Route("/chunked", chunked),
    Route("/sse", sse),
    Route("/slow", slow),
])


@pytest.fixture(scope="module")
def uvicorn_url() -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(APP, log_level="warning", lifespan="off", timeout_keep_alive=30))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)
    sock.close()


ENGINES = ["h1", "aiohttp", "httpx"]


def engine(kind: str = "aiohttp", *, timeout: float = 10.0, read_timeout: float | None = 10.0, max_connections: int = 8,
           trust_env: bool = False, keepalive_expiry: float | None = None) -> Any:
    extra: dict[str, Any] = {} if keepalive_expiry is None else {"keepalive_expiry": keepalive_expiry}
    if kind == "h1":
        assert not trust_env, "the h1 engine never reads proxy variables"
        return H1Engine(timeout=timeout, read_timeout=read_timeout, max_connections=max_connections, **extra)
    cls = AiohttpEngine if kind == "aiohttp" else HttpxEngine
    return cls(timeout=timeout, read_timeout=read_timeout, max_connections=max_connections, trust_env=trust_env,
               **extra)


# -- a raw asyncio server for misbehaviour ---------------------------------------------------------

Handler = Callable[["RawServer", asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    """Read one request (Content-Length or chunked body); None when the client closed first."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body = b""
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            data = await reader.readexactly(size + 2)
            if size == 0:
                break
            body += data[:-2]
    return method, path, body


def ok(body: bytes = b"ok", *, close: bool = False) -> bytes:
    extra = b"Connection: close\r\n" if close else b""
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


class RawServer:
    """``asyncio.start_server`` on loopback that records every request and connection it sees."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[tuple[int, str, str, bytes]] = []  # (connection index, method, path, body)
        self.connections = 0
        self.open_connections = 0
        self.max_open = 0
        self.closed = asyncio.Event()
        self.url = ""

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = self.connections
        self.connections += 1
        self.open_connections += 1
        self.max_open = max(self.max_open, self.open_connections)
        try:
            await self.handler(self, reader, writer, index)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open_connections -= 1
            writer.close()
            self.closed.set()

    async def next_request(self, reader: asyncio.StreamReader, index: int) -> tuple[str, str, bytes] | None:
        request = await read_request(reader)
        if request is not None:
            self.requests.append((index, *request))
        return request


async def keep_alive_handler(server: RawServer, reader, writer, index) -> None:
    while await server.next_request(reader, index) is not None:
        writer.write(ok())
        await writer.drain()


# -- well-behaved server ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ENGINES)
def test_keep_alive_reuses_one_connection(uvicorn_url, kind):
    async def main():
        http = engine(kind)
        try:
            replies = [
                await http.request(
                    "POST", uvicorn_url + "/echo", b'{"n": %d}' % i, {"Content-Type": "application/json"}
                )
                for i in range(5)
            ]
        finally:
            await http.aclose()
        return [json.loads(r.data) for r in replies]

    bodies = run(bounded(main()))
    assert [b["body"] for b in bodies] == [f'{{"n": {i}}}' for i in range(5)]
    assert len({b["client_port"] for b in bodies}) == 1  # one connection carried all five


@pytest.mark.parametrize("kind", ENGINES)
def test_large_body_chunked_response_and_json_reply(uvicorn_url, kind):
    async def main():
        http = engine(kind)
        try:
            big = await http.request("POST", uvicorn_url + "/echo", b"x" * 3_000_000)
            parts = await http.request("GET", uvicorn_url + "/chunked")
            again = await http.request("GET", uvicorn_url + "/echo")
        finally:
            await http.aclose()
        return big, parts, again

    big, parts, again = run(bounded(main()))
    assert big.status == 200 and json.loads(big.data)["length"] == 3_000_000
    assert parts.data == b"".join(b"part-%d;" % i for i in range(5)) and parts.text.startswith("part-0")
    assert json.loads(again.data)["method"] == "GET" and again.content_type.startswith("application/json")


@pytest.mark.parametrize("kind", ENGINES)
def test_sse_lines_arrive_incrementally(uvicorn_url, kind):
    SSE_GATE.clear()

    async def main():
        http = engine(kind)
        seen = []
        try:
            async with http.stream("GET", uvicorn_url + "/sse") as reply:
                assert reply.status == 200
                async for line in reply.lines():
                    seen.append(line)
                    if line == "data: first":
                        SSE_GATE.set()  # the server sends the rest only after the client saw this
        finally:
            await http.aclose()
        return seen

    assert [line for line in run(bounded(main())) if line] == ["data: first", "data: second", "data: [DONE]"]


@pytest.mark.parametrize("kind", ENGINES)
def test_read_timeout_and_no_read_timeout(uvicorn_url, kind):
    async def main():
        http = engine(kind, read_timeout=0.2)
        try:
            with pytest.raises(TransportError, match="^ReadTimeout: ") as caught:
                await http.request("GET", uvicorn_url + "/slow?delay=1")
            waited = await http.request("GET", uvicorn_url + "/slow?delay=0.5", read_timeout=None)
            after = await http.request("GET", uvicorn_url + "/echo")
        finally:
            await http.aclose()
        return caught.value, waited, after

    error, waited, after = run(bounded(main()))
    assert error.kind == "ReadTimeout"
    assert json.loads(waited.data) == {"slow": True} and after.status == 200


@pytest.mark.parametrize("kind", ENGINES)
def test_pool_limit_queues_requests_without_a_pool_timeout(kind):
    async def handler(server, reader, writer, index):
        while await server.next_request(reader, index) is not None:
            await asyncio.sleep(0.1)
            writer.write(ok())
            await writer.drain()

    async def main():
        async with RawServer(handler) as server:
            http = engine(kind, max_connections=2, timeout=0.05)  # waiting for a slot is not a timeout
            try:
                replies = await asyncio.gather(*(http.request("GET", server.url + f"/{i}") for i in range(6)))
            finally:
                await http.aclose()
            return server, replies

    server, replies = run(bounded(main()))
    assert [r.data for r in replies] == [b"ok"] * 6
    assert server.max_open <= 2 and len(server.requests) == 6


# -- faults -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ENGINES)
def test_server_closed_idle_connection_is_replaced_before_sending(kind):
    async def handler(server, reader, writer, index):
        await server.next_request(reader, index)
        writer.write(ok())
        await writer.drain()  # then close the keep-alive connection (as an idle timeout would)

    async def main():
        async with RawServer(handler) as server:
            http = engine(kind)
            try:
                first = await http.request("POST", server.url + "/a", b"1")
                await server.closed.wait()
                await asyncio.sleep(0.05)
                second = await http.request("POST", server.url + "/b", b"2")
            finally:
                await http.aclose()
            return server, first, second

    server, first, second = run(bounded(main()))
    assert first.data == second.data == b"ok"
    assert [r[2] for r in server.requests] == ["/a", "/b"] and server.connections == 2


def drop_second_request_handler():
    """Connection 0 answers its first request, reads the second and closes without answering."""

    async def handler(server, reader, writer, index):
        while await server.next_request(reader, index) is not None:
            if index == 0 and sum(1 for r in server.requests if r[0] == 0) == 2:
                return  # request read (it reached the server), no response
            writer.write(ok())
            await writer.drain()

    return handler


@pytest.mark.parametrize("kind", ENGINES)
def test_post_is_never_resent_after_its_bytes_reached_the_server(kind):
    async def main():
        async with RawServer(drop_second_request_handler()) as server:
            http = engine(kind)
            try:
                await http.request("POST", server.url + "/first", b"{}")
                with pytest.raises(TransportError, match="^RemoteProtocolError: "):
                    await http.request("POST", server.url + "/second", b'{"action": "interact"}')
                after = await http.request("POST", server.url + "/third", b"{}")
            finally:
                await http.aclose()
            return server, after

    server, after = run(bounded(main()))
    assert [(r[0], r[2]) for r in server.requests] == [(0, "/first"), (0, "/second"), (1, "/third")]  # no duplicate
    assert after.data == b"ok"


@pytest.mark.parametrize("kind", ["h1", "aiohttp"])
def test_idempotent_request_is_resent_once_when_a_reused_connection_drops(kind):
    async def main():
        async with RawServer(drop_second_request_handler()) as server:
            http = engine(kind)
            try:
                await http.request("GET", server.url + "/first")
                reply = await http.request("GET", server.url + "/second")
            finally:
                await http.aclose()
            return server, reply

    server, reply = run(bounded(main()))
    assert reply.data == b"ok"
    assert [(r[0], r[2]) for r in server.requests] == [(0, "/first"), (0, "/second"), (1, "/second")]


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"SMTP ready\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"",
    ],
    ids=["status-code", "not-http", "partial-body", "chunk-size", "partial-chunk", "partial-head", "no-response"],
)
@pytest.mark.parametrize("kind", ENGINES)
def test_broken_responses_raise_a_protocol_error_and_are_not_resent(reply, kind):
    async def handler(server, reader, writer, index):
        await server.next_request(reader, index)
        writer.write(reply)
        await writer.drain()

    async def main():
        async with RawServer(handler) as server:
            http = engine(kind)
            try:
                with pytest.raises(TransportError) as caught:
                    await http.request("POST", server.url + "/x", b"{}")
            finally:
                await http.aclose()
            return server, caught.value

    server, error = run(bounded(main()))
    assert len(server.requests) == 1  # a request on a fresh connection is never resent
    assert error.kind in {"RemoteProtocolError", "ReadError"}, str(error)


@pytest.mark.parametrize("kind", ENGINES)
def test_connection_close_and_http10_and_unframed_bodies(kind):
    async def handler(server, reader, writer, index):
        await server.next_request(reader, index)
        if index == 0:
            writer.write(ok(b"closing", close=True))
        elif index == 1:
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhttp1")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nno framing at all")
        await writer.drain()

    async def main():
        async with RawServer(handler) as server:
            http = engine(kind)
            try:
                return server, [(await http.request("GET", server.url + f"/{i}")).data for i in range(3)]
            finally:
                await http.aclose()

    server, bodies = run(bounded(main()))
    assert bodies == [b"closing", b"http1", b"no framing at all"] and server.connections == 3


@pytest.mark.parametrize("kind", ENGINES)
def test_connect_errors(kind):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now

    async def main():
        http = engine(kind)
        try:
            with pytest.raises(TransportError, match="^ConnectError: "):
                await http.request("GET", f"http://127.0.0.1:{port}/")
        finally:
            await http.aclose()

    run(bounded(main()))


@pytest.mark.parametrize("kind", ENGINES)
def test_connect_timeout_on_a_full_accept_queue(kind):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):  # never accepted: the backlog fills and further SYNs are dropped
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)

        async def main():
            http = engine(kind, timeout=0.3, read_timeout=None)
            try:
                with pytest.raises(TransportError, match="^ConnectTimeout: "):
                    await http.request("GET", f"http://127.0.0.1:{port}/")
            finally:
                await http.aclose()

        run(bounded(main()))
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


@pytest.mark.parametrize("kind", ENGINES)
def test_a_server_that_never_reads_the_body_times_out(kind):
    # the server holds the connection far longer than the test's bound: only our timeout ends it
    async def handler(server, reader, writer, index):
        await asyncio.sleep(60)

    async def main():
        async with RawServer(handler) as server:
            http = engine(kind, timeout=0.3, read_timeout=0.3)
            try:
                with pytest.raises(TransportError) as caught:
                    await http.request("POST", server.url + "/x", b"z" * 64_000_000)
            finally:
                await http.aclose()
            return caught.value

    assert run(bounded(main(), 20)).kind == "WriteTimeout"


@pytest.mark.parametrize("kind", ENGINES)
def test_cancellation_never_returns_a_broken_connection(uvicorn_url, kind):
    SSE_GATE.clear()

    async def main():
        http = engine(kind, max_connections=1)
        try:
            slow = asyncio.create_task(http.request("GET", uvicorn_url + "/slow?delay=2"))
            await asyncio.sleep(0.2)
            queued = asyncio.create_task(http.request("GET", uvicorn_url + "/echo"))  # waits for the only slot
            await asyncio.sleep(0.05)
            queued.cancel()
            slow.cancel()
            for task in (slow, queued):
                with pytest.raises(asyncio.CancelledError):
                    await task

            async def read_first_event():  # cancelled in the middle of a streamed body
                async with http.stream("GET", uvicorn_url + "/sse") as reply:
                    async for line in reply.lines():
                        if line:
                            await asyncio.sleep(10)

            reader = asyncio.create_task(read_first_event())
            await asyncio.sleep(0.3)
            reader.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reader
            # the single-connection pool still works and answers the right request
            return json.loads((await http.request("POST", uvicorn_url + "/echo", b"after")).data)
        finally:
            await http.aclose()

    assert run(bounded(main()))["body"] == "after"
    SSE_GATE.set()


@pytest.mark.parametrize("kind", ENGINES)
def test_aclose_closes_connections_and_refuses_later_requests(kind):
    async def main():
        async with RawServer(keep_alive_handler) as server:
            http = engine(kind)
            await http.request("GET", server.url + "/a")
            await http.aclose()
            await asyncio.wait_for(server.closed.wait(), 5)
            with pytest.raises(RuntimeError):
                await http.request("GET", server.url + "/b")
            return server

    assert run(bounded(main())).open_connections == 0


@pytest.mark.parametrize("kind", ["h1", "aiohttp"])
def test_idle_connections_past_keepalive_expiry_are_not_reused(kind):
    async def main():
        async with RawServer(keep_alive_handler) as server:
            http = engine(kind, timeout=5, read_timeout=5, keepalive_expiry=0.05)
            try:
                await http.request("GET", server.url + "/a")
                await asyncio.sleep(0.3)
                await http.request("GET", server.url + "/b")
            finally:
                await http.aclose()
            return server

    assert [r[0] for r in run(bounded(main())).requests] == [0, 1]


def test_model_client_retries_transport_errors_over_the_default_engine():
    # every attempt meets a server that drops the connection without answering: the model
    # adapter's own retry policy sees RemoteProtocolError and makes exactly max_retries attempts
    async def handler(server, reader, writer, index):
        await server.next_request(reader, index)

    async def main():
        async with RawServer(handler) as server:
            async with ChatModelClient(
                base_url=server.url + "/v1",
                model="m",
                api_key_env=None,
                max_retries=3,
                retry_backoff_seconds=0.0,
                trust_env=False,
            ) as model:
                assert isinstance(model._http(), H1Engine)
                with pytest.raises(ModelRequestError, match="after 3 attempts: RemoteProtocolError"):
                    await model.complete([{"role": "user", "content": "hi"}], None, seed=1)
            return server

    server = run(bounded(main()))
    assert len(server.requests) == 3 and server.connections == 3


# -- what only the h1 engine has to do itself ------------------------------------------------------


def test_h1_decodes_gzip_skips_interim_responses_and_refuses_header_injection():
    import gzip

    packed = gzip.compress(b'{"packed": true}')

    async def handler(server, reader, writer, index):
        while await server.next_request(reader, index) is not None:
            if len(server.requests) == 1:  # a server that compresses although identity was asked for
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(packed), packed))
            else:
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after interim"))
            await writer.drain()

    async def main():
        async with RawServer(handler) as server:
            http = engine("h1")
            try:
                packed_reply = await http.request("POST", server.url + "/gz", b"{}")
                interim = await http.request("POST", server.url + "/interim", b"{}")
                await http.request("POST", server.url + "/商品?q=杯&x=%20", b"{}")  # non-ASCII: percent-encoded
                with pytest.raises(ValueError, match="line break"):
                    await http.request("POST", server.url + "/x", b"{}", {"X-Evil": "a\r\nX-Injected: 1"})
                with pytest.raises(ValueError, match="HEAD"):
                    await http.request("HEAD", server.url + "/x")
            finally:
                await http.aclose()
            return server, packed_reply, interim

    server, packed_reply, interim = run(bounded(main()))
    assert json.loads(packed_reply.data) == {"packed": True}
    assert interim.data == b"after interim" and interim.status == 200
    assert server.requests[2][2] == "/%E5%95%86%E5%93%81?q=%E6%9D%AF&x=%20"
    assert len(server.requests) == 3 and server.connections == 1  # refused requests never left the client


def test_h1_bound_counts_idle_connections_of_every_origin():
    async def main():
        async with RawServer(keep_alive_handler) as first, RawServer(keep_alive_handler) as second:
            http = engine("h1", max_connections=1)
            try:
                await http.request("GET", first.url + "/a")
                await http.request("GET", second.url + "/b")  # the idle connection to `first` makes room
                await asyncio.wait_for(first.closed.wait(), 5)
                await http.request("GET", second.url + "/c")
            finally:
                await http.aclose()
            return first, second

    first, second = run(bounded(main()))
    assert first.open_connections == 0 and first.connections == 1
    assert second.connections == 1 and [r[2] for r in second.requests] == ["/b", "/c"]


# -- proxies and TLS ----------------------------------------------------------------------------


async def proxy_handler(server, reader, writer, index):
    while await server.next_request(reader, index) is not None:
        writer.write(ok(b"via-proxy"))
        await writer.drain()


def test_trust_env_routes_through_an_http_proxy_and_honours_no_proxy(monkeypatch):
    for name in ("ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)

    async def main():
        async with RawServer(proxy_handler) as proxy, RawServer(keep_alive_handler) as target:
            monkeypatch.setenv("HTTP_PROXY", proxy.url)
            monkeypatch.setenv("http_proxy", proxy.url)
            trusting, ignoring = engine(trust_env=True), engine(trust_env=False)
            try:
                via = await trusting.request("GET", "http://shop.invalid/api/x")
                direct = await ignoring.request("GET", target.url + "/direct")
                monkeypatch.setenv("NO_PROXY", "127.0.0.1")
                monkeypatch.setenv("no_proxy", "127.0.0.1")
                bypass = await trusting.request("GET", target.url + "/bypass")
            finally:
                await trusting.aclose()
                await ignoring.aclose()
            return proxy, target, via, direct, bypass

    proxy, target, via, direct, bypass = run(bounded(main()))
    assert via.data == b"via-proxy" and [r[2] for r in proxy.requests] == ["http://shop.invalid/api/x"]
    assert direct.data == bypass.data == b"ok" and [r[2] for r in target.requests] == ["/direct", "/bypass"]


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """An HTTPS echo on loopback with a fresh self-signed certificate for 127.0.0.1."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = make_certificate(folder)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(APP, log_level="warning", lifespan="off", ssl_certfile=str(cert), ssl_keyfile=str(key))
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    assert server.started, "uvicorn (TLS) did not start"
    yield f"https://127.0.0.1:{port}", cert
    server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.mark.parametrize("kind", ["h1", "aiohttp"])
def test_https_verifies_certificates(tls_server, kind):
    url, cert = tls_server
    cls = {"h1": "shopsimrl_core.adapters._h1 import H1Engine as Engine",
           "aiohttp": "shopsimrl_core.adapters._http import AiohttpEngine as Engine"}[kind]

    async def main():
        http = engine(kind)
        try:
            with pytest.raises(TransportError, match="^ConnectError: .*certificate"):
                await http.request("GET", url + "/echo")
        finally:
            await http.aclose()

    run(bounded(main()))
    # trusted through the standard variable (read when the engine's TLS context is made): TLS works
    script = (
        f"import asyncio, json; from {cls}\n"
        "async def main():\n"
        "    http = Engine(timeout=5, read_timeout=5)\n"
        f"    reply = await http.request('POST', {url + '/echo'!r}, b'tls')\n"
        "    await http.aclose()\n"
        "    print(json.loads(reply.data)['body'])\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SSL_CERT_FILE": str(cert)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "tls"


def test_build_engine_picks_h1_and_an_explicit_transport_wins():
    import httpx

    assert isinstance(
        build_engine("https://x/v1", mode="auto", timeout=1, read_timeout=1, max_connections=1, trust_env=False),
        H1Engine,
    )
    assert isinstance(
        build_engine("https://x/v1", mode="aiohttp", timeout=1, read_timeout=1, max_connections=1, trust_env=False),
        AiohttpEngine,
    )
    assert isinstance(
        build_engine("http://x/v1", mode="httpx", timeout=1, read_timeout=1, max_connections=1, trust_env=False),
        HttpxEngine,
    )
    seam = build_engine(
        "http://x/v1",
        mode="aiohttp",
        timeout=1,
        read_timeout=1,
        max_connections=1,
        trust_env=False,
        transport=httpx.MockTransport(lambda request: httpx.Response(200, content=b"mocked")),
    )
    assert isinstance(seam, HttpxEngine)
    assert run(seam.request("GET", "http://x/v1")).data == b"mocked"
