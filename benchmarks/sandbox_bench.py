"""Sandbox benchmark: step latency at 1 and 64 concurrent sessions over real HTTP, search latency on a
20,000-product catalog (in-process engine and as an HTTP `search[...]` step).

    .venv/bin/python -m benchmarks.sandbox_bench [--steps 3000] [--catalog-size 20000]

Prints a table and writes benchmarks/results/sandbox.json. Latencies are measured by the client
(request written → full response read) with a minimal keep-alive HTTP/1.1 client on asyncio streams,
so the numbers describe the server rather than a heavyweight client library. Targets (issue 3):
step p50 ≤ 2 ms, search p50 ≤ 10 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path

from shopsim_sandbox.catalog import load_catalog
from shopsim_sandbox.search import SearchIndex
from shopsim_sandbox.testing import SandboxServer

RESULTS = Path(__file__).resolve().parent / "results" / "sandbox.json"


class _Connection:
    """One keep-alive HTTP/1.1 connection that posts JSON and reads the JSON answer."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, body: dict) -> tuple[int, dict, float]:
        payload = json.dumps(body).encode()
        request = (f"POST /api/shop_agent HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload
        start = time.perf_counter()
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        data = await self.reader.readexactly(length)
        elapsed = time.perf_counter() - start
        return int(head.split(b" ", 2)[1]), json.loads(data)["result"], elapsed

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _session(conn: _Connection, task_ids: list[int], queries: dict[int, str], steps: int,
                   out: list[float]) -> None:
    """Play episodes (search, open, select, back, …) until `steps` interact latencies were recorded."""
    position = 0
    while len(out) < steps:
        task_id = task_ids[position % len(task_ids)]
        position += 1
        status, reset, _ = await conn.post({"action": "reset", "idx": task_id})
        assert status == 200, reset
        lease = {"env_idx": reset["env_idx"], "lease_id": reset["lease_id"]}
        state = reset["observation_state"]
        done = False
        for _ in range(28):
            if state["page_type"] == "search_home":
                action = f"search[{queries[task_id]}]"
            elif state["page_type"] == "search_results":
                asins = [a for a in state["actions"] if a[0].isdigit()]
                action = f"click[{asins[len(out) % len(asins)]}]" if asins else "click[back to search]"
            else:
                options = [a for a in state["actions"] if "=" in a]
                action = f"click[{options[0]}]" if options and state.get("missing_option_axes") else "click[< prev]"
            status, answer, elapsed = await conn.post({"action": "interact", **lease, "response": action})
            assert status == 200, answer
            out.append(elapsed)
            state = answer["observation_state"]
            if answer["done"] or len(out) >= steps:
                done = answer["done"]
                break
        if not done:
            await conn.post({"action": "terminate", **lease, "termination_reason": "action_limit"})
        await conn.post({"action": "release_one", **lease})


def _summary(latencies: list[float], wall: float | None = None) -> dict:
    ms = sorted(x * 1000.0 for x in latencies)
    q = statistics.quantiles(ms, n=100, method="inclusive")
    row = {"n": len(ms), "p50_ms": round(q[49], 3), "p90_ms": round(q[89], 3), "p99_ms": round(q[98], 3),
           "mean_ms": round(statistics.fmean(ms), 3)}
    if wall:
        row["throughput_per_s"] = round(len(ms) / wall, 1)
    return row


async def _step_latency(url: str, sessions: int, steps: int, task_ids: list[int], queries: dict[int, str]) -> dict:
    host, port = url.removeprefix("http://").split(":")
    conns = [_Connection(host, int(port)) for _ in range(sessions)]
    await asyncio.gather(*(c.open() for c in conns))
    per_session = max(1, steps // sessions)
    buckets: list[list[float]] = [[] for _ in range(sessions)]
    start = time.perf_counter()
    await asyncio.gather(*(_session(c, task_ids[i::sessions] or task_ids, queries, per_session, buckets[i])
                           for i, c in enumerate(conns)))
    wall = time.perf_counter() - start
    await asyncio.gather(*(c.close() for c in conns))
    return _summary([x for b in buckets for x in b], wall)


async def _search_over_http(url: str, queries: list[str], task_id: int) -> dict:
    host, port = url.removeprefix("http://").split(":")
    conn = _Connection(host, int(port))
    await conn.open()
    latencies = []
    status, reset, _ = await conn.post({"action": "reset", "idx": task_id})
    lease = {"env_idx": reset["env_idx"], "lease_id": reset["lease_id"]}
    count = 0
    for query in queries:
        if count >= 28:
            await conn.post({"action": "release_one", **lease})
            status, reset, _ = await conn.post({"action": "reset", "idx": task_id})
            lease = {"env_idx": reset["env_idx"], "lease_id": reset["lease_id"]}
            count = 0
        status, answer, elapsed = await conn.post({"action": "interact", **lease, "response": f"search[{query}]"})
        latencies.append(elapsed)
        await conn.post({"action": "interact", **lease, "response": "click[back to search]"})
        count += 2
    await conn.post({"action": "release_one", **lease})
    await conn.close()
    return _summary(latencies)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table and write benchmarks/results/sandbox.json."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3000, help="interact steps per concurrency level")
    parser.add_argument("--catalog-size", type=int, default=20_000, help="catalog size for the search benchmark")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results: dict = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                 "platform": platform.platform()}, "steps": {}, "search": {}}
    with SandboxServer(slots=64, policy=False) as server:
        catalog = load_catalog(server.catalog_file)
        task_ids = sorted(catalog.tasks)
        queries = {t: catalog.tasks[t].goal["instruction_text"] for t in task_ids}
        for sessions in (1, 64):
            asyncio.run(_step_latency(server.env_url, sessions, 200, task_ids, queries))  # warm-up
            results["steps"][f"{sessions}_sessions"] = asyncio.run(
                _step_latency(server.env_url, sessions, args.steps, task_ids, queries))
        results["steps"]["catalog_size"] = len(catalog.products)
    with SandboxServer(catalog_size=args.catalog_size, slots=4, policy=False) as server:
        catalog = load_catalog(server.catalog_file)
        tasks = list(catalog.tasks.values())
        queries = [t.goal["instruction_text"] for t in tasks[:300]] + \
                  [t.goal["instruction_simple"] for t in tasks[:300]] + [t.goal["name"] for t in tasks[:300]]
        start = time.perf_counter()
        index = SearchIndex(catalog.records, set(catalog.products))
        build_s = time.perf_counter() - start
        hits = []
        latencies = []
        for query in queries:
            t0 = time.perf_counter()
            _, found = index.search(query)
            latencies.append(time.perf_counter() - t0)
            hits.append(len(found))
        results["search"] = {
            "catalog_size": len(catalog.products),
            "index_build_s": round(build_s, 3),
            "engine": _summary(latencies),
            "http_search_step": asyncio.run(_search_over_http(server.env_url, queries, tasks[0].task_id)),
            "mean_hits": round(statistics.fmean(hits), 1),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(tmp, args.out)
    print(f"{'measurement':<40} {'n':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'steps/s':>9}")
    rows = [("step, 1 session (catalog %d)" % results["steps"]["catalog_size"], results["steps"]["1_sessions"]),
            ("step, 64 sessions", results["steps"]["64_sessions"]),
            ("search engine, %d products" % results["search"]["catalog_size"], results["search"]["engine"]),
            ("search[...] step over HTTP, %d products" % results["search"]["catalog_size"],
             results["search"]["http_search_step"])]
    for name, row in rows:
        print(f"{name:<40} {row['n']:>6} {row['p50_ms']:>8.3f} {row['p90_ms']:>8.3f} {row['p99_ms']:>8.3f} "
              f"{row.get('throughput_per_s', ''):>9}")
    print(f"index build {results['search']['index_build_s']} s; mean hits/query {results['search']['mean_hits']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
