"""A minimal HTTP/1.1 server for benchmark stubs: keep-alive, Content-Length bodies, loopback only.

The stubs must cost as little CPU as possible (they share a small machine with the client being
measured), so this is an ``asyncio.Protocol`` on uvloop when available: no streams, no framework.
A handler gets ``(method, path, body)`` and returns ``(delay_seconds, response_bytes)``; a delay is
served with ``call_later`` (a stand-in for model decode time) instead of a task per request.
Requests on one connection are answered in order (clients here never pipeline).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Handler = Callable[[str, str, bytes], tuple[float, bytes]]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 409: "Conflict"}


def response(status: int, data: bytes, content_type: str = "application/json") -> bytes:
    """A complete HTTP/1.1 response with *data* as its Content-Length body."""
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(data)}\r\n\r\n")
    return head.encode("ascii") + data


class _Protocol(asyncio.Protocol):
    __slots__ = ("handler", "buffer", "transport", "loop")

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buffer[:end]).decode("latin-1").split("\r\n")
            length, close = 0, False
            for line in head[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name == "connection" and value.strip().lower() == "close":
                    close = True
            if len(buffer) < end + 4 + length:
                return
            body = bytes(buffer[end + 4:end + 4 + length])
            del buffer[:end + 4 + length]
            method, path, _ = head[0].split(" ", 2)
            delay, out = self.handler(method, path, body)
            if delay > 0:
                self.loop.call_later(delay, self._send, out, close)
            else:
                self._send(out, close)

    def _send(self, out: bytes, close: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(out)
        if close:
            transport.close()


async def _serve(handler: Handler, port: int, ready_file: Path | None) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Protocol(handler), "127.0.0.1", port, backlog=4096)
    bound = server.sockets[0].getsockname()[1]
    if ready_file is not None:
        tmp = ready_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"port": bound}))
        os.replace(tmp, ready_file)
    async with server:
        await server.serve_forever()


def serve_forever(handler: Handler, port: int, ready_file: Path | None) -> int:
    """Serve *handler* on 127.0.0.1:*port* until SIGTERM/SIGINT (uvloop when installed)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        runner(_serve(handler, port, ready_file))
    except (KeyboardInterrupt, SystemExit):
        pass
    return 0


class StubProcess:
    """Context manager: ``python -m <module> --ready-file F <args>`` on a free loopback port.

    Attributes after start: ``port`` and ``pid``.
    """

    def __init__(self, module: str, args: list[str]) -> None:
        self.module = module
        self.args = args
        self.port = 0
        self.pid: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> StubProcess:
        self._dir = tempfile.TemporaryDirectory(prefix="bench-stub-")
        ready = Path(self._dir.name) / "ready.json"
        root = Path(__file__).resolve().parent.parent
        self._process = subprocess.Popen([sys.executable, "-m", self.module, "--ready-file", str(ready), *self.args],
                                         cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not ready.exists():
            if self._process.poll() is not None:
                err = self._process.stderr.read().decode(errors="replace") if self._process.stderr else ""
                raise RuntimeError(f"{self.module} exited with code {self._process.returncode}: {err[-1000:]}")
            if time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"{self.module} did not start within 30 s")
            time.sleep(0.02)
        self.port = int(json.loads(ready.read_text())["port"])
        self.pid = self._process.pid
        return self

    def __exit__(self, *exc: Any) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if process is not None and process.stderr is not None:
            process.stderr.close()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
