"""StreamsTransport against REAL loopback servers: uvicorn serving a Starlette app for well-behaved
HTTP, and raw asyncio servers for misbehaviour (dropped keep-alive connections, slow heads, broken
framing). Servers count requests and connections, so "never resent" is checked on the server side."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from shopsimrl_core.adapters._model import ChatModelClient, ModelRequestError
from shopsimrl_core.adapters._transport import StreamsTransport, _Connection

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


def client_for(transport: StreamsTransport, **timeouts: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(timeouts.pop("default", 10.0), **timeouts))


def pool_of(transport: StreamsTransport):
    (pool,) = transport._pools.values()
    return pool


def snap(client: httpx.AsyncClient) -> SimpleNamespace:
    """The pool's counters now (the pool itself is emptied when the client closes)."""
    pool = pool_of(client._transport)
    return SimpleNamespace(open=pool.open, idle=list(pool.idle), active=set(pool.active),
                           waiters=[w for w in pool.waiters if not w.done()])


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

    async def __aenter__(self) -> "RawServer":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = "http://127.0.0.1:%d" % self.server.sockets[0].getsockname()[1]
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


def test_keep_alive_reuses_one_connection(uvicorn_url):
    async def main():
        async with client_for(StreamsTransport()) as client:
            ports = set()
            for method in ("GET", "POST", "PUT", "POST"):
                response = await client.request(method, uvicorn_url + "/echo", content=b"x" * 10)
                assert response.status_code == 200 and response.json()["method"] == method
                ports.add(response.json()["client_port"])
            return ports, snap(client)

    ports, pool = run(main())
    assert len(ports) == 1  # the server saw every request on the same client socket
    assert pool.open == 1


def test_large_request_body_and_streamed_chunked_request_body(uvicorn_url):
    async def gen():
        for index in range(3):
            yield f"piece{index}".encode()

    async def main():
        async with client_for(StreamsTransport()) as client:
            big = await client.post(uvicorn_url + "/echo", content=b"a" * 300_000)
            streamed = await client.post(uvicorn_url + "/echo", content=gen())
            return big.json(), streamed.json()

    big, streamed = run(main())
    assert big["length"] == 300_000
    assert streamed["body"] == "piece0piece1piece2" and streamed["transfer_encoding"] == "chunked"


def test_chunked_response_is_decoded_and_connection_reused(uvicorn_url):
    async def main():
        async with client_for(StreamsTransport()) as client:
            first = await client.get(uvicorn_url + "/chunked")
            second = await client.get(uvicorn_url + "/echo")
            return first, second, snap(client)

    first, second, pool = run(main())
    assert first.headers["transfer-encoding"] == "chunked"
    assert first.text == "part-0;part-1;part-2;part-3;part-4;"
    assert second.status_code == 200 and pool.open == 1


def test_sse_events_arrive_incrementally(uvicorn_url):
    SSE_GATE.clear()

    async def main():
        seen = []
        async with client_for(StreamsTransport()) as client:
            async with client.stream("GET", uvicorn_url + "/sse") as response:
                async for line in response.aiter_lines():
                    seen.append(line)
                    if line == "data: first":
                        # the server holds the rest until we have read this event: a transport
                        # that buffered the whole body would never get here
                        SSE_GATE.set()
            return seen, snap(client)

    seen, pool = run(bounded(main()))
    assert [line for line in seen if line] == ["data: first", "data: second", "data: [DONE]"]
    assert len(pool.idle) == 1  # read to the end: back in the pool


def test_read_timeout_and_no_read_timeout(uvicorn_url):
    async def main():
        async with client_for(StreamsTransport(), read=0.2) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.get(uvicorn_url + "/slow?delay=2")
            pool = snap(client)
            assert pool.open == 0 and not pool.idle  # a timed-out connection is closed, not pooled
            # read=None (how `reset` is sent) waits as long as the server takes
            slow = await client.get(uvicorn_url + "/slow?delay=0.5", timeout=httpx.Timeout(5.0, read=None))
            return slow.json()

    assert run(main()) == {"slow": True}


