"""HTTP engines side by side on the client's request shape, each in its own process.

    .venv/bin/python -m benchmarks.http_engines [--steps 6000] [--concurrency 64] [--repeats 3] [--quick]

Every engine plays the same episodes against the loopback stubs of `client_shape` (environment
stub: reset, 10 interactions answering 1–8 KB escaped observations, release; model stub: one
completion per step with a request body of the conversation so far, 2–40 KB): the HTTP work of an
episode without the runtime around it. Bodies are prebuilt bytes and responses are decoded with
the same orjson call everywhere, so the difference between rows is the engine. CPU is the child
process's own (rusage); ``loop`` counts only the request loop, ``process`` adds start-up (imports).

Engines:

* ``adapters``: the engine as the model and environment clients use it by default
  (``adapters._h1.H1Engine``: the event loop's transports with the httptools parser).
* ``adapters_aiohttp``: ``adapters._http.AiohttpEngine`` (``http_transport: aiohttp``).
* ``aiohttp``: ``aiohttp.ClientSession.post`` directly.
* ``pycurl``: libcurl's multi interface through pycurl, driven by the event loop (socket and timer
  callbacks; easy handles reused, so libcurl keeps its connections alive).
* ``httpx_aiohttp``: ``httpx.AsyncClient`` over ``httpx_aiohttp.AiohttpTransport``.
* ``httpx_aiohttp_bypass``: ``AiohttpTransport.handle_async_request(httpx.Request)`` (httpx's client
  layer bypassed).
* ``httpcore_bypass``: ``httpx.AsyncHTTPTransport.handle_async_request`` (httpx's own pool, client
  layer bypassed).
* ``httpx``: ``httpx.AsyncClient`` with its default pool.
* ``today``: ``httpx.AsyncClient`` over the former in-house ``StreamsTransport``, loaded from the
  commit before it was removed (read-only ``git show``; skipped outside a git checkout).

Writes benchmarks/results/http_engines.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._measure import machine_facts

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "http_engines.json"
SCHEMA = "shopsimrl-bench-http-engines-v1"
ENGINES = ("adapters", "adapters_aiohttp", "aiohttp", "pycurl", "httpx_aiohttp", "httpx_aiohttp_bypass",
           "httpcore_bypass", "httpx", "today")
EPISODE_STEPS = 10


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _model_bodies() -> list[bytes]:
    """Request bodies of steps 1..10: a conversation growing by ~3 KB of observation per step."""
    import orjson

    observation = "页面：搜索结果\n" + "- [B0010001] 不锈钢保温杯 500ml 大容量 | 价格：￥99.00\n" * 50
    messages: list[dict[str, Any]] = [{"role": "system", "content": "你是购物助手。" * 100},
                                      {"role": "user", "content": observation}]
    tools = [{"type": "function", "function": {"name": "click", "parameters": {"type": "object", "properties": {
        "value": {"type": "string", "enum": ["buy now", "next >", "back to search"]}}, "required": ["value"]}}}]
    bodies = []
    for step in range(EPISODE_STEPS):
        bodies.append(orjson.dumps({"model": "bench-stub", "messages": messages, "stream": False, "temperature": 0.0,
                                    "max_tokens": 512, "seed": step, "tools": tools, "tool_choice": "auto"}))
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{step}",
                        "type": "function",
                        "function": {"name": "click", "arguments": '{"value": "next >"}'},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"call_{step}", "content": observation})
    return bodies


class _Engine:
    """``post(url, body) -> bytes`` over one engine; ``aclose()``."""

    async def post(self, url: str, body: bytes) -> bytes:
        raise NotImplementedError

    async def aclose(self) -> None:
        pass


def _engine(name: str, limit: int) -> _Engine:
    headers = {"Content-Type": "application/json"}
    if name in ("adapters", "adapters_aiohttp"):
        from shopsimrl_core.adapters._http import build_engine

        mode = "aiohttp" if name == "adapters_aiohttp" else "auto"

        class Adapters(_Engine):
            # one engine per service, as the model and environment clients hold them
            def __init__(self) -> None:
                self.engines: dict[str, Any] = {}

            async def post(self, url: str, body: bytes) -> bytes:
                service = url.split("/", 3)[2]
                engine = self.engines.get(service)
                if engine is None:
                    engine = self.engines[service] = build_engine(
                        url, mode=mode, timeout=120, read_timeout=120, max_connections=limit, trust_env=False
                    )
                return (await engine.request("POST", url, body, headers)).data

            async def aclose(self) -> None:
                for engine in self.engines.values():
                    await engine.aclose()

        return Adapters()
    if name == "aiohttp":
        import aiohttp
        from yarl import URL

        class Aiohttp(_Engine):
            def __init__(self) -> None:
                # as the adapters use it: no cookie jar, URLs parsed once
                self.session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit),
                    timeout=aiohttp.ClientTimeout(total=None, sock_read=120),
                    cookie_jar=aiohttp.DummyCookieJar(),
                )
                self.urls: dict[str, URL] = {}

            async def post(self, url: str, body: bytes) -> bytes:
                parsed = self.urls.get(url)
                if parsed is None:
                    parsed = self.urls[url] = URL(url)
                async with self.session.post(parsed, data=body, headers=headers) as response:
                    return await response.read()

            async def aclose(self) -> None:
                await self.session.close()

        return Aiohttp()
    if name == "pycurl":
        return _CurlMulti(limit)
    import httpx

    if name in ("httpx_aiohttp_bypass", "httpcore_bypass"):
        if name == "httpcore_bypass":
            transport: Any = httpx.AsyncHTTPTransport(
                limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit)
            )
        else:
            from httpx_aiohttp import AiohttpTransport

            transport = AiohttpTransport()
        timeout = httpx.Timeout(120, pool=None).as_dict()

        class Bypass(_Engine):
            async def post(self, url: str, body: bytes) -> bytes:
                request = httpx.Request("POST", url, headers=headers, content=body, extensions={"timeout": timeout})
                response = await transport.handle_async_request(request)
                try:
                    return await response.aread()
                finally:
                    await response.aclose()

            async def aclose(self) -> None:
                await transport.aclose()

        return Bypass()
    if name == "httpx_aiohttp":
        from httpx_aiohttp import AiohttpTransport

        chosen: Any = AiohttpTransport()
    elif name == "today":
        chosen = _former_transport().StreamsTransport(max_connections=limit)
    else:
        chosen = None
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(120, pool=None),
        trust_env=False,
        transport=chosen,
        limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
    )

    class Httpx(_Engine):
        async def post(self, url: str, body: bytes) -> bytes:
            return (await client.post(url, content=body, headers=headers)).content

        async def aclose(self) -> None:
            await client.aclose()

    return Httpx()


class _CurlMulti(_Engine):
    """libcurl's multi interface on the running loop: libcurl asks which sockets to watch and when to
    wake it (``M_SOCKETFUNCTION`` / ``M_TIMERFUNCTION``); each readiness event is handed back to
    ``socket_action``, and finished transfers resolve their futures."""

    def __init__(self, limit: int) -> None:
        import pycurl

        self.pycurl = pycurl
        self.loop = asyncio.get_running_loop()
        self.multi = pycurl.CurlMulti()
        self.multi.setopt(pycurl.M_SOCKETFUNCTION, self._watch)
        self.multi.setopt(pycurl.M_TIMERFUNCTION, self._wake_in)
        self.multi.setopt(pycurl.M_MAX_TOTAL_CONNECTIONS, limit)
        self.timer: asyncio.TimerHandle | None = None
        self.watched: dict[int, int] = {}  # fd -> 1 read | 2 write
        self.handles: list[Any] = []
        self.pending: dict[Any, tuple[asyncio.Future[bytes], list[bytes]]] = {}

    def _watch(self, what: int, fd: int, multi: Any, data: Any) -> None:
        pc, loop = self.pycurl, self.loop
        had = self.watched.pop(fd, 0)
        want = 0 if what == pc.POLL_REMOVE else {pc.POLL_IN: 1, pc.POLL_OUT: 2, pc.POLL_INOUT: 3}.get(what, 0)
        if had & 1 and not want & 1:
            loop.remove_reader(fd)
        if had & 2 and not want & 2:
            loop.remove_writer(fd)
        if want & 1 and not had & 1:
            loop.add_reader(fd, self._act, fd, pc.CSELECT_IN)
        if want & 2 and not had & 2:
            loop.add_writer(fd, self._act, fd, pc.CSELECT_OUT)
        if want:
            self.watched[fd] = want

    def _wake_in(self, ms: int) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if ms >= 0:
            self.timer = self.loop.call_later(ms / 1000, self._act, self.pycurl.SOCKET_TIMEOUT, 0)

    def _act(self, fd: int, event: int) -> None:
        multi = self.multi
        while multi.socket_action(fd, event)[0] == self.pycurl.E_CALL_MULTI_PERFORM:
            pass
        while True:
            queued, done, failed = multi.info_read()
            for handle in done:
                multi.remove_handle(handle)
                future, parts = self.pending.pop(handle)
                self.handles.append(handle)
                if not future.done():
                    future.set_result(b"".join(parts))
            for handle, _code, message in failed:
                multi.remove_handle(handle)
                future, _ = self.pending.pop(handle)
                self.handles.append(handle)
                if not future.done():
                    future.set_exception(ConnectionError(message))
            if not queued:
                break

    async def post(self, url: str, body: bytes) -> bytes:
        pc = self.pycurl
        if self.handles:
            handle = self.handles.pop()
        else:
            handle = pc.Curl()
            handle.setopt(pc.HTTPHEADER, ["Content-Type: application/json", "Expect:"])
            handle.setopt(pc.NOSIGNAL, 1)
        parts: list[bytes] = []
        handle.setopt(pc.URL, url)
        handle.setopt(pc.POSTFIELDS, body)
        handle.setopt(pc.WRITEFUNCTION, parts.append)
        future: asyncio.Future[bytes] = self.loop.create_future()
        self.pending[handle] = (future, parts)
        self.multi.add_handle(handle)
        return await future

    async def aclose(self) -> None:
        for handle in self.handles:
            handle.close()
        self.multi.close()


async def _child_main(engine_name: str, env_url: str, model_url: str, steps: int, concurrency: int) -> dict[str, Any]:
    import orjson

    bodies = _model_bodies()
    engine = _engine(engine_name, concurrency)
    env = env_url + "/api/shop_agent"
    model = model_url + "/chat/completions"
    episodes = max(1, steps // EPISODE_STEPS)
    queue = list(range(episodes))
    done_steps = 0

    async def worker() -> None:
        nonlocal done_steps
        while queue:
            queue.pop()
            reset = orjson.loads(
                await engine.post(
                    env,
                    b'{"action":"reset","idx":0,"if_persona":true,'
                    b'"include_private_goal":false,"interaction_mode":"multi_turn"}',
                )
            )
            lease = reset["result"]
            lease_part = orjson.dumps({"env_idx": lease["env_idx"], "lease_id": lease["lease_id"]})[1:-1]
            for step in range(EPISODE_STEPS):
                answer = orjson.loads(await engine.post(model, bodies[step]))
                call = answer["choices"][0]["message"]["tool_calls"][0]
                result = orjson.loads(
                    await engine.post(
                        env,
                        b'{"action":"interact",'
                        + lease_part
                        + b',"response":'
                        + orjson.dumps(call["function"]["arguments"])
                        + b"}",
                    )
                )
                done_steps += 1
                if result["result"]["done"]:
                    break
            await engine.post(env, b'{"action":"release_one",' + lease_part + b"}")

    await engine.post(env_url + "/healthz", b"")  # warm-up: imports finished, first connection open
    cpu0, wall0 = _cpu(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - wall0, _cpu() - cpu0
    await engine.aclose()
    return {"steps": done_steps, "requests": done_steps * 2 + episodes * 2, "loop_wall_s": wall, "loop_cpu_s": cpu}


def _child(argv: list[str]) -> int:
    engine, env_url, model_url, steps, concurrency = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    runner: Any = asyncio.run
    if argv[5:6] == ["uvloop"]:
        import uvloop

        runner = uvloop.run
    result = runner(_child_main(engine, env_url, model_url, steps, concurrency))
    print(json.dumps(result))
    return 0


#: the last commit that had the in-house transport (shopsimrl_core/adapters/_transport.py)
FORMER_TRANSPORT = ("0074059", "shopsimrl_core/adapters/_transport.py")


def _former_source() -> str | None:
    commit, path = FORMER_TRANSPORT
    try:
        done = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _former_transport() -> Any:
    import types

    source = _former_source()
    if source is None:
        raise RuntimeError("the former transport's source is not available (no git checkout with its commit)")
    module = types.ModuleType("former_streams_transport")
    exec(compile(source, FORMER_TRANSPORT[1], "exec"), module.__dict__)
    return module


def _available(name: str) -> bool:
    return name != "today" or _former_source() is not None


def run_benchmark(
    *, steps: int, concurrency: int, repeats: int, engines: list[str], loop: str = "asyncio"
) -> dict[str, Any]:
    """Every engine *repeats* times, interleaved, on one pair of stubs."""
    from benchmarks._measure import _round, proc_cpu_seconds
    from benchmarks._stub_env import StubEnvServer
    from benchmarks._stub_model import StubModelServer

    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in engines}
    with StubEnvServer(EPISODE_STEPS) as env, StubModelServer() as model:
        for rep in range(repeats):
            for name in engines:
                print(f"{name} repeat {rep + 1}/{repeats}", file=sys.stderr, flush=True)
                srv0 = [proc_cpu_seconds(p) for p in (env.pid, model.pid)]
                wall0 = time.perf_counter()
                with tempfile.TemporaryFile() as out:
                    process = subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "benchmarks.http_engines",
                            "--child",
                            name,
                            env.env_url,
                            model.base_url,
                            str(steps),
                            str(concurrency),
                            loop,
                        ],
                        cwd=ROOT,
                        stdout=out,
                    )
                    _, status, usage = os.wait4(process.pid, 0)
                    wall = time.perf_counter() - wall0
                    out.seek(0)
                    text = out.read().decode()
                if os.waitstatus_to_exitcode(status) != 0:
                    raise RuntimeError(f"engine {name} failed (exit {os.waitstatus_to_exitcode(status)})")
                srv1 = [proc_cpu_seconds(p) for p in (env.pid, model.pid)]
                inner = json.loads(text.strip().splitlines()[-1])
                cpu = usage.ru_utime + usage.ru_stime
                runs[name].append(
                    {
                        **inner,
                        "process_wall_s": _round(wall),
                        "process_cpu_s": _round(cpu),
                        "loop_cpu_ms_per_step": _round(inner["loop_cpu_s"] * 1000 / inner["steps"]),
                        "process_cpu_ms_per_step": _round(cpu * 1000 / inner["steps"]),
                        "loop_steps_per_s": _round(inner["steps"] / inner["loop_wall_s"], 1),
                        "stub_cpu_ms_per_step": _round(sum(b - a for a, b in zip(srv0, srv1)) * 1000 / inner["steps"]),
                    }
                )
    rows: dict[str, Any] = {}
    for name, values in runs.items():
        row: dict[str, Any] = {"steps": values[0]["steps"], "requests": values[0]["requests"]}
        for key in (
            "loop_cpu_ms_per_step",
            "process_cpu_ms_per_step",
            "loop_steps_per_s",
            "process_cpu_s",
            "stub_cpu_ms_per_step",
        ):
            row[key] = _round(statistics.median(v[key] for v in values))
        row["runs"] = values
        rows[name] = row
    best = min(row["loop_cpu_ms_per_step"] for row in rows.values())
    for row in rows.values():
        row["loop_cpu_vs_best"] = _round(row["loop_cpu_ms_per_step"] / best)
    return rows


def format_table(rows: dict[str, Any]) -> str:
    """The comparison table."""
    head = (
        f"{'engine':<22} {'steps':>6} {'loop ms/step':>12} {'x best':>7} {'process ms/step':>15} "
        f"{'loop steps/s':>12} {'stub ms/step':>12}"
    )
    lines = [head, "-" * len(head)]
    for name, row in sorted(rows.items(), key=lambda item: item[1]["loop_cpu_ms_per_step"]):
        lines.append(
            f"{name:<22} {row['steps']:>6} {row['loop_cpu_ms_per_step']:>12.3f} {row['loop_cpu_vs_best']:>7.2f} "
            f"{row['process_cpu_ms_per_step']:>15.3f} {row['loop_steps_per_s']:>12.1f} "
            f"{row['stub_cpu_ms_per_step']:>12.3f}"
        )
    lines.append(
        "CPU of the client process (rusage; medians over repeats): loop = request loop only, process = with "
        "start-up; one step = one model POST + one environment POST (+ reset/release per 10 steps)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run every engine, print the table, write the JSON."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio", help="event loop of every client")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test; numbers meaningless)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    engines = [e for e in (x.strip() for x in args.engines.split(",")) if e]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"--engines: unknown {unknown}; choose from {', '.join(ENGINES)}")
    engines = [e for e in engines if _available(e)]
    if args.quick:
        args.steps, args.concurrency, args.repeats = 40, 4, 1
    if args.out is None:
        args.out = Path(tempfile.gettempdir()) / "shopsimrl-bench-quick" / RESULTS.name if args.quick else RESULTS
    started = time.perf_counter()
    rows = run_benchmark(
        steps=args.steps, concurrency=args.concurrency, repeats=args.repeats, engines=engines, loop=args.loop
    )
    doc = {
        "schema": SCHEMA,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_facts(("aiohttp", "httpx", "httpx-aiohttp", "httptools", "orjson", "pycurl", "uvloop")),
        "settings": {"steps": args.steps, "concurrency": args.concurrency, "repeats": args.repeats, "loop": args.loop},
        "engines": rows,
        "duration_s": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, args.out)
    print(format_table(rows))
    print(f"wrote {args.out} in {doc['duration_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
