"""A TCP relay on a fixed loopback port in front of a real server, that the test can take down and bring back.

A replica or environment server "dies" when the relay stops listening and drops its connections
(clients see connection refused/reset, as with a crashed server) and "comes back" on the same URL
when it listens again; bytes in between are passed through untouched. It runs its own event loop
in a thread so the code under test (in another loop) sees an ordinary remote server.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from concurrent.futures import Future


class Relay:
    """``Relay(target_port).start()``; ``url`` is ``http://127.0.0.1:<port>``; ``down()`` / ``up()``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def _call(self, coro: object) -> object:
        future: Future[object] = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        return future.result(timeout=30)

    def start(self) -> Relay:
        self._thread.start()
        self.up()
        return self

    def up(self) -> None:
        """Listen (again) on the relay's port."""
        self._call(self._listen())

    def down(self) -> None:
        """Stop listening and reset every open connection."""
        self._call(self._close())

    def stop(self) -> None:
        self.down()
        self._call(self._cancel_pipes())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _cancel_pipes(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port, reuse_address=True)

    async def _close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            transport = writer.transport
            transport.abort()
        self._writers.clear()
        if server is not None:
            await server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)
        self._writers.difference_update((writer, up_writer))