def test_pool_timeout_and_waiter_gets_freed_connection(uvicorn_url):
    async def main():
        async with client_for(StreamsTransport(max_connections=1)) as client:
            holder = asyncio.create_task(client.get(uvicorn_url + "/slow?delay=0.5"))
            await asyncio.sleep(0.1)
            with pytest.raises(httpx.PoolTimeout):
                await client.get(uvicorn_url + "/echo", timeout=httpx.Timeout(5.0, pool=0.05))
            waiter = await client.get(uvicorn_url + "/echo", timeout=httpx.Timeout(5.0, pool=None))
            await holder
            return waiter.json(), snap(client)

    body, pool = run(bounded(main()))
    assert body["method"] == "GET" and pool.open == 1 and not pool.waiters


# -- misbehaving servers -----------------------------------------------------------------------


def test_server_closed_idle_connection_is_replaced_before_sending():
    async def handler(server, reader, writer, index):
        await server.next_request(reader, index)
        writer.write(ok())
        await writer.drain()  # then close the keep-alive connection (as an idle timeout would)

    async def main():
        async with RawServer(handler) as server, client_for(StreamsTransport()) as client:
            assert (await client.post(server.url + "/a", content=b"1")).text == "ok"
            await server.closed.wait()
            await asyncio.sleep(0.05)
            assert (await client.post(server.url + "/b", content=b"2")).text == "ok"
            return server

    server = run(bounded(main()))
    assert [r[2] for r in server.requests] == ["/a", "/b"] and server.connections == 2


def drop_second_request_handler(sent_response: list[int]):
    """Connection 0 answers its first request, reads the second and closes without answering."""

    async def handler(server, reader, writer, index):
        while await server.next_request(reader, index) is not None:
            if index == 0 and sum(1 for r in server.requests if r[0] == 0) == 2:
                return  # request read (it reached the server), no response
            writer.write(ok())
            await writer.drain()
            sent_response.append(index)

    return handler


def test_idempotent_request_is_resent_once_when_reused_connection_drops():
    async def main():
        async with RawServer(drop_second_request_handler([])) as server, client_for(StreamsTransport()) as client:
            await client.get(server.url + "/first")
            response = await client.get(server.url + "/second")
            return server, response

    server, response = run(bounded(main()))
    assert response.text == "ok"
    assert [(r[0], r[2]) for r in server.requests] == [(0, "/first"), (0, "/second"), (1, "/second")]


def test_post_is_never_resent_after_its_bytes_reached_the_server():
    async def main():
        async with RawServer(drop_second_request_handler([])) as server, client_for(StreamsTransport()) as client:
            await client.post(server.url + "/first", content=b"{}")
            with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
                await client.post(server.url + "/second", content=b'{"action": "interact"}')
            await asyncio.sleep(0.05)
            return server, snap(client)

    server, pool = run(bounded(main()))
    assert [(r[0], r[2]) for r in server.requests] == [(0, "/first"), (0, "/second")]  # no duplicate
    assert server.connections == 1 and pool.open == 0


def test_post_is_resent_when_the_kernel_refused_its_first_byte(monkeypatch):
    # the server resets the idle connection (RST); with the idle check bypassed the request is
    # written on the dead socket, no byte leaves, and the one resend goes on a fresh connection
    async def handler(server, reader, writer, index):
        await server.next_request(reader, index)
        writer.write(ok())
        await writer.drain()
        if index == 0:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            writer.transport.abort()
            return
        while await server.next_request(reader, index) is not None:
            writer.write(ok())
            await writer.drain()

    async def main():
        async with RawServer(handler) as server, client_for(StreamsTransport()) as client:
            await client.post(server.url + "/first", content=b"1")
            conn = pool_of(client._transport).idle[0]
            for _ in range(200):
                await asyncio.sleep(0.01)
                if conn.writer.transport.is_closing() or conn.reader.exception() is not None:
                    break
            monkeypatch.setattr(_Connection, "dead", lambda self: False)
            response = await client.post(server.url + "/second", content=b"2")
            return server, response

    server, response = run(bounded(main()))
    assert response.text == "ok"
    assert [(r[0], r[2]) for r in server.requests] == [(0, "/first"), (1, "/second")]


