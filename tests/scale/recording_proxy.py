"""An OpenAI-compatible endpoint in front of the sandbox policy that records every request it is sent.

One endpoint URL (so one ``shopsimrl/endpoint`` queue) serving several model names: ``GET /v1/models``
lists the sandbox's served model plus the *aliases*; a chat completion for an alias is passed to the
sandbox under its served name. Each request is logged with its arrival time (``time.time()``) and
the model it asked for, so a test can tell which run sent it. ``delay_s`` slows every completion
down, so a rollout lasts long enough to kill something in the middle of it; each delay is drawn from
[0.5, 1.5] × ``delay_s`` (seeded), so the episodes in flight do not step in lockstep and requests keep
arriving every fraction of a second rather than in one burst per ``delay_s``.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Request:
    """One request as it arrived."""

    at: float
    method: str
    path: str
    model: str | None


class RecordingProxy:
    """``RecordingProxy(upstream_v1, served_model, aliases).start()``; ``url`` ends in ``/v1``; ``requests``."""

    def __init__(self, upstream: str, served_model: str, aliases: list[str], delay_s: float = 0.0) -> None:
        self.upstream, self.served_model = upstream.rstrip("/"), served_model
        self.aliases, self.delay_s = aliases, delay_s
        self._rng = random.Random(20261202)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._client: httpx.AsyncClient | None = None

    def start(self) -> RecordingProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def completions(self, model: str | None = None) -> list[Request]:
        """The chat-completion requests received so far (for *model* only, when given)."""
        with self._lock:
            return [r for r in self.requests
                    if r.path.endswith("/chat/completions") and (model is None or r.model == model)]

    def _call(self, coro: object) -> object:
        future: Future[object] = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        return future.result(timeout=30)

    async def _listen(self) -> None:
        self._client = httpx.AsyncClient(timeout=120, trust_env=False)
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._client is not None:
            await self._client.aclose()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                pairs = (line.partition(":") for line in lines[1:] if line)
                headers = {k.strip().lower(): v.strip() for k, _, v in pairs}
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                status, payload = await self._answer(method, path, body, headers)
                writer.write(f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(payload)}"
                             f"\r\nconnection: keep-alive\r\n\r\n".encode("latin-1") + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()

    async def _answer(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        assert self._client is not None
        model = None
        if body:
            try:
                document = json.loads(body)
            except ValueError:
                document = None
            if isinstance(document, dict) and isinstance(document.get("model"), str):
                model = document["model"]
                if model in self.aliases:
                    document["model"] = self.served_model
                    body = json.dumps(document).encode()
        with self._lock:
            self.requests.append(Request(time.time(), method, path, model))
        if method == "GET" and path.rstrip("/").endswith("/models"):
            names = [self.served_model, *self.aliases]
            return 200, json.dumps({"object": "list", "data": [
                {"id": name, "object": "model", "owned_by": "proxy"} for name in names]}).encode()
        if self.delay_s and path.endswith("/chat/completions"):
            await asyncio.sleep(self.delay_s * (0.5 + self._rng.random()))
        suffix = path.split("/v1", 1)[1] if "/v1" in path else path
        forwarded = {k: v for k, v in headers.items() if k in ("authorization", "content-type")}
        response = await self._client.request(method, f"{self.upstream}{suffix}", content=body or None,
                                              headers=forwarded)
        content = response.content
        if model in self.aliases:
            try:
                document = json.loads(content)
                if isinstance(document, dict) and "model" in document:
                    document["model"] = model
                    content = json.dumps(document).encode()
            except ValueError:
                pass
        return response.status_code, content