def test_slow_headers_time_out_and_the_connection_is_not_pooled():
    async def handler(server, reader, writer, index):
        await server.next_request(reader, index)
        await asyncio.sleep(1.0)
        writer.write(ok())
        await writer.drain()

    async def main():
        async with RawServer(handler) as server, client_for(StreamsTransport(), read=0.1) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post(server.url + "/x", content=b"1")
            return snap(client)

    pool = run(bounded(main()))
    assert pool.open == 0 and not pool.idle and not pool.active


def test_chunked_body_with_extensions_and_trailers_split_across_writes():
    async def handler(server, reader, writer, index):
        while await server.next_request(reader, index) is not None:
            for piece in (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n", b"\r\n5;ext=1\r\nhel",
                          b"lo\r\n6\r\n world\r\n0\r\nX-Trailer: yes\r\n", b"\r\n"):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.01)

    async def main():
        async with RawServer(handler) as server, client_for(StreamsTransport()) as client:
            first = await client.get(server.url + "/a")
            second = await client.get(server.url + "/b")
            return server, first.text, second.text

    server, first, second = run(bounded(main()))
    assert first == second == "hello world" and server.connections == 1


@pytest.mark.parametrize("reply, match", [
    (b"HTTP/1.1 2x0 OK\r\n\r\n", "malformed HTTP status line"),
    (b"SMTP ready\r\n\r\n", "malformed HTTP status line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b", "complete message body"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "middle of a chunk"),
    (b"HTTP/1.1 200 OK\r\nContent-Le", "middle of the response head"),
    (b"", "Server disconnected without sending a response"),
], ids=["status-code", "not-http", "partial-body", "chunk-size", "partial-chunk", "partial-head", "no-response"])
def test_broken_responses_raise_remote_protocol_error(reply, match):
    async def handler(server, reader, writer, index):
        await server.next_request(reader, index)
        writer.write(reply)
        await writer.drain()

    async def main():
        async with RawServer(handler) as server, client_for(StreamsTransport()) as client:
            with pytest.raises(httpx.RemoteProtocolError, match=match):
                await client.post(server.url + "/x", content=b"{}")
            return server, snap(client)

    server, pool = run(bounded(main()))
    assert len(server.requests) == 1  # a fresh connection is never resent
    assert pool.open == 0 and not pool.idle


def test_connection_close_header_and_http10_are_not_reused():
    async def handler(server, reader, writer, index):
        await server.next_request(reader, index)
        writer.write(ok(close=True) if index == 0 else b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    async def main():
        async with RawServer(handler) as server, client_for(StreamsTransport()) as client:
            await client.get(server.url + "/a")
            await client.get(server.url + "/b")
            await client.get(server.url + "/c")
            return server, snap(client)

    server, pool = run(bounded(main()))
    assert server.connections == 3 and pool.open == 0 and not pool.idle


def test_body_until_close_without_framing():
    async def handler(server, reader, writer, index):
        await server.next_request(reader, index)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nno framing at all")
        await writer.drain()

    async def main():
        async with RawServer(handler) as server, client_for(StreamsTransport()) as client:
            return (await client.get(server.url + "/a")).text, snap(client)

    text, pool = run(bounded(main()))
    assert text == "no framing at all" and pool.open == 0


def test_connect_errors():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now

    async def main():
        async with client_for(StreamsTransport()) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"http://127.0.0.1:{port}/")
            assert snap(client).open == 0

    run(bounded(main()))


def test_connect_timeout_on_a_full_accept_queue():
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
            async with client_for(StreamsTransport(), connect=0.3) as client:
                with pytest.raises(httpx.ConnectTimeout):
                    await client.get(f"http://127.0.0.1:{port}/")
                assert snap(client).open == 0

        run(bounded(main()))
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_write_timeout_when_the_server_never_reads():
    async def handler(server, reader, writer, index):
        await asyncio.sleep(5)

    async def main():
        async with RawServer(handler) as server, client_for(StreamsTransport(), write=0.3) as client:
            with pytest.raises(httpx.WriteTimeout):
                await client.post(server.url + "/x", content=b"z" * 64_000_000)
            return snap(client)

    pool = run(bounded(main(), 30))
    assert pool.open == 0


def test_pool_limit_and_fifo_waiters():
    async def handler(server, reader, writer, index):
        while await server.next_request(reader, index) is not None:
            await asyncio.sleep(0.02)
            writer.write(ok())
            await writer.drain()

    async def main():
        async with RawServer(handler) as server, client_for(StreamsTransport(max_connections=2)) as client:
            tasks = []
            for index in range(8):
                tasks.append(asyncio.create_task(client.get(f"{server.url}/{index}")))
                await asyncio.sleep(0)  # each request reaches the pool before the next starts
            await asyncio.gather(*tasks)
            return server, snap(client)

    server, pool = run(bounded(main()))
    assert server.max_open == 2 and server.connections == 2 and pool.open == 2
    assert [r[2] for r in server.requests] == [f"/{i}" for i in range(8)]  # served in arrival order


def test_cancellation_never_returns_a_broken_connection(uvicorn_url):
    SSE_GATE.clear()

    async def main():
        async with client_for(StreamsTransport(max_connections=1)) as client:
            pool = pool_of_after(client)
            # cancelled while waiting for the head
            slow = asyncio.create_task(client.get(uvicorn_url + "/slow?delay=2"))
            await asyncio.sleep(0.2)
            queued = asyncio.create_task(client.get(uvicorn_url + "/echo"))  # waits for the only slot
            await asyncio.sleep(0.05)
            queued.cancel()
            slow.cancel()
            for task in (slow, queued):
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert pool().open == 0 and not pool().idle and not pool().active and not [w for w in pool().waiters if not w.done()]
            # cancelled in the middle of a streamed body
            async def read_first_event():
                async with client.stream("GET", uvicorn_url + "/sse") as response:
                    async for line in response.aiter_lines():
                        if line:
                            await asyncio.sleep(10)
            reader = asyncio.create_task(read_first_event())
            await asyncio.sleep(0.3)
            reader.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reader
            assert pool().open == 0 and not pool().idle
            # the pool still works after all that
            return (await client.get(uvicorn_url + "/echo")).json()["method"], pool().open

    def pool_of_after(client):
        return lambda: snap(client)

    assert run(bounded(main())) == ("GET", 1)
    SSE_GATE.set()


def test_cancelled_waiter_passes_its_grant_on():
    async def handler(server, reader, writer, index):
        while await server.next_request(reader, index) is not None:
            await server.gate.wait()
            writer.write(ok())
            await writer.drain()

    async def main():
        async with RawServer(handler) as server, client_for(StreamsTransport(max_connections=1)) as client:
            server.gate = asyncio.Event()
            tasks: dict[str, asyncio.Task[Any]] = {}

            async def first_then_cancel_second():
                await client.get(server.url + "/1")  # its connection is handed to `second`'s waiter...
                tasks["second"].cancel()  # ...which is cancelled before it runs: the grant must reach `third`

            first = asyncio.create_task(first_then_cancel_second())
            await asyncio.sleep(0.05)
            tasks["second"] = asyncio.create_task(client.get(server.url + "/2"))
            third = asyncio.create_task(client.get(server.url + "/3"))
            await asyncio.sleep(0.05)
            server.gate.set()
            await first
            results = await asyncio.gather(tasks["second"], third, return_exceptions=True)
            return server, results, snap(client)

    server, results, pool = run(bounded(main()))
    assert isinstance(results[0], asyncio.CancelledError) and results[1].text == "ok"
    assert pool.open == 1 and [r[2] for r in server.requests] == ["/1", "/3"]


def test_aclose_closes_idle_and_busy_connections(uvicorn_url):
    async def main():
        async with RawServer(keep_alive_handler) as server:
            transport = StreamsTransport()
            client = client_for(transport)
            await client.get(server.url + "/a")
            await client.aclose()
            await asyncio.wait_for(server.closed.wait(), 5)
            with pytest.raises(RuntimeError):
                await transport.handle_async_request(httpx.Request("GET", server.url + "/b"))
            return server

    server = run(bounded(main()))
    assert server.open_connections == 0


def test_client_sockets_use_tcp_nodelay(uvicorn_url):
    async def main():
        async with client_for(StreamsTransport()) as client:
            await client.get(uvicorn_url + "/echo")
            conn = pool_of(client._transport).idle[0]
            return conn.writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)

    assert run(main()) != 0


def test_model_client_retries_transport_errors_like_httpx():
    # every attempt meets a server that drops the connection without answering: the model
    # adapter's own retry policy sees RemoteProtocolError and makes exactly max_retries attempts
    async def handler(server, reader, writer, index):
        await server.next_request(reader, index)

    async def main():
        async with RawServer(handler) as server:
            async with ChatModelClient(base_url=server.url + "/v1", model="m", api_key_env=None, max_retries=3,
                                       retry_backoff_seconds=0.0, trust_env=False, http_transport="streams") as model:
                assert isinstance(model._transport, StreamsTransport)
                with pytest.raises(ModelRequestError, match="after 3 attempts: RemoteProtocolError"):
                    await model.complete([{"role": "user", "content": "hi"}], None, seed=1)
            return server

    server = run(bounded(main()))
    assert len(server.requests) == 3 and server.connections == 3


def test_bodyless_responses_and_interim_responses_keep_the_connection():
    async def handler(server, reader, writer, index):
        while (request := await server.next_request(reader, index)) is not None:
            method, path, _ = request
            if path == "/no-content":
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            elif method == "HEAD":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")  # a HEAD answer has no body
            else:
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after-100"))
            await writer.drain()

    async def main():
        async with RawServer(handler) as server, client_for(StreamsTransport()) as client:
            no_content = await client.post(server.url + "/no-content", content=b"{}")
            head = await client.head(server.url + "/h")
            interim = await client.get(server.url + "/x")
            return server, no_content, head, interim, snap(client)

    server, no_content, head, interim, pool = run(bounded(main()))
    assert (no_content.status_code, no_content.content) == (204, b"")
    assert (head.status_code, head.content, head.headers["content-length"]) == (200, b"", "10")
    assert (interim.status_code, interim.text) == (200, "after-100")
    assert server.connections == 1 and pool.open == 1 and len(pool.idle) == 1


def test_idle_connections_past_keepalive_expiry_are_not_reused():
    async def main():
        async with RawServer(keep_alive_handler) as server, client_for(StreamsTransport(keepalive_expiry=0.05)) as client:
            await client.get(server.url + "/a")
            await asyncio.sleep(0.2)
            await client.get(server.url + "/b")
            return server, snap(client)

    server, pool = run(bounded(main()))
    assert [r[0] for r in server.requests] == [0, 1] and pool.open == 1


def test_connection_with_unrequested_bytes_is_not_reused():
    async def handler(server, reader, writer, index):
        while await server.next_request(reader, index) is not None:
            writer.write(ok(b"first") + ok(b"stray") if index == 0 else ok(b"second"))
            await writer.drain()

    async def main():
        async with RawServer(handler) as server, client_for(StreamsTransport()) as client:
            first = await client.get(server.url + "/a")
            await asyncio.sleep(0.05)
            second = await client.get(server.url + "/b")
            return server, first.text, second.text

    server, first, second = run(bounded(main()))
    assert (first, second) == ("first", "second") and server.connections == 2
